"""Causal self-attention over an explicit KV cache, any number of new tokens per row.

Linen's `MultiHeadDotProductAttention(decode=True)` takes one query token per call and keeps one
scalar index for the whole batch; verification needs γ+1 query tokens and per-row rollback, so the
cache write is done here by hand. Positions and the mask are inputs (computed by the caller:
`Transformer` for a chain, a tree decoder for a token tree), as in gemma's transformer.
"""

from __future__ import annotations

import flax.linen as nn

from specjax.models.attention_kernels import attend
from specjax.models.config import TransformerConfig
from specjax.models.kv_cache import write_rows
from specjax.models.layers import apply_rope, rope_frequencies
from specjax.models.linear import dense


class Attention(nn.Module):
    """Multi-head / grouped-query / multi-query attention, chosen by `num_kv_heads`."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, x, positions, mask, cache_k, cache_v, starts):
        """Attends T new tokens per row to the cache slots `mask` shows them.

        Args:
          x: [batch, T, embed] inputs of the new tokens.
          positions: int32 [batch, T] positions for RoPE (a chain: starts[:, None] + arange(T)).
          mask: bool [batch, T, max_len] which slots each new token sees, after its own write;
            it shows no slot at or past starts + T (implementation: `config.attention`).
          cache_k: [batch, max_len, kv_heads, head_dim] keys so far.
          cache_v: [batch, max_len, kv_heads, head_dim] values so far.
          starts: int32 [batch], where row b's new tokens are written (its cache length).

        Returns:
          out: [batch, T, embed]; updated cache_k, cache_v.
        """
        cfg = self.config
        h, kv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        qkv_bias = cfg.use_bias or cfg.qkv_bias

        def proj(heads, axes, name):
            return dense(cfg, (heads, hd), axes, use_bias=qkv_bias, name=name)

        q = proj(h, ("embed", "heads", "kv"), "query")(x)  # [batch, T, heads, head_dim]
        k = proj(kv, ("embed", "kv_heads", "kv"), "key")(x)  # [batch, T, kv_heads, head_dim]
        v = proj(kv, ("embed", "kv_heads", "kv"), "value")(x)  # [batch, T, kv_heads, head_dim]
        if cfg.positions == "rope":
            inv_freq = rope_frequencies(cfg)
            q = apply_rope(q, positions, inv_freq)
            k = apply_rope(k, positions, inv_freq)

        cache_k = write_rows(cache_k, k, starts)
        cache_v = write_rows(cache_v, v, starts)

        batch, t = x.shape[:2]
        q = q.reshape(batch, t, kv, h // kv, hd)  # [batch, T, kv_heads, group, head_dim]
        lengths = starts + t  # [batch] live slots per row after the write
        out = attend(
            cfg.attention, q, cache_k, cache_v, mask, lengths, block=cfg.attention_block
        )  # [batch, T, kv_heads, group, head_dim]
        out = out.reshape(batch, t, h, hd)
        out = dense(
            cfg,
            cfg.embed_dim,
            ("heads", "kv", "embed"),
            in_dims=2,
            use_bias=cfg.use_bias,
            name="out",
        )(out)
        return out, cache_k, cache_v
