"""Building blocks of GPT-2 and Llama style blocks: norms, RoPE, the MLP (projections: linear.py).

Every parameter carries logical axis names from a short vocabulary (`vocab`, `embed`, `mlp`,
`heads`, `kv_heads`, `kv`) so `specjax.sharding` can map them onto any mesh.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from specjax.models.config import TransformerConfig
from specjax.models.linear import dense, partitioned


class Norm(nn.Module):
    """LayerNorm or RMSNorm (statistics in float32), chosen by `config.norm`.

    `Norm(cfg)(x, apply=False)` declares the same params and returns them, (scale, bias or
    None), for a kernel that applies the norm itself (`models/packed.py`).
    """

    config: TransformerConfig

    @nn.compact
    def __call__(self, x: jax.Array, *, apply: bool = True):
        cfg = self.config
        scale = self.param(
            "scale",
            partitioned(nn.initializers.ones, ("embed",)),
            (x.shape[-1],),
            cfg.weights_dtype,
        )
        bias = None
        if cfg.norm == "layernorm":
            bias = self.param(
                "bias",
                partitioned(nn.initializers.zeros, ("embed",)),
                (x.shape[-1],),
                cfg.weights_dtype,
            )
        if not apply:
            return scale, bias
        x32 = x.astype(jnp.float32)
        if cfg.norm == "layernorm":
            mean = x32.mean(-1, keepdims=True)
            var = jnp.square(x32 - mean).mean(-1, keepdims=True)
            y = (x32 - mean) * jax.lax.rsqrt(var + cfg.norm_eps)
            y = y * scale.astype(jnp.float32) + bias.astype(jnp.float32)
        else:
            y = x32 * jax.lax.rsqrt(jnp.square(x32).mean(-1, keepdims=True) + cfg.norm_eps)
            y = y * scale.astype(jnp.float32)
        return y.astype(cfg.compute_dtype)


def rope_frequencies(config: TransformerConfig) -> jax.Array:
    """Inverse frequencies [head_dim // 2], with Llama 3 scaling when configured."""
    dim = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (jnp.arange(0, dim, 2, dtype=jnp.float32) / dim))
    scaling = config.rope_scaling
    if scaling is None:
        return inv_freq
    low_wavelen = scaling.original_max_position / scaling.low_freq_factor
    high_wavelen = scaling.original_max_position / scaling.high_freq_factor
    wavelen = 2 * jnp.pi / inv_freq
    smooth = (scaling.original_max_position / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    smoothed = (1 - smooth) * inv_freq / scaling.factor + smooth * inv_freq
    out = jnp.where(wavelen > low_wavelen, inv_freq / scaling.factor, inv_freq)
    middle = (wavelen <= low_wavelen) & (wavelen >= high_wavelen)
    return jnp.where(middle, smoothed, out)


def apply_rope(x: jax.Array, positions: jax.Array, inv_freq: jax.Array) -> jax.Array:
    """Rotary embedding, "rotate half" convention (as Hugging Face Llama checkpoints expect).

    Args:
      x: [batch, T, heads, head_dim].
      positions: int32 [batch, T] absolute positions.
      inv_freq: [head_dim // 2].

    Returns:
      [batch, T, heads, head_dim] in x's dtype.
    """
    angles = positions[..., None].astype(jnp.float32) * inv_freq  # [batch, T, head_dim // 2]
    angles = jnp.concatenate([angles, angles], axis=-1)[:, :, None, :]  # [batch, T, 1, head_dim]
    x32 = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
    return (x32 * jnp.cos(angles) + rotated * jnp.sin(angles)).astype(x.dtype)


class Mlp(nn.Module):
    """GELU (tanh approximation, GPT-2's gelu_new) or SwiGLU feed-forward."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        cfg = self.config

        def proj(features, axes, name):
            return dense(cfg, features, axes, use_bias=cfg.use_bias, name=name)

        if cfg.mlp == "swiglu":
            gate = proj(cfg.mlp_dim, ("embed", "mlp"), "gate")(x)
            up = proj(cfg.mlp_dim, ("embed", "mlp"), "up")(x)
            hidden = nn.silu(gate) * up
        else:
            hidden = nn.gelu(proj(cfg.mlp_dim, ("embed", "mlp"), "up")(x), approximate=True)
        return proj(cfg.embed_dim, ("mlp", "embed"), "down")(hidden)
