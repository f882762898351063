"""The models, parameters and sharded programs described by configs/scale.py.

Shared by scripts/run_sharded.py (runs them) and scripts/aot_compile_check.py (compiles them for
a TPU topology without running), so both check the very same programs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax import sharding as sh
from specjax.decoding import ShardedDecoder, SpeculativeDecoder, make_warper
from specjax.models import TransformerLM, build
from specjax.training.optim import make_optimizer
from specjax.training.sharded import shard_train_step, train_state_shardings
from specjax.training.steps import init_train_state, make_train_step


def build_models(config) -> tuple[TransformerLM, TransformerLM]:
    """(target, draft) TransformerLMs from the config's sizes (Llama family)."""

    def one(fields) -> TransformerLM:
        return TransformerLM(
            build.model_config(
                fields,
                config.vocab_size,
                family="llama",
                max_len=max(config.cache_len, config.seq_len),
                dtype=config.dtype,
                param_dtype=config.dtype,
            )
        )

    target = one(config.target)
    draft = target if config.draft.size == "self" else one(config.draft)
    return target, draft


def load_params(config, target: TransformerLM, draft: TransformerLM):
    """Parameters of both models: checkpoints if the config names them, else random.

    Every process computes the same values (same seeds / same files), as `sharding.put` needs.
    Random weights come from the models' own eager `init_params` (not `build.init_params`,
    which jits it), so they stay bit-identical to earlier runs on every backend.

    Returns:
      (target, draft, target_params, draft_params): models are replaced by the checkpoints'.
    """
    from specjax import checkpoint as checkpoint_lib

    key_t, key_d = jax.random.split(jax.random.PRNGKey(config.seed))
    if config.target_checkpoint:
        target, target_params, _ = checkpoint_lib.load_model(config.target_checkpoint)
    else:
        target_params = target.init_params(key_t)
    if config.draft.size == "self":
        return target, target, target_params, target_params
    if config.draft_checkpoint:
        draft, draft_params, _ = checkpoint_lib.load_model(config.draft_checkpoint)
    else:
        draft_params = draft.init_params(key_d)
    return target, draft, target_params, draft_params


def sharded_decoder(config, target, draft, mesh) -> ShardedDecoder:
    """The speculative decoder of the config on `mesh` (draft replicated per config.mesh)."""
    decoder = SpeculativeDecoder(
        target,
        draft,
        config.gamma,
        make_warper(temperature=config.temperature),
        cache_len=config.cache_len,
    )
    return ShardedDecoder(
        decoder,
        mesh,
        sh.rules_from_config(config.mesh),
        replicate_draft=config.mesh.replicate_draft,
    )


def train_program(config, model, mesh):
    """(jitted sharded train step, abstract TrainState, state shardings) for the config."""
    tx = make_optimizer(
        total_steps=max(config.train_steps, 2),
        peak_lr=config.peak_lr,
        warmup_steps=1,
    )
    rules = sh.rules_from_config(config.mesh)
    abstract = jax.eval_shape(
        lambda key: init_train_state(model.init_params(key), tx), jax.random.PRNGKey(0)
    )
    shardings = train_state_shardings(abstract, model, mesh, rules)
    step = shard_train_step(make_train_step(model, tx), shardings, mesh, rules)
    return step, abstract, shardings, tx


def abstract_batch(config):
    """The abstract train batch: int32 [train_batch_size, seq_len + 1]."""
    return jax.ShapeDtypeStruct((config.train_batch_size, config.seq_len + 1), jnp.int32)
