"""GPT-2 family (gpt2, gpt2-medium/large/xl, distilgpt2) -> specjax config and params.

HF's GPT-2 stores its projections as `Conv1D` weights of shape [in, out] (already the layout of a
flax kernel), packs query, key and value into one `c_attn` of width 3 * embed, and uses the
tanh-approximated GELU ("gelu_new"): all three map onto `TransformerConfig.gpt2` exactly.
"""

from __future__ import annotations

from specjax.convert.common import TensorSource, head_params, require, require_keys
from specjax.models.config import TransformerConfig

# Activation names whose formula is GELU's tanh approximation (flax `gelu(approximate=True)`).
TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")
# The config.json fields a GPT-2 conversion reads without a default.
GPT2_KEYS = ("vocab_size", "n_layer", "n_head", "n_embd", "n_positions")


def gpt2_config(hf: dict, dtype: str = "float32") -> TransformerConfig:
    """TransformerConfig of a GPT-2 config.json.

    Args:
      hf: the parsed config.json (model_type "gpt2").
      dtype: compute and parameter dtype of the specjax model.

    Returns:
      The equivalent TransformerConfig.

    Raises:
      ValueError: a config field selects behaviour specjax does not implement.
    """
    act = hf.get("activation_function", "gelu_new")
    if act not in TANH_GELUS:
        raise ValueError(
            f"config.json has activation_function={act!r}; specjax's GPT-2 MLP implements the "
            f"tanh-approximated GELU only ({', '.join(TANH_GELUS)})"
        )
    require_keys(hf, GPT2_KEYS, "GPT-2")
    require(hf, "scale_attn_weights", True, "scores are divided by sqrt(head_dim)")
    require(hf, "scale_attn_by_inverse_layer_idx", False, "no per-layer score scaling")
    require(hf, "add_cross_attention", False, "decoder-only")
    embed = hf["n_embd"]
    return TransformerConfig.gpt2(
        vocab_size=hf["vocab_size"],
        num_layers=hf["n_layer"],
        num_heads=hf["n_head"],
        embed_dim=embed,
        mlp_dim=hf.get("n_inner") or 4 * embed,
        max_len=hf["n_positions"],
        norm_eps=hf.get("layer_norm_epsilon", 1e-5),
        tie_embeddings=hf.get("tie_word_embeddings", True),
        dtype=dtype,
        param_dtype=dtype,
    )


def gpt2_params(cfg: TransformerConfig, tensors: dict) -> dict:
    """specjax params from GPT-2 checkpoint tensors.

    Args:
      cfg: from `gpt2_config`.
      tensors: {HF name: numpy array}, with or without the "transformer." prefix.

    Returns:
      A params tree for `TransformerLM(cfg)` (numpy arrays of cfg.param_dtype).
    """
    # attn.bias / attn.masked_bias are causal-mask buffers in checkpoints saved by old versions.
    src = TensorSource(tensors, "transformer.", (".attn.bias", ".attn.masked_bias"))
    dt = cfg.weights_dtype
    d, h, hd, m = cfg.embed_dim, cfg.num_heads, cfg.head_dim, cfg.mlp_dim

    def norm(name):
        return {
            "scale": src.take(f"{name}.weight", (d,), dt),
            "bias": src.take(f"{name}.bias", (d,), dt),
        }

    params = {
        "embed": {"embedding": src.take("wte.weight", (cfg.vocab_size, d), dt)},
        "pos_embed": src.take("wpe.weight", (cfg.max_len, d), dt),
        "final_norm": norm("ln_f"),
    }
    for i in range(cfg.num_layers):
        p = f"h.{i}."
        qkv_w = src.take(p + "attn.c_attn.weight", (d, 3 * d), dt)  # [embed, 3 * embed]
        qkv_b = src.take(p + "attn.c_attn.bias", (3 * d,), dt)
        attn = {}
        for j, name in enumerate(("query", "key", "value")):
            attn[name] = {
                "kernel": qkv_w[:, j * d : (j + 1) * d].reshape(d, h, hd),  # [embed, heads, hd]
                "bias": qkv_b[j * d : (j + 1) * d].reshape(h, hd),
            }
        attn["out"] = {
            "kernel": src.take(p + "attn.c_proj.weight", (d, d), dt).reshape(h, hd, d),
            "bias": src.take(p + "attn.c_proj.bias", (d,), dt),
        }
        params[f"block_{i}"] = {
            "attn_norm": norm(p + "ln_1"),
            "attn": attn,
            "mlp_norm": norm(p + "ln_2"),
            "mlp": {
                "up": {
                    "kernel": src.take(p + "mlp.c_fc.weight", (d, m), dt),
                    "bias": src.take(p + "mlp.c_fc.bias", (m,), dt),
                },
                "down": {
                    "kernel": src.take(p + "mlp.c_proj.weight", (m, d), dt),
                    "bias": src.take(p + "mlp.c_proj.bias", (d,), dt),
                },
            },
        }
    params.update(head_params(src, cfg, params["embed"]["embedding"]))
    src.check_all_used("GPT-2")
    return params
