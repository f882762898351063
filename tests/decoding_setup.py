"""Tiny models and prompts shared by the decoding tests (imported by tests/test_decoding_*.py).

Everything is built once per process (`functools.cache`), and decoders are frozen dataclasses
that compare equal when built from the same pieces, so two test files that build the same decoder
share its compiled programs (jit caches key on the static decoder's hash and the shapes).
Compilation dominates the run time of these tests (2-4 s per program on 2 cores), so the test
files reuse a handful of decoders and one prompt bucket.
"""

from __future__ import annotations

import functools

import jax
import numpy as np

from specjax.decoding import AutoregressiveDecoder, SpeculativeDecoder, make_warper
from specjax.models import (
    NgramLM,
    PromptLookupLM,
    TransformerConfig,
    TransformerLM,
    UniformLM,
    fit_ngram,
)

V = 64
CACHE_LEN = 64
GAMMA = 4
MAX_NEW = 24

TARGET = TransformerLM(
    TransformerConfig.gpt2(V, num_layers=2, embed_dim=64, num_heads=4, mlp_dim=128, max_len=64)
)
# Llama-style target with grouped-query attention (4 query heads, 2 key/value heads).
LLAMA_TARGET = TransformerLM(
    TransformerConfig.llama(
        V, num_layers=2, embed_dim=64, num_heads=4, num_kv_heads=2, mlp_dim=128, max_len=64
    )
)
# A different, smaller architecture as a random-weight draft.
SMALL_DRAFT = TransformerLM(
    TransformerConfig.llama(V, num_layers=1, embed_dim=32, num_heads=2, mlp_dim=64, max_len=64)
)

# Ragged prompts, all in the 16-token bucket; one has a single token (nothing to prefill).
PROMPTS = (
    np.array([5, 17, 3, 40, 22], np.int32),
    np.array([9], np.int32),
    np.arange(13, dtype=np.int32) * 5 % V,
    np.array([1, 2, 3, 1, 2, 3, 1, 2, 3], np.int32),
)

GREEDY = make_warper(0)
SAMPLING = make_warper(1.0)


def random_params(model: TransformerLM, seed: int, scale: float = 0.3) -> dict:
    """N(0, scale²) parameters (norm scales around 1), drawn with NumPy.

    The default init (std 0.02) gives nearly uniform, context-blind next-token distributions;
    larger weights give peaked, context-dependent ones, like a trained model's.
    """
    shapes = jax.eval_shape(model.init_params, jax.random.PRNGKey(0))
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        noise = scale * rng.standard_normal(leaf.shape).astype(np.float32)
        is_scale = getattr(path[-1], "key", None) == "scale"
        return jax.device_put(1.0 + noise if is_scale else noise)  # no program per shape

    return jax.tree_util.tree_map_with_path(draw, shapes)


def perturbed(params: dict, seed: int, scale: float) -> dict:
    """params + N(0, scale²) noise: a draft that agrees with the target often but not always."""
    rng = np.random.default_rng(seed)
    # On the host, then one transfer per leaf: a device add would compile a program per shape.
    return jax.tree.map(
        lambda x: jax.device_put(
            np.asarray(x) + scale * rng.standard_normal(x.shape).astype(np.float32)
        ),
        params,
    )


def nan_params(params):
    """params of the same shapes and dtypes, every entry NaN (built on the host: no program)."""
    return jax.tree.map(lambda x: jax.device_put(np.full(x.shape, np.nan, x.dtype)), params)


# What a decoder says when the draft's numbers went NaN (state.nan_message).
DRAFT_NAN = r"draft's logits or probabilities contained NaN .*\(check draft_params\)"


@functools.cache
def target_params() -> dict:
    return random_params(TARGET, seed=0)


@functools.cache
def llama_params() -> dict:
    return random_params(LLAMA_TARGET, seed=1)


@functools.cache
def drafts() -> dict:
    """name -> (draft model, draft params) for the gpt2 target."""
    corpus = np.random.default_rng(2).integers(0, V, size=2000)
    return {
        "self": (TARGET, target_params()),
        # Same architecture, noisy weights: mixed acceptance, so rows reject at different points.
        "noisy_self": (TARGET, perturbed(target_params(), seed=3, scale=0.03)),
        "transformer": (SMALL_DRAFT, random_params(SMALL_DRAFT, seed=4)),
        "bigram": (NgramLM(V, 2), fit_ngram(corpus, V, 2)),
        "uniform": (UniformLM(V), {}),
        "prompt_lookup": (PromptLookupLM(V), {}),
    }


def ar_decoder(warper=GREEDY, target=TARGET) -> AutoregressiveDecoder:
    return AutoregressiveDecoder(target, warper, cache_len=CACHE_LEN)


def spec_decoder(draft, warper=GREEDY, target=TARGET, gamma=GAMMA) -> SpeculativeDecoder:
    return SpeculativeDecoder(target, draft, gamma, warper, cache_len=CACHE_LEN)


def as_lists(result) -> list[list[int]]:
    """Generated tokens per row as Python lists (readable assertion diffs)."""
    return [row.tolist() for row in result.new_tokens()]
