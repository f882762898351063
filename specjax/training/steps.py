"""Pure training and evaluation steps of a language model: `train_step(state, batch)`.

Steps are plain functions of pytrees, jitted by the caller, so a later mesh can add
`in_shardings`/`out_shardings` without touching them. A batch is int32 [batch, seq_len + 1]
token windows (`specjax.data.batch_at`): inputs are [:, :-1], targets [:, 1:].
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

# `sequence_logits` (now in specjax.models.sequence) and `spread_eval_batches` (now in
# specjax.data.batches) lived here; both stay importable from this module.
from specjax.data.batches import spread_eval_batches
from specjax.data.tokenizer import NUM_BYTES, PAD_ID
from specjax.models.sequence import sequence_logits


@struct.dataclass
class TrainState:
    """What a training step carries from one step to the next (and what a checkpoint holds).

    Attributes:
      step: int32 [], number of completed steps (= the data step of the next batch).
      params: the trained parameters.
      opt_state: the optimizer state (its step count drives the learning-rate schedule).
    """

    step: jax.Array
    params: Any
    opt_state: Any


def init_train_state(params, tx: optax.GradientTransformation, step: int = 0) -> TrainState:
    """A state at `step` with a fresh optimizer state for `params`."""
    return TrainState(jnp.asarray(step, jnp.int32), params, tx.init(params))


def token_nll(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """Negative log-likelihood (nats) of each target: float32 [batch, T] from [batch, T, vocab]."""
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets)


def make_train_step(model, tx: optax.GradientTransformation) -> Callable:
    """Builds `train_step(state, batch) -> (state, metrics)` for next-token cross-entropy.

    Args:
      model: a `TransformerLM` (any differentiable model of the decoding interface).
      tx: the optimizer (e.g. `make_optimizer`).

    Returns:
      A pure function; batch is int32 [batch, seq_len + 1]; metrics holds float32 scalars
      "loss" (mean nats per target) and "grad_norm" (before clipping).
    """

    def train_step(state: TrainState, batch: jax.Array):
        inputs, targets = batch[:, :-1], batch[:, 1:]  # [batch, T] each

        def loss_fn(params):
            return token_nll(sequence_logits(model, params, inputs), targets).mean()

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads)}
        return TrainState(state.step + 1, params, opt_state), metrics

    return train_step


def make_eval_step(model) -> Callable:
    """Builds `eval_step(params, batch, valid) -> sums` for loss and bits per byte.

    Args:
      model: the model to evaluate.

    Returns:
      A pure function: batch int32 [batch, seq_len + 1], valid bool [batch] (False marks the
      padding rows of the last eval batch); sums is a dict of float32 scalars: "nll" (nats over
      counted targets), "tokens" (counted targets: all but PAD) and "bytes" (counted targets that
      are bytes, i.e. not BOS/EOS).
    """

    def eval_step(params, batch: jax.Array, valid: jax.Array):
        inputs, targets = batch[:, :-1], batch[:, 1:]  # [batch, T] each
        nll = token_nll(sequence_logits(model, params, inputs), targets)  # [batch, T]
        counted = valid[:, None] & (targets != PAD_ID)  # [batch, T]
        is_byte = counted & (targets < NUM_BYTES)  # [batch, T]
        return {
            "nll": jnp.sum(jnp.where(counted, nll, 0.0)),
            "tokens": jnp.sum(counted).astype(jnp.float32),
            "bytes": jnp.sum(is_byte).astype(jnp.float32),
        }

    return eval_step


def evaluate(
    eval_step: Callable,
    params,
    tokens,
    seq_len: int,
    batch_size: int,
    max_windows: int | None = None,
) -> dict:
    """Loss and bits per byte over the fixed evaluation windows of a split.

    Bits per byte is the code length of the text under the model (every target but PAD,
    document delimiters included) divided by the number of byte targets, so it compares across
    tokenizers; with our byte tokenizer it is loss / ln 2 up to the delimiters' share.

    Args:
      eval_step: from `make_eval_step` (jitted by the caller).
      params: model parameters.
      tokens: 1-D token ids of the split.
      seq_len: window length (as in training).
      batch_size: windows per call (one compiled shape for the whole pass).
      max_windows: evaluate this many evenly spread windows (`spread_eval_batches`); None: all.

    Returns:
      {"loss": nats per token, "bits_per_byte": float, "tokens": int} (Python numbers).
    """
    totals = {"nll": 0.0, "tokens": 0.0, "bytes": 0.0}
    for windows, valid in spread_eval_batches(tokens, seq_len, batch_size, max_windows):
        sums = jax.device_get(eval_step(params, jnp.asarray(windows), jnp.asarray(valid)))
        for k in totals:  # float64 on the host: long evaluations would lose digits in float32
            totals[k] += float(np.asarray(sums[k]))
    if totals["tokens"] == 0 or totals["bytes"] == 0:
        raise ValueError("evaluation saw no targets: the split is shorter than one window")
    return {
        "loss": totals["nll"] / totals["tokens"],
        "bits_per_byte": totals["nll"] / math.log(2.0) / totals["bytes"],
        "tokens": int(totals["tokens"]),
    }
