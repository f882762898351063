"""Attention over a KV cache buffer: one function per `TransformerConfig.attention` setting.

Every implementation takes the same inputs and returns the same output:

  q: [batch, T, kv_heads, group, head_dim] queries of the T new tokens (group = heads / kv_heads).
  cache_k, cache_v: [batch, max_len, kv_heads, head_dim] the cache after the new tokens' write.
  mask: bool [batch, T, max_len] which slots each new token sees (a chain's causal mask, a token
    tree's ancestor mask, ...).
  lengths: int32 [batch] live slots per row (starts + T): the mask shows no slot at or past a
    row's length (stale entries of a rolled-back draft lie there).
  returns: [batch, T, kv_heads, group, head_dim] in q's dtype.

- "xla": scores against the whole buffer (two einsums and a softmax); cost grows with max_len.
- "blockwise": an online-softmax loop over blocks of `block` slots that stops at the longest live
  row, so a decode step costs what the sequence costs, not what the buffer costs.
- "dot_product_attention": `jax.nn.dot_product_attention` (cuDNN's fused kernel on GPU; XLA
  elsewhere); whole buffer, like "xla".

The Pallas TPU kernels of `jax.experimental.pallas.ops.tpu` are not offered (checked in jax
0.10.2): ragged paged attention masks causally only (no token-tree mask), splash attention takes
its mask as a static numpy object (no per-row, per-call tree mask), and `flash_attention`, which
takes a bias that could carry our mask, needs as many key/value heads as query heads (no GQA),
runs over the whole key length, and has no interpret switch, so it cannot be checked on CPU.

A query row whose mask shows no slot at all (never the case for a chain or a tree: a token sees
itself) gets "xla"'s uniform average over the buffer, zeros from "blockwise"; neither is NaN.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

IMPLEMENTATIONS = ("auto", "xla", "blockwise", "dot_product_attention")


def resolve(name: str, backend: str | None = None) -> str:
    """The implementation `name` stands for on `backend` (default: JAX's default backend).

    "auto" is "dot_product_attention" on GPU (cuDNN) and "blockwise" elsewhere (CPU: measured
    not slower at short buffers, see experiments/speed/ATTENTION.md; TPU: no Pallas kernel fits
    our masks, see the module docstring).
    """
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"attention must be one of {IMPLEMENTATIONS}, got {name!r}")
    if name != "auto":
        return name
    backend = backend or jax.default_backend()
    return "dot_product_attention" if backend in ("gpu", "cuda", "rocm") else "blockwise"


def _scale(head_dim: int) -> np.float32:
    """1/sqrt(head_dim) in float32, a trace-time constant."""
    return np.float32(1.0) / np.sqrt(np.float32(head_dim))


def xla_attention(q, cache_k, cache_v, mask, lengths=None):
    """Softmax attention against the whole buffer (inputs and output: see the module docstring)."""
    del lengths  # the whole buffer is scored; the mask hides what is not live
    scores = jnp.einsum(
        "btkgd,bskd->bkgts", q, cache_k.astype(q.dtype), preferred_element_type=jnp.float32
    )  # [batch, kv_heads, group, T, max_len]
    scores = scores * _scale(q.shape[-1])
    scores = jnp.where(mask[:, None, None], scores, jnp.finfo(jnp.float32).min)
    weights = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
    return jnp.einsum("bkgts,bskd->btkgd", weights, cache_v.astype(q.dtype))


def blockwise_attention(q, cache_k, cache_v, mask, lengths, *, block: int = 128):
    """Online-softmax attention over blocks of `block` cache slots, up to the longest live row.

    The trip count ceil(max(lengths) / block) is traced (a `lax.fori_loop` with a traced bound
    lowers to a while loop), so the program is the same for every length: no recompilation as
    the sequence grows. When `block` does not divide max_len the last block is read from
    max_len - block (a `dynamic_slice` clamps there anyway) and slots already counted by the
    previous block are masked out. Scores, the running max / normaliser and the accumulator are
    float32 whatever q's dtype (bf16 compute, float32 accumulation).

    A buffer of at most two blocks takes `xla_attention`: there is little to skip, and the loop's
    fixed cost showed (1.35M-param model, cache 256, block 128: 1.26x the xla step in CPU time,
    experiments/speed/ATTENTION.md). So does a call that fills the whole buffer (T == max_len,
    e.g. `sequence_logits` in training): nothing to skip.

    Differentiable in forward and reverse mode (`jax.custom_jvp`): reverse mode cannot go
    through a traced-bound loop, so derivatives are those of `xla_attention` at the same inputs,
    which reads the whole buffer. Slots no query of a row sees are zeroed there first, so stale
    entries (even NaN) past the live slots reach no gradient, as they reach no output; a query
    row that sees no slot has output 0 and derivative 0.
    """
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    max_len, t = cache_k.shape[1], q.shape[1]
    if max_len <= 2 * block or t >= max_len:
        return xla_attention(q, cache_k, cache_v, mask)
    return _blockwise(block, q, cache_k, cache_v, mask, lengths)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _blockwise(block, q, cache_k, cache_v, mask, lengths):
    """The online-softmax loop of `blockwise_attention` (buffers of more than two blocks)."""
    batch, t, kv, group, hd = q.shape
    max_len = cache_k.shape[1]
    num_blocks = -(-jnp.max(lengths).astype(jnp.int32) // block)  # traced trip count
    num_blocks = jnp.minimum(num_blocks, -(-max_len // block))
    scale = _scale(hd)

    def body(i, carry):
        m, norm, acc = carry  # [batch, kv, group, T] x2, [batch, kv, group, T, head_dim]
        first = i * block  # first slot this block counts
        start = jnp.minimum(first, max_len - block)  # where it is read from (clamped)
        k = jax.lax.dynamic_slice_in_dim(cache_k, start, block, axis=1)  # [batch, block, kv, hd]
        v = jax.lax.dynamic_slice_in_dim(cache_v, start, block, axis=1)  # [batch, block, kv, hd]
        seen = jax.lax.dynamic_slice_in_dim(mask, start, block, axis=2)  # [batch, T, block]
        seen = seen & (start + jnp.arange(block) >= first)[None, None, :]
        s = jnp.einsum(
            "btkgd,bskd->bkgts", q, k.astype(q.dtype), preferred_element_type=jnp.float32
        )  # [batch, kv, group, T, block]
        s = jnp.where(seen[:, None, None], s * scale, -jnp.inf)
        m_new = jnp.maximum(m, s.max(axis=-1))  # [batch, kv, group, T]
        m_safe = jnp.where(jnp.isfinite(m_new), m_new, 0.0)  # all hidden so far: no NaN
        p = jnp.exp(s - m_safe[..., None])  # [batch, kv, group, T, block]
        correction = jnp.exp(m - m_safe)  # [batch, kv, group, T]
        norm = norm * correction + p.sum(axis=-1)
        pv = jnp.einsum(
            "bkgts,bskd->bkgtd",
            p.astype(q.dtype),
            v.astype(q.dtype),
            preferred_element_type=jnp.float32,
        )  # [batch, kv, group, T, head_dim]
        acc = acc * correction[..., None] + pv
        return m_new, norm, acc

    stats = (batch, kv, group, t)
    init = (
        jnp.full(stats, -jnp.inf, jnp.float32),
        jnp.zeros(stats, jnp.float32),
        jnp.zeros(stats + (hd,), jnp.float32),
    )
    # Block 0 is peeled out of the loop: every live row has slots there (lengths = starts + T
    # >= 1, and the mask shows nothing at or past a row's length), and straight-line code
    # with static slices costs less than a trip of the while loop (whose fixed cost is what is
    # left of a long buffer's price: experiments/speed/ATTENTION.md). Masked slots add nothing,
    # so peeling is exact whatever the lengths.
    _, norm, acc = jax.lax.fori_loop(1, num_blocks, body, body(0, init))
    out = acc / jnp.where(norm > 0, norm, 1.0)[..., None]  # [batch, kv, group, T, head_dim]
    return out.transpose(0, 3, 1, 2, 4).astype(q.dtype)  # [batch, T, kv, group, head_dim]


@_blockwise.defjvp
def _blockwise_jvp(block, primals, tangents):
    """The loop's output, with `xla_attention`'s tangent on the live slots (see the caller)."""
    q, cache_k, cache_v, mask, lengths = primals
    dq, dk, dv = tangents[:3]  # mask and lengths are integer: no tangent
    out = _blockwise(block, q, cache_k, cache_v, mask, lengths)
    live = mask.any(axis=1)[:, :, None, None]  # [batch, max_len, 1, 1] slots some query sees

    def reference(q, k, v):
        return xla_attention(q, jnp.where(live, k, 0), jnp.where(live, v, 0), mask)

    _, d_out = jax.jvp(reference, (q, cache_k, cache_v), (dq, dk, dv))
    sees = mask.any(axis=2)[:, :, None, None, None]  # [batch, T, 1, 1, 1] rows that see a slot
    return out, jnp.where(sees, d_out, 0)


def dot_product_attention(q, cache_k, cache_v, mask, lengths=None):
    """`jax.nn.dot_product_attention` with our mask as its boolean mask (JAX picks the kernel:
    cuDNN's on GPU where it applies, XLA otherwise)."""
    del lengths
    batch, t, kv, group, hd = q.shape
    # None: JAX picks (its cuDNN kernel on GPU where it applies, else XLA), so an untested
    # shape or dtype falls back instead of failing.
    implementation = None
    out = jax.nn.dot_product_attention(
        q.reshape(batch, t, kv * group, hd),  # heads ordered (kv_head, group), as jax groups them
        cache_k.astype(q.dtype),
        cache_v.astype(q.dtype),
        mask=mask[:, None],  # [batch, 1, T, max_len]
        scale=float(_scale(hd)),
        implementation=implementation,
    )  # [batch, T, heads, head_dim]
    return out.reshape(batch, t, kv, group, hd)


def attend(name: str, q, cache_k, cache_v, mask, lengths, *, block: int = 128):
    """Runs implementation `name` ("auto" resolved on the default backend)."""
    name = resolve(name)
    if name == "blockwise":
        return blockwise_attention(q, cache_k, cache_v, mask, lengths, block=block)
    if name == "dot_product_attention":
        return dot_product_attention(q, cache_k, cache_v, mask, lengths)
    return xla_attention(q, cache_k, cache_v, mask, lengths)
