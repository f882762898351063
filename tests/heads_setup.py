"""Shared set-up of the feature-head tests: a tiny random Llama-shaped target."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.loop import init_jit, step_jit
from specjax.decoding.prompts import pad_prompts
from specjax.models import TransformerConfig, TransformerLM


def tiny_llama(vocab: int, seed: int = 0, embed: int = 16):
    cfg = TransformerConfig(
        vocab_size=vocab, num_layers=2, num_heads=2, num_kv_heads=1, embed_dim=embed,
        mlp_dim=32, max_len=64, norm="rmsnorm", positions="rope", mlp="swiglu",
        tie_embeddings=True,
    )  # fmt: skip
    model = TransformerLM(cfg)
    params = model.init_params(jax.random.PRNGKey(seed))
    # Larger logits than the 0.02 init gives: a target law far from uniform.
    params = jax.tree.map(
        lambda x: jax.device_put(np.asarray(x) * 8.0) if x.ndim == 2 else x, params
    )
    return model, params


def stepped_state(dec, tp, hp, vocab: int, steps: int = 4):
    """A decoder's loop state after `steps` iterations on three ragged prompts (one of a single
    token), for tests that read what the drafter holds."""
    prompts = [np.array([1, 2, 3, 4, 5]), np.array([7]), np.array([3, 3, 9])]
    tokens, lengths = pad_prompts(prompts, vocab)
    s = init_jit(dec, (tp, hp), jnp.asarray(tokens), jnp.asarray(lengths),
                 jax.random.PRNGKey(3), 12, -1)  # fmt: skip
    for _ in range(steps):
        s = step_jit(dec, (tp, hp), s)
    return s
