"""Llama family (Llama 1/2/3, Mistral, Qwen2) -> specjax config and params.

HF's `nn.Linear` weights are [out, in]; flax kernels are [in, out], so every projection is
transposed, and q/k/v/o are split into (heads, head_dim) the way HF's `view` does. RoPE uses the
same "rotate half" pairing in both, so no permutation of q/k rows is needed. Qwen2 adds biases
to q/k/v only (`qkv_bias`); Llama's `attention_bias` / `mlp_bias` switch on biases that
`use_bias` covers together, so the absent half is filled with zeros (adding nothing).
"""

from __future__ import annotations

import warnings

import numpy as np

from specjax import checks
from specjax.convert.common import TensorSource, head_params, require_keys
from specjax.models.config import RopeScaling, TransformerConfig

MODEL_TYPES = ("llama", "mistral", "qwen2")
# The config.json fields a Llama-family conversion reads without a default.
LLAMA_KEYS = (
    "vocab_size",
    "num_hidden_layers",
    "num_attention_heads",
    "hidden_size",
    "intermediate_size",
    "max_position_embeddings",
)


def _rope(hf: dict) -> tuple[float, RopeScaling | None]:
    """(rope_theta, scaling) from either config layout.

    transformers >= 5 writes `rope_parameters` (theta inside); older files have a top-level
    `rope_theta` and an optional `rope_scaling` whose type key is `rope_type` or `type`.
    """
    params = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    if any(isinstance(v, dict) for v in params.values()):
        raise ValueError(
            f"config.json has per-layer-type RoPE parameters {sorted(params)}; specjax supports "
            "one RoPE for all layers"
        )
    theta = float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))
    partial = params.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
    if partial != 1.0:
        raise ValueError(
            f"config.json has partial_rotary_factor={partial}; specjax rotates the whole head"
        )
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "default":
        return theta, None
    if rope_type != "llama3":
        raise ValueError(
            f"config.json has RoPE type {rope_type!r}; specjax supports 'default' and 'llama3'"
        )
    scaling = RopeScaling(
        factor=float(params["factor"]),
        low_freq_factor=float(params["low_freq_factor"]),
        high_freq_factor=float(params["high_freq_factor"]),
        # HF falls back to max_position_embeddings when the original length is not stored.
        original_max_position=int(
            params.get("original_max_position_embeddings", hf["max_position_embeddings"])
        ),
    )
    return theta, scaling


def _warn_sliding_window(hf: dict) -> None:
    """Mistral v0.1 and some Qwen2 configs attend to a sliding window that specjax lacks."""
    window = hf.get("sliding_window")
    if hf.get("model_type") == "qwen2" and not hf.get("use_sliding_window", False):
        window = None
    if "sliding_attention" in (hf.get("layer_types") or ()):
        window = window or "set"
    if window is not None:
        warnings.warn(
            f"config.json sets a sliding attention window ({window}); specjax attends to the "
            "whole cache, so outputs match Hugging Face only while prompt + generated tokens "
            "stay within the window",
            stacklevel=3,
        )


def llama_config(hf: dict, dtype: str = "float32") -> TransformerConfig:
    """TransformerConfig of a Llama, Mistral or Qwen2 config.json.

    Args:
      hf: the parsed config.json.
      dtype: compute and parameter dtype of the specjax model.

    Returns:
      The equivalent TransformerConfig.

    Raises:
      ValueError: a config field selects behaviour specjax does not implement.
    """
    act = hf.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise ValueError(f"config.json has hidden_act={act!r}; specjax's SwiGLU uses silu")
    require_keys(hf, LLAMA_KEYS, "Llama")
    _warn_sliding_window(hf)
    theta, scaling = _rope(hf)
    heads = hf["num_attention_heads"]
    if not checks.is_integer(heads) or heads < 1:
        raise ValueError(f"config.json has num_attention_heads={heads!r}; it must be >= 1")
    kv_heads, head_dim = hf.get("num_key_value_heads"), hf.get("head_dim")  # None: derived
    attn_bias = bool(hf.get("attention_bias", False))
    mlp_bias = bool(hf.get("mlp_bias", False))
    return TransformerConfig.llama(
        vocab_size=hf["vocab_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=heads if kv_heads is None else kv_heads,  # 0 is refused, not derived
        embed_dim=hf["hidden_size"],
        mlp_dim=hf["intermediate_size"],
        head_dim=hf["hidden_size"] // heads if head_dim is None else head_dim,
        max_len=hf["max_position_embeddings"],
        norm_eps=hf.get("rms_norm_eps", 1e-6),
        rope_theta=theta,
        rope_scaling=scaling,
        use_bias=attn_bias or mlp_bias,
        qkv_bias=hf.get("model_type") == "qwen2",
        tie_embeddings=hf.get("tie_word_embeddings", False),
        dtype=dtype,
        param_dtype=dtype,
    )


def llama_params(cfg: TransformerConfig, tensors: dict, hf: dict) -> dict:
    """specjax params from Llama-family checkpoint tensors.

    Args:
      cfg: from `llama_config(hf)`.
      tensors: {HF name: numpy array}, with or without the "model." prefix.
      hf: the parsed config.json (says which biases the checkpoint holds).

    Returns:
      A params tree for `TransformerLM(cfg)` (numpy arrays of cfg.param_dtype).
    """
    src = TensorSource(tensors, "model.", ("rotary_emb.inv_freq",))
    dt = cfg.weights_dtype
    d, h, kv, hd, m = cfg.embed_dim, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.mlp_dim
    attn_bias = bool(hf.get("attention_bias", False))
    mlp_bias = bool(hf.get("mlp_bias", False))
    # A bias the checkpoint holds must be there; one it does not hold is zero (see module doc).
    qkv_bias = cfg.qkv_bias or attn_bias

    def linear(name, d_in, d_out, has_bias):
        """[in, out] kernel (+ bias) from an nn.Linear [out, in] weight."""
        out = {"kernel": src.take(f"{name}.weight", (d_out, d_in), dt).T}
        if has_bias:
            out["bias"] = src.take(f"{name}.bias", (d_out,), dt)
        elif cfg.use_bias:
            out["bias"] = np.zeros((d_out,), dt)
        return out

    params = {
        "embed": {"embedding": src.take("embed_tokens.weight", (cfg.vocab_size, d), dt)},
        "final_norm": {"scale": src.take("norm.weight", (d,), dt)},
    }
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        attn = {}
        for name, heads in (("query", h), ("key", kv), ("value", kv)):
            proj = linear(f"{p}self_attn.{name[0]}_proj", d, heads * hd, qkv_bias)
            attn[name] = {"kernel": proj["kernel"].reshape(d, heads, hd)}  # [embed, heads, hd]
            if "bias" in proj:
                attn[name]["bias"] = proj["bias"].reshape(heads, hd)
        out = linear(f"{p}self_attn.o_proj", h * hd, d, attn_bias)
        attn["out"] = {"kernel": out["kernel"].reshape(h, hd, d)}  # [heads, hd, embed]
        if "bias" in out:
            attn["out"]["bias"] = out["bias"]
        params[f"block_{i}"] = {
            "attn_norm": {"scale": src.take(p + "input_layernorm.weight", (d,), dt)},
            "attn": attn,
            "mlp_norm": {"scale": src.take(p + "post_attention_layernorm.weight", (d,), dt)},
            "mlp": {
                "gate": linear(p + "mlp.gate_proj", d, m, mlp_bias),
                "up": linear(p + "mlp.up_proj", d, m, mlp_bias),
                "down": linear(p + "mlp.down_proj", m, d, mlp_bias),
            },
        }
    params.update(head_params(src, cfg, params["embed"]["embedding"]))
    src.check_all_used(hf.get("model_type", "Llama"))
    return params
