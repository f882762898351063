"""The packed layout's modules: five kernel calls per transformer layer when decoding.

For `TransformerConfig.matmul == "packed"`. q/k/v are one projection ("qkv") and so are gate/up
("gate_up"), each packed [ceil(out / 8), embed, 8] (`models/linear.py`, `specjax.kernels`).
A call scoring T <= KERNEL_ATTENTION_TOKENS tokens per row (a decode step, a verification,
a small token tree) is, for a Llama block:

    qkv = rmsnorm(x) @ Wqkv                      fused_matmul (norm prologue)
    a   = attention(rope(qkv), cache)            cache_attention (RoPE, cache write, softmax)
    x   = x + a @ Wo                             fused_matmul (residual epilogue)
    gu  = rmsnorm(x) @ Wgate_up                  fused_matmul (norm prologue)
    x   = x + swiglu(gu) @ Wdown                 fused_matmul (SwiGLU prologue, residual)

with no XLA op between them (a dozen per layer in the "xla" block, each a thunk whose fixed
cost dwarfed its arithmetic at batch 1). Longer calls (the prompt's prefill) attend with
`config.attention` in XLA. GPT-2 blocks (LayerNorm, GELU, biases) norm and activate in XLA and
multiply with the same kernels. Off the CPU, or without the compiled kernels, every call is its
XLA reference: the same model, slower.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from specjax import kernels
from specjax.models.attention_kernels import attend
from specjax.models.config import TransformerConfig
from specjax.models.kv_cache import write_rows
from specjax.models.layers import Norm, apply_rope, rope_frequencies
from specjax.models.linear import packed_init, partitioned

# Calls scoring at most this many tokens per row attend with the cache_attention kernel.
KERNEL_ATTENTION_TOKENS = 16


class PackedWeights(nn.Module):
    """A packed projection's params: "kernel" [ceil(out / 8), in, 8] and optional "bias" [out].

    Attributes:
      config: the model's config (dtypes).
      in_features, out_features: the [in, out] matrix it packs.
      use_bias: whether it has a bias.
    """

    config: TransformerConfig
    in_features: int
    out_features: int
    use_bias: bool = False

    @nn.compact
    def __call__(self):
        cfg = self.config
        kernel = self.param(
            "kernel",
            partitioned(
                packed_init(nn.initializers.normal(0.02), self.in_features, self.out_features),
                (None, None, None),
            ),
            (kernels.ops.num_panels(self.out_features), self.in_features, kernels.PANEL),
            cfg.weights_dtype,
        )
        bias = None
        if self.use_bias:
            bias = self.param(
                "bias",
                partitioned(nn.initializers.zeros, (None,)),
                (self.out_features,),
                cfg.weights_dtype,
            )
        return kernel, bias


class PackedEmbed(nn.Module):
    """A token embedding stored as a packed head (tied models in the packed layout).

    The param "embedding" is `pack(E^T)`, [ceil(vocab / 8), embed, 8]: the tied head is then
    the same weight-streaming product as every projection, and a token's embedding is column
    t of E^T, gathered from panel t // 8, lane t % 8.

    Attributes:
      config: the model's config.
    """

    config: TransformerConfig

    def setup(self):
        cfg = self.config
        self.embedding = self.param(
            "embedding",
            partitioned(
                packed_init(nn.initializers.normal(0.02), cfg.embed_dim, cfg.vocab_size),
                (None, None, None),
            ),
            (kernels.ops.num_panels(cfg.vocab_size), cfg.embed_dim, kernels.PANEL),
            cfg.weights_dtype,
        )

    def __call__(self, tokens: jax.Array) -> jax.Array:
        """int32 [batch, T] -> [batch, T, embed]."""
        panels = jnp.take(self.embedding, tokens // kernels.PANEL, axis=0)  # [B, T, embed, 8]
        lane = (tokens % kernels.PANEL)[..., None, None]  # [B, T, 1, 1]
        x = jnp.take_along_axis(panels, lane, axis=-1)[..., 0]  # [B, T, embed]
        return x.astype(self.config.compute_dtype)

    def attend(self, x: jax.Array) -> jax.Array:
        """The tied head: [batch, T, embed] -> logits [batch, T, vocab]."""
        return kernels.packed_matmul(x, self.embedding, self.config.vocab_size)


class PackedBlock(nn.Module):
    """Pre-norm residual block in the packed layout (same function as `transformer.Block`)."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, x, positions, mask, cache_k, cache_v, starts):
        """As `transformer.Block`: x [batch, T, embed] -> (x, cache_k, cache_v)."""
        cfg = self.config
        d, h, kv, hd, m = cfg.embed_dim, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.mlp_dim
        qkv_bias = cfg.use_bias or cfg.qkv_bias
        rms = cfg.norm == "rmsnorm"
        batch, t = x.shape[:2]

        def norm_then(name, y, weights, n, **kw):
            """prenorm(y) @ W: the norm fused into the product for RMSNorm, else in XLA."""
            norm = Norm(cfg, name=name)
            if rms:
                scale, _ = norm(y, apply=False)
                return kernels.fused_matmul(
                    y, weights[0], n, rms_scale=scale, eps=cfg.norm_eps, bias=weights[1], **kw
                )
            return kernels.fused_matmul(norm(y), weights[0], n, bias=weights[1], **kw)

        # Attention.
        n_qkv = (h + 2 * kv) * hd
        qkv_w = PackedWeights(cfg, d, n_qkv, qkv_bias, name="qkv")
        out_w = PackedWeights(cfg, h * hd, d, cfg.use_bias, name="out")
        with_rope = cfg.positions == "rope"
        inv_freq = rope_frequencies(cfg) if with_rope else None
        qkv = norm_then("attn_norm", x, qkv_w(), n_qkv, keep_padding=True)  # [batch, T, >= n]
        if t <= KERNEL_ATTENTION_TOKENS:
            attn, cache_k, cache_v = kernels.cache_attention(
                qkv, positions, inv_freq, cache_k, cache_v, mask, starts, h
            )  # [batch, T, heads * head_dim]
        else:
            attn, cache_k, cache_v = self._xla_attention(
                qkv, positions, inv_freq, cache_k, cache_v, mask, starts
            )
        kernel, bias = out_w()
        x = kernels.fused_matmul(attn, kernel, d, bias=bias, residual=x)

        # MLP.
        down_w = PackedWeights(cfg, m, d, cfg.use_bias, name="down")
        if cfg.mlp == "swiglu":
            gate_up = PackedWeights(cfg, d, 2 * m, cfg.use_bias, name="gate_up")
            hidden = norm_then("mlp_norm", x, gate_up(), 2 * m, keep_padding=True)
            kernel, bias = down_w()
            x = kernels.fused_matmul(hidden, kernel, d, swiglu=True, bias=bias, residual=x)
        else:
            up = PackedWeights(cfg, d, m, cfg.use_bias, name="up")
            hidden = nn.gelu(norm_then("mlp_norm", x, up(), m), approximate=True)
            kernel, bias = down_w()
            x = kernels.fused_matmul(hidden, kernel, d, bias=bias, residual=x)
        return x.astype(cfg.compute_dtype), cache_k, cache_v

    def _xla_attention(self, qkv, positions, inv_freq, cache_k, cache_v, mask, starts):
        """The "xla" block's attention on the fused projection's output (long calls)."""
        cfg = self.config
        h, kv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        batch, t = qkv.shape[:2]
        q = qkv[..., : h * hd].reshape(batch, t, h, hd)
        k = qkv[..., h * hd : (h + kv) * hd].reshape(batch, t, kv, hd)
        v = qkv[..., (h + kv) * hd : (h + 2 * kv) * hd].reshape(batch, t, kv, hd)
        if inv_freq is not None:
            q, k = apply_rope(q, positions, inv_freq), apply_rope(k, positions, inv_freq)
        cache_k = write_rows(cache_k, k, starts)
        cache_v = write_rows(cache_v, v, starts)
        q = q.reshape(batch, t, kv, h // kv, hd)
        out = attend(
            cfg.attention, q, cache_k, cache_v, mask, starts + t, block=cfg.attention_block
        )  # [batch, T, kv_heads, group, head_dim]
        return out.reshape(batch, t, h * hd).astype(jnp.float32), cache_k, cache_v


def packed_block_params(cfg: TransformerConfig, block: dict, xp) -> dict:
    """One "xla" block's params in the packed layout (fused qkv and gate_up).

    Args:
      cfg: the model's config.
      block: {"attn_norm", "attn": {"query", "key", "value", "out"}, "mlp_norm",
        "mlp": {"gate", "up", "down"} (no "gate" for GELU)}.
      xp: numpy or jax.numpy.

    Returns:
      The PackedBlock params: {"attn_norm", "qkv", "out", "mlp_norm", "gate_up" (or "up"),
      "down"}, each projection {"kernel" packed, "bias" [out] if any}.
    """
    d, h, hd = cfg.embed_dim, cfg.num_heads, cfg.head_dim
    attn, mlp = block["attn"], block["mlp"]

    def flat(p, k):
        return p["kernel"].reshape(k, -1)

    qkv = xp.concatenate([flat(attn[n], d) for n in ("query", "key", "value")], axis=1)
    out = {"qkv": {"kernel": kernels.pack(qkv, xp)}, "out": {"kernel": None}}
    if "bias" in attn["query"]:
        out["qkv"]["bias"] = xp.concatenate(
            [attn[n]["bias"].reshape(-1) for n in ("query", "key", "value")]
        )
    out["out"]["kernel"] = kernels.pack(flat(attn["out"], h * hd), xp)
    if "bias" in attn["out"]:
        out["out"]["bias"] = attn["out"]["bias"]
    mlp_out = {"down": {"kernel": kernels.pack(mlp["down"]["kernel"], xp)}}
    if "bias" in mlp["down"]:
        mlp_out["down"]["bias"] = mlp["down"]["bias"]
    if "gate" in mlp:
        gate_up = xp.concatenate([mlp["gate"]["kernel"], mlp["up"]["kernel"]], axis=1)
        mlp_out["gate_up"] = {"kernel": kernels.pack(gate_up, xp)}
        if "bias" in mlp["gate"]:
            mlp_out["gate_up"]["bias"] = xp.concatenate([mlp["gate"]["bias"], mlp["up"]["bias"]])
    else:
        mlp_out["up"] = {"kernel": kernels.pack(mlp["up"]["kernel"], xp)}
        if "bias" in mlp["up"]:
            mlp_out["up"]["bias"] = mlp["up"]["bias"]
    return {"attn_norm": block["attn_norm"], "mlp_norm": block["mlp_norm"], **out, **mlp_out}


def xla_block_params(cfg: TransformerConfig, block: dict, xp) -> dict:
    """The inverse of `packed_block_params`."""
    d, h, kv, hd, m = cfg.embed_dim, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.mlp_dim
    attn = mlp = block
    qkv = kernels.unpack(attn["qkv"]["kernel"], (h + 2 * kv) * hd, xp)
    sizes = {"query": h, "key": kv, "value": kv}
    out, start = {}, 0
    for name, heads in sizes.items():
        out[name] = {"kernel": qkv[:, start : start + heads * hd].reshape(d, heads, hd)}
        if "bias" in attn["qkv"]:
            out[name]["bias"] = attn["qkv"]["bias"][start : start + heads * hd].reshape(heads, hd)
        start += heads * hd
    out["out"] = {"kernel": kernels.unpack(attn["out"]["kernel"], d, xp).reshape(h, hd, d)}
    if "bias" in attn["out"]:
        out["out"]["bias"] = attn["out"]["bias"]
    mlp_out = {"down": {"kernel": kernels.unpack(mlp["down"]["kernel"], d, xp)}}
    if "bias" in mlp["down"]:
        mlp_out["down"]["bias"] = mlp["down"]["bias"]
    if "gate_up" in mlp:
        gu = kernels.unpack(mlp["gate_up"]["kernel"], 2 * m, xp)
        mlp_out["gate"] = {"kernel": gu[:, :m]}
        mlp_out["up"] = {"kernel": gu[:, m:]}
        if "bias" in mlp["gate_up"]:
            mlp_out["gate"]["bias"] = mlp["gate_up"]["bias"][:m]
            mlp_out["up"]["bias"] = mlp["gate_up"]["bias"][m:]
    else:
        mlp_out["up"] = {"kernel": kernels.unpack(mlp["up"]["kernel"], m, xp)}
        if "bias" in mlp["up"]:
            mlp_out["up"]["bias"] = mlp["up"]["bias"]
    return {
        "attn_norm": block["attn_norm"],
        "attn": out,
        "mlp_norm": block["mlp_norm"],
        "mlp": mlp_out,
    }
