"""Token picks that XLA:CPU runs fast at LLM vocabularies: `first_argmax`, `has_nan` and `top_k`.

`first_argmax` is `jnp.argmax` as two plain reductions, ~10x faster.

XLA:CPU lowers `jnp.argmax` to a variadic (value, index) reduction that it does not vectorise:
4.4 ns per entry, 0.14 ms for one 32000-entry row and 0.57 ms at 128256, more than a greedy
draft step's whole budget at a 32k vocabulary (`experiments/speed/OVERHEAD.md`). A max, then the
smallest index holding it, are two vectorised reductions: 0.013 and 0.077 ms
(`scripts/bench_sampler.py`). Same answer: the first index among ties. NaN is handled off the
max (XLA's max propagates it) rather than by replacing NaN entries first, which cost a third
pass that wrote a copy of the array: 0.18 -> 0.11 ms over 5 x 49,152 logits (0.063 -> 0.044 ms
for one row).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["first_argmax", "has_nan", "top_k"]


def first_argmax(x: jax.Array, axis: int = -1) -> jax.Array:
    """The index of the largest entry along `axis`, first among ties, as int32.

    Equals `jnp.argmax(x, axis)` for inputs without NaN (tested). A NaN counts as +inf here (the
    first NaN or +inf wins), where `jnp.argmax` returns the first NaN; either way the decoders
    flag a row with NaN logits (`Stats.nan_rows`) and reject its output on the host.

    Args:
      x: [..., n, ...] real array.
      axis: the axis to reduce.

    Returns:
      int32 array of x's shape without `axis`.
    """
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of range for an array of shape {x.shape}")
    axis = axis % x.ndim
    index = jax.lax.broadcasted_iota(jnp.int32, x.shape, axis)
    best = jnp.max(x, axis=axis, keepdims=True)  # XLA's max propagates NaN
    hit = x == best
    if jnp.issubdtype(x.dtype, jnp.floating):
        # A NaN row's max is NaN, which equals nothing: there the first NaN or +inf wins.
        hit = hit | (jnp.isnan(best) & ((x == jnp.inf) | jnp.isnan(x)))
    return jnp.min(jnp.where(hit, index, x.shape[axis]), axis=axis)


def has_nan(x: jax.Array, axis=-1) -> jax.Array:
    """Whether each slice along `axis` (an int or a tuple) holds a NaN: `jnp.isnan(x).any(axis)`.

    Read off the slice's max (XLA's max propagates NaN), one vectorised reduction where the
    `any` of a compare is two (0.047 against 0.071 ms over 5 x 49,152 logits on XLA:CPU); where the
    same max is taken anyway (`first_argmax` of the same array), XLA computes it once. (XLA's
    `--xla_cpu_enable_fast_min_max` / `--xla_gpu_enable_fast_min_max`, off by default, would
    drop NaN from max; tests/test_point_mass_accept.py checks the default.)
    """
    return jnp.isnan(jnp.max(x, axis=axis))


def top_k(x: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """`jax.lax.top_k(x, k)` (values [..., k], int32 indices [..., k]) that XLA:CPU keeps as its
    TopK kernel instead of a full sort.

    XLA:CPU lowers `lax.top_k` to a sort plus slices, then turns that pattern back into a call
    of its TopK kernel, but only after its algebraic simplifier has run, and only where each
    sorted output is used by one slice alone. In a large program the simplifier can merge a
    slice with what consumes it (e.g. the indexing of a token tree's children), and the op
    stays a stable sort of every row: in an EAGLE tree drafter one level of two nodes over
    49,152 logits then cost ~10 ms, against ~0.2 ms for the kernel (experiments/real/RESULTS.md,
    "Static trees without the sort"). The same op compiled alone kept the kernel, so which
    programs are hit could not be told in advance. An optimization barrier on the result keeps
    the slices as they are. The values are `lax.top_k`'s, bit for bit, on every backend.
    """
    return jax.lax.optimization_barrier(jax.lax.top_k(x, k))
