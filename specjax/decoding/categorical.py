"""Exact categorical sampling from non-negative weights with O(sqrt(V)) Gumbels per row.

`jax.random.categorical` draws one Gumbel per vocabulary entry: V threefry words and two logs per
draw, 0.69 ms at V = 32000 on our CPU, more than a 10M target's step for the five draws of a
γ = 4 iteration. This sampler splits the vocabulary into blocks of B entries and draws twice:

    1. a block b with probability  M_b / Σ_c M_c,        M_b = Σ_{i in b} w_i  (Gumbel-max over
       log M, one Gumbel per block);
    2. an entry i of block b with probability  w_i / M_b  (Gumbel-max over log w_i inside the
       block, B fresh Gumbels from an independent key).

So P(i) = (M_b / Σ M) · (w_i / M_b) = w_i / Σ w: the same law, exactly, as one Gumbel-max over the
whole vocabulary, for any partition into blocks; no cumulative sum, no uniform grid (the trap that
sank the inverse-CDF sampler: see `experiments/speed/OVERHEAD.md`). In float32 it carries the
errors one Gumbel-max carries (the float32 log of each weight and of each block sum, float32
Gumbels) plus the rounding of the block sums M_b, a relative error of order sqrt(B)·2^-24 on a
block's mass. `tests/test_categorical.py` computes the law the rounded block sums imply in float64
at V = 259, 32000 and 128256: its total-variation distance from w / Σ w is 5e-9 to 3.2e-8
(bound 1e-7), the same order as the 1.6e-9 to 9.7e-8 that the float32 `log` of every weight
alone moves `jax.random.categorical`'s law.

The Gumbels are JAX's "high" mode (`GUMBEL_MODE`). `jax.random.categorical`'s default "low"
Gumbels stop at ~15.9, so an entry whose log-weight trails the row's leader by more than ~14
nats is under-drawn (JAX documents "incorrect results for p < ~1e-7"); over a vocabulary's flat
tail that is real mass (`scripts/check_sampler_tail.py`). With V/B + B Gumbels per row the two
uniforms each "high" Gumbel takes are cheap.

Cost per row: one reduction over V plus V/B + B Gumbels and logs, with B ≈ sqrt(V) (a power of
two). Measured in-loop on one row, CPU time (`scripts/bench_sampler.py`, README table):
0.0069 → 0.0061 ms at V = 259, 0.66 → 0.024 ms at 32000, 2.4 → 0.051 ms at 128256.
"""

from __future__ import annotations

import functools
import math
import operator

import jax
import jax.numpy as jnp

from specjax.decoding.argmax import first_argmax

__all__ = ["GUMBEL_MODE", "block_masses", "default_block", "sample_from_probs"]

# JAX's "high" Gumbels take two uniforms each and reach ~32 instead of ~16, so events down to
# ~1e-14 relative (not ~1e-7) keep their probability; with O(sqrt V) Gumbels per row the doubled
# random bits cost about a quarter more per draw (one early measurement: 0.018 -> 0.022 ms at
# V = 32000).
GUMBEL_MODE = "high"


def default_block(vocab: int) -> int:
    """Entries per block for a vocabulary of `vocab`: the power of two nearest sqrt(vocab)."""
    if vocab < 1:
        raise ValueError(f"vocab must be >= 1 (got {vocab})")
    return 1 << max(0, round(math.log2(math.sqrt(vocab))))


def _log_weights(w: jax.Array) -> jax.Array:
    """log w, with -inf (never drawn) where w == 0, and no NaN gradient path through log(0)."""
    positive = w > 0
    return jnp.where(positive, jnp.log(jnp.where(positive, w, 1.0)), -jnp.inf)


def _blocked(probs: jax.Array, block: int) -> jax.Array:
    """[..., V] -> [..., ceil(V / block), block], zero-padded (padding weight 0 is never drawn)."""
    vocab = probs.shape[-1]
    n_blocks = -(-vocab // block)
    pad = n_blocks * block - vocab
    padded = jnp.pad(probs, [(0, 0)] * (probs.ndim - 1) + [(0, pad)])
    return padded.reshape(probs.shape[:-1] + (n_blocks, block))


def _nonnegative(probs: jax.Array) -> jax.Array:
    """float32 weights with negatives clamped to 0 (the callers' residuals are already >= 0)."""
    return jnp.maximum(probs.astype(jnp.float32), 0.0)


def _masses(w: jax.Array) -> jax.Array:
    """Block sums of blocked weights w [..., n_blocks, block] -> [..., n_blocks], without overflow.

    A row whose float32 sums overflow to inf (weights near float32's maximum: unnormalised input)
    is summed again scaled by 2^-64, exact for a power of two and the same for every block of the
    row. The rescan is a `lax.cond`, so rows of probabilities (never near overflow) pay one
    `any` over the block sums, not a second pass over the vocabulary.
    """
    mass = w.sum(axis=-1)
    overflow = jnp.isinf(mass).any(axis=-1, keepdims=True)  # [..., 1]

    def rescaled():
        return jnp.where(overflow, (w * jnp.float32(2.0**-64)).sum(axis=-1), mass)

    return jax.lax.cond(overflow.any(), rescaled, lambda: mass)


def block_masses(probs: jax.Array, block: int) -> jax.Array:
    """The float32 block sums M_b the sampler draws its block from: [..., V] -> [..., n_blocks]."""
    return _masses(_blocked(_nonnegative(probs), block))


def sample_from_probs(key: jax.Array, probs: jax.Array, block: int | None = None) -> jax.Array:
    """Samples categorical indices from (possibly unnormalised) non-negative weights.

    Exact two-level Gumbel-max (module docstring): a block by its mass, then an entry inside it.
    A row of all zeros returns index 0, as `jax.random.categorical` of all -inf logits does.

    Args:
      key: a PRNG key.
      probs: [..., vocab] non-negative weights; zero entries are never drawn.
      block: entries per block; None picks `default_block(vocab)`. `block >= vocab` is the
        one-level reference, `jax.random.categorical` itself (one "low" Gumbel per entry).

    Returns:
      [...] int32 indices.
    """
    vocab = probs.shape[-1]
    if block is None:
        block = default_block(vocab)
    try:  # Python or NumPy integers; not bools, floats or strings
        size = None if isinstance(block, bool) else operator.index(block)
    except TypeError:
        size = None
    if size is None or size < 1:
        raise ValueError(f"block must be an integer >= 1 or None (got {block!r})")
    return _sample_jit(key, probs, size)


# One jitted program per (shapes, block), eagerly and inside traces alike: an eager call is one
# program, not a dozen op-by-op compilations, and the decoders' programs, which draw from rows of
# the same shapes in several places, trace it once (as the models, transformer._forward_jit).
@functools.partial(jax.jit, static_argnums=2)
def _sample_jit(key: jax.Array, probs: jax.Array, block: int) -> jax.Array:
    vocab = probs.shape[-1]
    if block >= vocab:  # the one-level reference: exactly jax.random.categorical's draw
        log_w = _log_weights(_nonnegative(probs))
        return jax.random.categorical(key, log_w, axis=-1).astype(jnp.int32)
    w = _blocked(_nonnegative(probs), block)  # [..., n_blocks, block]
    mass = _masses(w)  # [..., n_blocks], as `block_masses` (up to a power-of-two scale per row)
    key_block, key_entry = jax.random.split(key)
    g_block = jax.random.gumbel(key_block, mass.shape, jnp.float32, mode=GUMBEL_MODE)
    b = first_argmax(_log_weights(mass) + g_block)  # [...]
    row = jnp.take_along_axis(w, b[..., None, None], axis=-2)[..., 0, :]  # [..., block]
    g_entry = jax.random.gumbel(key_entry, row.shape, jnp.float32, mode=GUMBEL_MODE)
    j = first_argmax(_log_weights(row) + g_entry)  # [...]
    return (b * block + j).astype(jnp.int32)
