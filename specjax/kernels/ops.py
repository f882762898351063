"""The kernels' JAX side: loading the FFI library, the packed layout, and the wrapped calls.

    packed_matmul(x, w, n)   x [..., K] @ W [K, n], W stored as panels w [ceil(n / 8), K, 8]
    fused_matmul(x, w, n, rms_scale=, swiglu=, bias=, residual=)
                             the same product with a prologue (RMSNorm of x, or SwiGLU of
                             x's two halves) and an epilogue (+ bias, + residual): one call
                             instead of a norm, a product and two adds
    cache_attention(...)     RoPE, the KV-cache write and masked attention of T new tokens

On CPU with the library built these are `jax.ffi.ffi_call`s (`packed_matmul.cc`,
`cache_attention.cc`); elsewhere (GPU, TPU, no compiler at install time) they are the XLA
reference implementations below, the same functions up to rounding. `packed_matmul` is
differentiable (`jax.custom_vjp`, XLA's backward pass); the fused calls are for decoding.
"""

from __future__ import annotations

import ctypes
import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np

# Output columns per panel of the packed layout (one AVX2 register of float32).
PANEL = 8

_TARGETS = {
    "packed_matmul": "SpecjaxPackedMatmul",
    "cache_attention": "SpecjaxCacheAttention",
    "threefry2x32": "SpecjaxThreefry2x32",
}
_PREFIX = "specjax_"
# FusedMatmul's prologue codes (`Prologue` in packed_matmul.cc).
_NONE, _RMS, _SWIGLU = 0, 1, 2


class KernelWarning(UserWarning):
    """The compiled kernels are missing: packed models run on XLA's reference instead."""


@functools.lru_cache(maxsize=1)
def _load() -> str | None:
    """Registers the FFI targets once; returns None on success, else why not."""
    try:
        import specjax.kernels._packed_matmul as _packed_matmul  # the compiled extension
    except ImportError as err:
        return (
            f"the compiled module specjax.kernels._packed_matmul is missing ({err}); "
            "reinstall with a C++ compiler present (`pip install -e .` builds it)"
        )
    try:
        lib = ctypes.CDLL(_packed_matmul.__file__)
        for name, symbol in _TARGETS.items():
            capsule = jax.ffi.pycapsule(getattr(lib, symbol))
            jax.ffi.register_ffi_target(_PREFIX + name, capsule, platform="cpu")
    except (OSError, AttributeError) as err:
        return f"loading {_packed_matmul.__file__} failed: {err}"
    return None


def status() -> str:
    """One line: which implementation packed models use in this process, and why."""
    backend = jax.default_backend()
    if backend != "cpu":  # whether the library loads does not matter there
        return f"XLA reference (the kernels are CPU-only; the default backend is {backend})"
    why = _load()
    if why is not None:
        return f"XLA reference ({why})"
    return "specjax CPU kernels (jax.ffi)"


def available() -> bool:
    """True when this process runs packed models on the compiled CPU kernels."""
    return _load() is None and jax.default_backend() == "cpu"


_warned = False


def use_kernels() -> bool:
    """Whether to emit the FFI calls (CPU with the library); warns once when it is missing."""
    global _warned
    if jax.default_backend() != "cpu":
        return False
    why = _load()
    if why is not None and not _warned:
        _warned = True
        warnings.warn(f"specjax kernels unavailable, using XLA: {why}", KernelWarning, stacklevel=3)
    return why is None


# -- the layout -------------------------------------------------------------------------------


def num_panels(n: int) -> int:
    """Panels of PANEL columns that hold n output columns."""
    return -(-n // PANEL)


def pack(w, xp=None):
    """[K, N] -> [ceil(N / 8), K, 8]: panels of eight output columns (zero-padded).

    Args:
      w: a kernel [K, N] (numpy or jax).
      xp: the array module (default: numpy for numpy input, else jax.numpy).

    Returns:
      The packed kernel, same module and dtype.
    """
    xp = xp or (np if isinstance(w, np.ndarray) else jnp)
    k, n = w.shape
    p = num_panels(n)
    if p * PANEL != n:
        w = xp.concatenate([w, xp.zeros((k, p * PANEL - n), w.dtype)], axis=1)
    return xp.transpose(w.reshape(k, p, PANEL), (1, 0, 2))


def unpack(packed, n: int, xp=None):
    """[P, K, 8] -> [K, n]: the inverse of `pack` (padding columns dropped)."""
    xp = xp or (np if isinstance(packed, np.ndarray) else jnp)
    p, k, c = packed.shape
    if c != PANEL or n > p * PANEL or n <= (p - 1) * PANEL:
        raise ValueError(f"a packed kernel of shape {packed.shape} does not hold {n} columns")
    return xp.transpose(packed, (1, 0, 2)).reshape(k, p * PANEL)[:, :n]


def _check_packed(x, w, n, width=None):
    p, k, c = w.shape
    width = k if width is None else width
    if c != PANEL or x.shape[-1] < width or not (p - 1) * PANEL < n <= p * PANEL:
        raise ValueError(
            f"packed product: x [..., {x.shape[-1]}] and packed w {tuple(w.shape)} do not "
            f"make {n} output columns"
        )


# -- plain product (differentiable) -------------------------------------------------------------


def _einsum_packed(x2, w):
    """XLA's product of x2 [M, K] and packed w [P, K, 8] -> [M, P * 8]."""
    y = jnp.einsum("mk,pkc->mpc", x2, w, preferred_element_type=jnp.float32)
    return y.reshape(x2.shape[0], -1)


_EMPTY = np.zeros((0,), np.float32)


def _ffi_fused(x2, w, scale, bias, residual, prologue, eps):
    out = jax.ShapeDtypeStruct((x2.shape[0], w.shape[0] * PANEL), jnp.float32)
    call = jax.ffi.ffi_call(_PREFIX + "packed_matmul", out, vmap_method="sequential")
    return call(x2, w, scale, bias, residual, prologue=np.int64(prologue), eps=np.float32(eps))


@jax.custom_vjp
def _packed(x2, w):
    if x2.dtype == jnp.float32 and w.dtype == jnp.float32 and use_kernels():
        return _ffi_fused(x2, w, _EMPTY, _EMPTY, _EMPTY, _NONE, 0.0)
    return _einsum_packed(x2, w).astype(jnp.result_type(x2, w))


def _packed_fwd(x2, w):
    return _packed(x2, w), (x2, w)


def _packed_bwd(res, dy):
    x2, w = res
    dy3 = dy.reshape(dy.shape[0], w.shape[0], PANEL)  # [M, P, 8]
    dx = jnp.einsum("mpc,pkc->mk", dy3, w).astype(x2.dtype)
    dw = jnp.einsum("mk,mpc->pkc", x2, dy3).astype(w.dtype)
    return dx, dw


_packed.defvjp(_packed_fwd, _packed_bwd)


def packed_matmul(x: jax.Array, w: jax.Array, n: int) -> jax.Array:
    """x @ W for W packed as `pack(W)`.

    Args:
      x: [..., K].
      w: [ceil(n / 8), K, 8] packed kernel.
      n: output columns (the padding of the last panel is dropped).

    Returns:
      [..., n] in the result dtype of x and w.
    """
    _check_packed(x, w, n)
    lead = x.shape[:-1]
    y = _packed(x.reshape(-1, w.shape[1]), w)
    if y.shape[1] != n:
        y = y[:, :n]
    return y.reshape(lead + (n,))


# -- fused product (decoding) ------------------------------------------------------------------


def _rms(x, scale, eps):
    x32 = x.astype(jnp.float32)
    return x32 * jax.lax.rsqrt(jnp.square(x32).mean(-1, keepdims=True) + eps) * scale


def fused_matmul_reference(
    x2, w, n, *, rms_scale=None, eps=1e-6, swiglu=False, bias=None, residual=None
):
    """XLA's version of `fused_matmul` on 2-D x (also its test oracle)."""
    k = w.shape[1]
    if rms_scale is not None:
        x2 = _rms(x2[:, :k], rms_scale, eps)
    elif swiglu:
        x2 = jax.nn.silu(x2[:, :k]) * x2[:, k : 2 * k]
    else:
        x2 = x2[:, :k]
    y = _einsum_packed(x2.astype(jnp.float32), w.astype(jnp.float32))
    if bias is not None:
        y = y + jnp.pad(bias.reshape(-1), (0, y.shape[1] - bias.size))
    if residual is not None:
        y = jnp.pad(residual, ((0, 0), (0, y.shape[1] - residual.shape[1]))) + y
    return y


def fused_matmul(
    x: jax.Array,
    w: jax.Array,
    n: int,
    *,
    rms_scale: jax.Array | None = None,
    eps: float = 1e-6,
    swiglu: bool = False,
    bias: jax.Array | None = None,
    residual: jax.Array | None = None,
    keep_padding: bool = False,
) -> jax.Array:
    """prologue(x) @ W (+ bias) (+ residual) in one call (float32, for decoding).

    Args:
      x: [..., >= K] (SwiGLU: [..., >= 2K], gate then up); columns past what is read may be
        padding of a fused projection.
      w: packed kernel [ceil(n / 8), K, 8].
      n: output columns.
      rms_scale: [K]: x is RMS-normalised (eps) and scaled first (Llama's RMSNorm).
      eps: the norm's epsilon.
      swiglu: x holds [gate | up]; the product takes silu(gate) * up.
      bias: [n] added to the product.
      residual: [..., n] added last (a residual connection).
      keep_padding: return all ceil(n / 8) * 8 columns (padding included) instead of n.

    Returns:
      [..., n] float32 (or the padded width).
    """
    if rms_scale is not None and swiglu:
        raise ValueError("fused_matmul: choose one prologue (rms_scale or swiglu)")
    k = w.shape[1]
    _check_packed(x, w, n, 2 * k if swiglu else k)
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1]).astype(jnp.float32)
    width = w.shape[0] * PANEL
    res2 = None if residual is None else residual.reshape(-1, n).astype(jnp.float32)
    if use_kernels():
        prologue = _RMS if rms_scale is not None else (_SWIGLU if swiglu else _NONE)
        if res2 is not None and width != n:
            res2 = jnp.pad(res2, ((0, 0), (0, width - n)))
        padded_bias = None if bias is None else jnp.pad(bias.reshape(-1), (0, width - n))
        y = _ffi_fused(
            x2,
            w.astype(jnp.float32),
            _EMPTY if rms_scale is None else rms_scale.astype(jnp.float32),
            _EMPTY if bias is None else padded_bias.astype(jnp.float32),
            _EMPTY if res2 is None else res2,
            prologue,
            eps,
        )
    else:
        y = fused_matmul_reference(
            x2, w, n, rms_scale=rms_scale, eps=eps, swiglu=swiglu, bias=bias, residual=res2
        )
    if not keep_padding and width != n:
        y = y[:, :n]
    return y.reshape(lead + (y.shape[-1],))


# -- attention over the cache (decoding) --------------------------------------------------------


def _rope(x, positions, inv_freq):
    """Rotary embedding, "rotate half" (as `models.layers.apply_rope`), x [B, T, heads, D]."""
    angles = positions[..., None].astype(jnp.float32) * inv_freq  # [B, T, D / 2]
    angles = jnp.concatenate([angles, angles], axis=-1)[:, :, None, :]
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * jnp.cos(angles) + rotated * jnp.sin(angles)


def cache_attention_reference(qkv, positions, inv_freq, cache_k, cache_v, mask, starts, num_heads):
    """XLA's version of `cache_attention` (also its test oracle)."""
    qkv, cache_k, cache_v = (jnp.asarray(a, jnp.float32) for a in (qkv, cache_k, cache_v))
    batch, t = qkv.shape[:2]
    kv, hd = cache_k.shape[2], cache_k.shape[3]
    q = qkv[..., : num_heads * hd].reshape(batch, t, num_heads, hd)
    k = qkv[..., num_heads * hd : (num_heads + kv) * hd].reshape(batch, t, kv, hd)
    v = qkv[..., (num_heads + kv) * hd : (num_heads + 2 * kv) * hd].reshape(batch, t, kv, hd)
    if inv_freq is not None:
        q, k = _rope(q, positions, inv_freq), _rope(k, positions, inv_freq)
    rows = jnp.arange(batch)[:, None]
    cols = starts[:, None] + jnp.arange(t)[None, :]
    cache_k = cache_k.at[rows, cols].set(k, mode="drop")
    cache_v = cache_v.at[rows, cols].set(v, mode="drop")
    q = q.reshape(batch, t, kv, num_heads // kv, hd)
    scale = np.float32(1.0) / np.sqrt(np.float32(hd))
    scores = jnp.einsum("btkgd,bskd->bkgts", q, cache_k) * scale
    seen = mask[:, None, None]  # [B, 1, 1, T, S]
    scores = jnp.where(seen, scores, -jnp.inf)
    top = jnp.max(scores, axis=-1, keepdims=True)
    weights = jnp.where(seen, jnp.exp(scores - jnp.where(jnp.isfinite(top), top, 0.0)), 0.0)
    norm = weights.sum(-1, keepdims=True)
    weights = weights / jnp.where(norm > 0, norm, 1.0)  # a query that sees nothing: zeros
    out = jnp.einsum("bkgts,bskd->btkgd", weights, cache_v)
    return out.reshape(batch, t, num_heads * hd), cache_k, cache_v


def cache_attention(qkv, positions, inv_freq, cache_k, cache_v, mask, starts, num_heads: int):
    """RoPE, the cache write and attention of T new tokens per row, in one call.

    Args:
      qkv: float32 [batch, T, >= (heads + 2 kv_heads) * head_dim], q | k | v (un-rotated).
      positions: int32 [batch, T] positions of the new tokens (RoPE).
      inv_freq: float32 [head_dim // 2] RoPE inverse frequencies, or None (no rotation).
      cache_k, cache_v: float32 [batch, max_len, kv_heads, head_dim].
      mask: bool [batch, T, max_len] slots each new token sees (its own included).
      starts: int32 [batch] where row b's new tokens are written.
      num_heads: query heads.

    Returns:
      (out float32 [batch, T, heads * head_dim], cache_k, cache_v) with the new keys (rotated)
      and values written at starts[b] + t.
    """
    if not use_kernels():
        return cache_attention_reference(
            qkv, positions, inv_freq, cache_k, cache_v, mask, starts, num_heads
        )
    batch, t = qkv.shape[:2]
    hd = cache_k.shape[3]
    out = (
        jax.ShapeDtypeStruct((batch, t, num_heads * hd), jnp.float32),
        jax.ShapeDtypeStruct(cache_k.shape, jnp.float32),
        jax.ShapeDtypeStruct(cache_v.shape, jnp.float32),
    )
    call = jax.ffi.ffi_call(
        _PREFIX + "cache_attention",
        out,
        vmap_method="sequential",
        input_output_aliases={3: 1, 4: 2},
    )
    return call(
        qkv.astype(jnp.float32),
        positions.astype(jnp.int32),
        _EMPTY if inv_freq is None else inv_freq.astype(jnp.float32),
        cache_k,
        cache_v,
        mask,
        starts.astype(jnp.int32),
        num_heads=np.int64(num_heads),
    )
