"""Tiny models shared by the beam-search tests (vocab 8, so the reference is cheap)."""

from __future__ import annotations

import functools

import numpy as np

from specjax.models import NgramLM, TransformerConfig, TransformerLM, UniformLM, fit_ngram
from tests.beam_reference import full_logp
from tests.decoding_setup import random_params

V = 8
CACHE_LEN = 32
MAX_NEW = 8

TARGET = TransformerLM(
    TransformerConfig.gpt2(V, num_layers=2, embed_dim=16, num_heads=2, mlp_dim=32, max_len=32)
)
SMALL = TransformerLM(
    TransformerConfig.llama(V, num_layers=1, embed_dim=8, num_heads=2, mlp_dim=16, max_len=32)
)

# Ragged prompts in one 16-token bucket; one has a single token (nothing to prefill).
PROMPTS = (
    np.array([1, 2, 3], np.int32),
    np.array([4], np.int32),
    np.array([5, 6, 7, 0, 1, 2, 6, 6], np.int32),
)


@functools.cache
def target_params() -> dict:
    # Weights of scale 0.5: peaked, context-dependent distributions (like a trained model's).
    return random_params(TARGET, seed=0, scale=0.5)


@functools.cache
def reference_logp():
    """tokens -> float64 next-token log-probabilities of TARGET, without caches."""
    return full_logp(TARGET, target_params(), CACHE_LEN)


@functools.cache
def drafts() -> dict:
    """name -> (draft model, params)."""
    corpus = np.random.default_rng(2).integers(0, V, size=500)
    return {
        "self": (TARGET, target_params()),
        "small": (SMALL, random_params(SMALL, seed=4, scale=0.5)),
        "bigram": (NgramLM(V, 2), fit_ngram(corpus, V, 2)),
        "uniform": (UniformLM(V), {}),
    }
