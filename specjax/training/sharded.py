"""Data- and tensor-parallel training: the pure steps of `specjax.training.steps` on a mesh.

The steps are plain functions of pytrees; this module only says where their inputs and outputs
live and jits them with those shardings:

  * batches [batch, seq_len + 1] split by rows over `data` (each data shard computes gradients
    of its rows; the partitioner inserts the gradient all-reduce over `data`);
  * parameters split by the logical-axis rules (tensor parallel over `model`), and every Adam
    moment split exactly like its parameter, so the update is local to each device;
  * the step counter and metrics replicated.

The train state is donated: its buffers are overwritten by the new state, so a step needs no
second copy of params and moments in memory.

    shardings = train_state_shardings(state, model, mesh, rules)
    state = sharding.put(state, shardings)
    step = shard_train_step(make_train_step(model, tx), shardings, mesh, rules)
    state, metrics = step(state, sharding.put(batch, sharding.batch_sharding(mesh, rules, 2)))
"""

from __future__ import annotations

from collections.abc import Callable

import jax
from jax.sharding import Mesh

from specjax import sharding as sh
from specjax.training.steps import TrainState


def train_state_shardings(state: TrainState, model, mesh: Mesh, rules) -> TrainState:
    """Shardings of a TrainState (concrete or abstract).

    Args:
      state: the TrainState or `jax.eval_shape` of it.
      model: the trained model (its `logical_axes()` names the parameter axes).
      mesh: the Mesh.
      rules: logical-axis rules, each naming an axis the model declares (a misspelt one is
        refused rather than left unapplied).

    Returns:
      A TrainState whose leaves are NamedSharding.
    """
    sh.check_rules(mesh, rules, sh.declared_axes([model]))
    params = sh.param_shardings(model, state.params, mesh, rules)
    return TrainState(
        step=sh.replicated(mesh),
        params=params,
        opt_state=sh.opt_state_shardings(state.opt_state, state.params, params, mesh),
    )


def shard_train_step(
    train_step: Callable, state_shardings: TrainState, mesh: Mesh, rules
) -> Callable:
    """Jits `train_step(state, batch) -> (state, metrics)` with explicit shardings.

    Args:
      train_step: from `specjax.training.steps.make_train_step`.
      state_shardings: from `train_state_shardings`.
      mesh: the Mesh.
      rules: logical-axis rules (the `batch` rule splits the batch rows).

    Returns:
      The jitted step; it donates the state (pass a placed state, keep only the returned one).
      The batch's rows must be divisible by the data-parallel size.
    """
    rep = sh.replicated(mesh)
    return jax.jit(
        train_step,
        in_shardings=(state_shardings, sh.batch_sharding(mesh, rules, 2)),
        out_shardings=(state_shardings, rep),
        donate_argnums=0,
    )


def shard_eval_step(eval_step: Callable, param_shardings, mesh: Mesh, rules) -> Callable:
    """Jits `eval_step(params, batch, valid) -> sums` with explicit shardings.

    Args:
      eval_step: from `specjax.training.steps.make_eval_step`.
      param_shardings: the params' shardings (`train_state_shardings(...).params`).
      mesh: the Mesh.
      rules: logical-axis rules.

    Returns:
      The jitted step (nothing donated: params are reused by the caller); sums are replicated.
    """
    return jax.jit(
        eval_step,
        in_shardings=(
            param_shardings,
            sh.batch_sharding(mesh, rules, 2),
            sh.batch_sharding(mesh, rules, 1),
        ),
        out_shardings=sh.replicated(mesh),
    )
