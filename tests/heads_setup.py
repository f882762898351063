"""Shared set-up of the feature-head tests (their tiny target is `specjax.testing.tiny_llama`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.loop import init_jit, step_jit
from specjax.decoding.prompts import pad_prompts


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
