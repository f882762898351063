"""specjax.convert without torch: config parsing, exact tensor placement, strictness, files.

These run in the default CI (no `[hf]` extra): checkpoints are hand-written dicts of numpy
arrays, so each test states exactly which HF number must land in which specjax parameter.
Numerical parity with HF itself is in test_convert_hf.py (needs torch + transformers).
"""

import json
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.convert import (
    check_vocab_match,
    config_from_hf,
    params_from_hf,
    read_tensors,
    resize_vocab,
)
from specjax.convert.hf import host_params_from_hf
from specjax.models.config import RopeScaling
from specjax.models.layers import rope_frequencies
from specjax.models.transformer import TransformerLM

GPT2 = {
    "model_type": "gpt2",
    "vocab_size": 5,
    "n_positions": 8,
    "n_embd": 4,
    "n_layer": 1,
    "n_head": 2,
    "n_inner": 8,
    "layer_norm_epsilon": 1e-5,
    "activation_function": "gelu_new",
}

LLAMA = {
    "model_type": "llama",
    "vocab_size": 5,
    "hidden_size": 8,
    "intermediate_size": 6,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}


def _numbered(shapes: dict, prefix: str = "") -> dict:
    """Tensors whose entries are all distinct (so a misplaced one is caught)."""
    out, start = {}, 0
    for name, shape in shapes.items():
        size = math.prod(shape)
        out[prefix + name] = np.arange(start, start + size, dtype=np.float32).reshape(shape)
        start += size
    return out


def _gpt2_tensors(prefix="transformer."):
    d, m, v = 4, 8, 5
    shapes = {"wte.weight": (v, d), "wpe.weight": (8, d), "ln_f.weight": (d,), "ln_f.bias": (d,)}
    for n in ("ln_1", "ln_2"):
        shapes.update({f"h.0.{n}.weight": (d,), f"h.0.{n}.bias": (d,)})
    shapes.update(
        {
            "h.0.attn.c_attn.weight": (d, 3 * d),
            "h.0.attn.c_attn.bias": (3 * d,),
            "h.0.attn.c_proj.weight": (d, d),
            "h.0.attn.c_proj.bias": (d,),
            "h.0.mlp.c_fc.weight": (d, m),
            "h.0.mlp.c_fc.bias": (m,),
            "h.0.mlp.c_proj.weight": (m, d),
            "h.0.mlp.c_proj.bias": (d,),
        }
    )
    return _numbered(shapes, prefix)


def _llama_tensors(hf=LLAMA):
    d, m, v, h, kv = 8, 6, 5, 4, 2
    hd = d // h
    shapes = {
        "model.embed_tokens.weight": (v, d),
        "model.norm.weight": (d,),
        "lm_head.weight": (v, d),
        "model.layers.0.input_layernorm.weight": (d,),
        "model.layers.0.post_attention_layernorm.weight": (d,),
        "model.layers.0.self_attn.q_proj.weight": (h * hd, d),
        "model.layers.0.self_attn.k_proj.weight": (kv * hd, d),
        "model.layers.0.self_attn.v_proj.weight": (kv * hd, d),
        "model.layers.0.self_attn.o_proj.weight": (d, h * hd),
        "model.layers.0.mlp.gate_proj.weight": (m, d),
        "model.layers.0.mlp.up_proj.weight": (m, d),
        "model.layers.0.mlp.down_proj.weight": (d, m),
    }
    return _numbered(shapes)


def test_gpt2_config_fields():
    cfg = config_from_hf(GPT2)
    assert (cfg.vocab_size, cfg.num_layers, cfg.num_heads, cfg.embed_dim) == (5, 1, 2, 4)
    assert (cfg.mlp_dim, cfg.max_len, cfg.head_dim, cfg.norm_eps) == (8, 8, 2, 1e-5)
    assert (cfg.norm, cfg.positions, cfg.mlp) == ("layernorm", "learned", "gelu")
    assert cfg.use_bias and cfg.tie_embeddings
    # n_inner null means 4 * n_embd.
    assert config_from_hf({**GPT2, "n_inner": None}).mlp_dim == 16


@pytest.mark.parametrize("prefix", ["transformer.", ""])
def test_gpt2_tensors_land_exactly(prefix):
    tensors = _gpt2_tensors(prefix)
    # Causal-mask buffers of old checkpoints are not parameters.
    tensors[prefix + "h.0.attn.bias"] = np.ones((1, 1, 8, 8), np.float32)
    _, params = params_from_hf(GPT2, tensors)
    t = {k[len(prefix) :]: v for k, v in tensors.items()}
    attn = params["block_0"]["attn"]
    qkv = t["h.0.attn.c_attn.weight"]  # [4, 12]: query | key | value columns
    # key head 1, feature 0 is c_attn column 4 + 1 * 2 + 0.
    assert attn["key"]["kernel"][3, 1, 0] == qkv[3, 6]
    np.testing.assert_array_equal(attn["value"]["kernel"], qkv[:, 8:].reshape(4, 2, 2))
    np.testing.assert_array_equal(
        attn["query"]["bias"], t["h.0.attn.c_attn.bias"][:4].reshape(2, 2)
    )
    # out kernel [heads, head_dim, embed]: row 2 of c_proj is head 1, feature 0.
    assert attn["out"]["kernel"][1, 0, 3] == t["h.0.attn.c_proj.weight"][2, 3]
    np.testing.assert_array_equal(
        params["block_0"]["mlp"]["up"]["kernel"], t["h.0.mlp.c_fc.weight"]
    )
    np.testing.assert_array_equal(params["block_0"]["mlp_norm"]["bias"], t["h.0.ln_2.bias"])
    np.testing.assert_array_equal(params["pos_embed"], t["wpe.weight"])
    np.testing.assert_array_equal(params["embed"]["embedding"], t["wte.weight"])
    assert "head" not in params


def test_llama_tensors_land_exactly():
    tensors = _llama_tensors()
    cfg, params = params_from_hf(LLAMA, tensors)
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (4, 2, 2)
    assert (cfg.norm, cfg.positions, cfg.mlp, cfg.use_bias) == ("rmsnorm", "rope", "swiglu", False)
    p = "model.layers.0."
    attn = params["block_0"]["attn"]
    q = tensors[p + "self_attn.q_proj.weight"]  # [heads * head_dim, embed] (nn.Linear: out, in)
    # query kernel [embed, heads, head_dim]: input 5, head 3, feature 1 is q row 3 * 2 + 1.
    assert attn["query"]["kernel"][5, 3, 1] == q[7, 5]
    k = tensors[p + "self_attn.k_proj.weight"]
    np.testing.assert_array_equal(attn["key"]["kernel"], k.T.reshape(8, 2, 2))
    o = tensors[p + "self_attn.o_proj.weight"]  # [embed, heads * head_dim]
    assert attn["out"]["kernel"][2, 1, 6] == o[6, 5]
    mlp = params["block_0"]["mlp"]
    np.testing.assert_array_equal(mlp["gate"]["kernel"], tensors[p + "mlp.gate_proj.weight"].T)
    np.testing.assert_array_equal(mlp["down"]["kernel"], tensors[p + "mlp.down_proj.weight"].T)
    np.testing.assert_array_equal(params["head"]["kernel"], tensors["lm_head.weight"].T)
    np.testing.assert_array_equal(
        params["block_0"]["mlp_norm"]["scale"], tensors[p + "post_attention_layernorm.weight"]
    )


def test_host_params_are_the_device_params_in_numpy():
    """`host_params_from_hf` (load_gguf repacks its output in numpy) is `params_from_hf` before
    the move to the device: the same tree, numpy leaves, the same values and dtypes."""
    tensors = _llama_tensors()
    cfg, host = host_params_from_hf(LLAMA, tensors)
    cfg_device, device = params_from_hf(LLAMA, tensors)
    assert cfg == cfg_device
    assert jax.tree.structure(host) == jax.tree.structure(device)
    for h, d in zip(jax.tree.leaves(host), jax.tree.leaves(device), strict=True):
        assert isinstance(h, np.ndarray) and isinstance(d, jax.Array)
        assert h.dtype == d.dtype
        np.testing.assert_array_equal(h, np.asarray(d))


def test_llama_attention_bias_zero_fills_mlp_biases():
    hf = {**LLAMA, "attention_bias": True}
    tensors = _llama_tensors()
    for name, n in (("q", 8), ("k", 4), ("v", 4), ("o", 8)):
        tensors[f"model.layers.0.self_attn.{name}_proj.bias"] = np.full((n,), 3.0, np.float32)
    cfg, params = params_from_hf(hf, tensors)
    assert cfg.use_bias  # specjax's switch covers attention and MLP biases together
    np.testing.assert_array_equal(params["block_0"]["attn"]["out"]["bias"], np.full(8, 3.0))
    np.testing.assert_array_equal(params["block_0"]["mlp"]["up"]["bias"], np.zeros(6))


def test_qwen2_biases_and_tied_head():
    hf = {**LLAMA, "model_type": "qwen2", "tie_word_embeddings": True}
    tensors = _llama_tensors()
    del tensors["lm_head.weight"]
    for name, n in (("q", 8), ("k", 4), ("v", 4)):
        tensors[f"model.layers.0.self_attn.{name}_proj.bias"] = np.arange(n, dtype=np.float32)
    cfg, params = params_from_hf(hf, tensors)
    assert cfg.qkv_bias and not cfg.use_bias and cfg.tie_embeddings
    np.testing.assert_array_equal(params["block_0"]["attn"]["key"]["bias"], [[0, 1], [2, 3]])
    assert "bias" not in params["block_0"]["attn"]["out"] and "head" not in params


def test_tied_head_that_differs_from_embedding_is_refused():
    tensors = _llama_tensors()  # lm_head.weight differs from embed_tokens.weight
    with pytest.raises(ValueError, match="tie_word_embeddings=true but lm_head.weight differs"):
        params_from_hf({**LLAMA, "tie_word_embeddings": True}, tensors)


def test_rope_config_layouts_agree():
    scaling = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    old = {
        **LLAMA,
        "rope_theta": 500000.0,
        "rope_scaling": {"type": "llama3", **scaling, "original_max_position_embeddings": 8192},
    }
    new = {
        **LLAMA,
        "rope_parameters": {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            **scaling,
            "original_max_position_embeddings": 8192,
        },
    }
    assert config_from_hf(old) == config_from_hf(new)
    cfg = config_from_hf(new)
    assert cfg.rope_theta == 500000.0 and cfg.rope_scaling == RopeScaling(8.0, 1.0, 4.0, 8192)
    plain = config_from_hf({**LLAMA, "rope_theta": 1e6})
    assert plain.rope_theta == 1e6 and plain.rope_scaling is None


def test_llama3_rope_frequencies_match_reference_loop():
    # Meta's reference `apply_scaling`, written per frequency with Python branches.
    hf = {
        **LLAMA,
        "hidden_size": 64,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "rope_parameters": {
            "rope_type": "llama3",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    }
    cfg = config_from_hf(hf)
    base = [1.0 / 10000.0 ** (i / 32) for i in range(0, 32, 2)]
    want = []
    for f in base:
        wavelen = 2 * math.pi / f
        if wavelen < 64 / 4:
            want.append(f)
        elif wavelen > 64 / 1:
            want.append(f / 4)
        else:
            smooth = (64 / wavelen - 1) / (4 - 1)
            want.append((1 - smooth) * f / 4 + smooth * f)
    got = np.asarray(rope_frequencies(cfg))
    kinds = {
        ("kept" if w == f else "scaled" if w == f / 4 else "mixed")
        for w, f in zip(want, base, strict=True)
    }
    assert kinds == {"kept", "scaled", "mixed"}  # all three branches are exercised
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize(
    "hf, field",
    [
        ({**LLAMA, "model_type": "qwen3"}, "model_type"),
        ({**LLAMA, "hidden_act": "gelu"}, "hidden_act"),
        ({**LLAMA, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "RoPE type 'yarn'"),
        ({**LLAMA, "partial_rotary_factor": 0.5}, "partial_rotary_factor"),
        ({**GPT2, "activation_function": "relu"}, "activation_function"),
        ({**GPT2, "scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
        # A Llama's fields under model_type gpt2 (and the reverse) used to fail as KeyError.
        ({**LLAMA, "model_type": "gpt2"}, "lacks 'n_layer', which a GPT-2 config has"),
        ({**GPT2, "model_type": "llama"}, "lacks 'num_hidden_layers', which a Llama config"),
        ({k: v for k, v in LLAMA.items() if k != "intermediate_size"}, "'intermediate_size'"),
    ],
)
def test_unsupported_configs_name_the_field(hf, field):
    with pytest.raises(ValueError, match=field):
        config_from_hf(hf)


def test_sliding_window_warns():
    with pytest.warns(UserWarning, match="sliding attention window"):
        config_from_hf({**LLAMA, "model_type": "mistral", "sliding_window": 4096})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config_from_hf({**LLAMA, "model_type": "mistral", "sliding_window": None})
        config_from_hf({**LLAMA, "model_type": "qwen2", "sliding_window": 4096})  # not in use


def test_missing_extra_and_misshaped_tensors_are_named():
    tensors = _gpt2_tensors()
    del tensors["transformer.h.0.ln_1.bias"]
    with pytest.raises(ValueError, match="lacks tensor 'h.0.ln_1.bias'"):
        params_from_hf(GPT2, tensors)
    tensors = _gpt2_tensors()
    tensors["transformer.h.0.attn.q_norm.weight"] = np.ones(2, np.float32)
    with pytest.raises(ValueError, match=r"no place.*h.0.attn.q_norm.weight"):
        params_from_hf(GPT2, tensors)
    tensors = _gpt2_tensors()
    tensors["transformer.wpe.weight"] = np.zeros((7, 4), np.float32)
    with pytest.raises(ValueError, match=r"'wpe.weight' has shape \(7, 4\).*\(8, 4\)"):
        params_from_hf(GPT2, tensors)
    # NaN or infinite weights (a damaged file) are named, not loaded into NaN logits.
    for bad in (np.nan, np.inf, -np.inf):
        tensors = _gpt2_tensors()
        tensors["transformer.h.0.mlp.c_fc.weight"] = tensors[
            "transformer.h.0.mlp.c_fc.weight"
        ].copy()
        tensors["transformer.h.0.mlp.c_fc.weight"][1, 2] = bad
        with pytest.raises(ValueError, match=r"'h.0.mlp.c_fc.weight' holds 1 NaN or infinite"):
            params_from_hf(GPT2, tensors)


def test_vocab_size_mismatch_is_explained_without_tokenizers():
    with pytest.raises(ValueError, match="vocabulary mismatch.*128256 rows.*32000"):
        check_vocab_match(128256, 32000, None, None)
    with pytest.warns(UserWarning, match="only vocab_size was checked"):
        check_vocab_match(100, 100, None, None)


class _FakeTokenizer:
    def __init__(self, strings):
        self.strings = strings

    def vocab(self):
        return {s: i for i, s in enumerate(self.strings)}


def test_padded_tables_around_one_tokenizer_pass_the_check():
    words = [f"w{i}" for i in range(90)]
    check_vocab_match(101, 96, _FakeTokenizer(words), _FakeTokenizer(words))  # no error
    with pytest.raises(ValueError, match="tokenizer mismatch: 1 token ids.*id 89: target 'w89'"):
        check_vocab_match(101, 101, _FakeTokenizer(words), _FakeTokenizer(words[:-1]))
    with pytest.raises(ValueError, match="ids up to 89.*101 \\(target\\) and 80 \\(draft\\)"):
        check_vocab_match(101, 80, _FakeTokenizer(words), _FakeTokenizer(words))


@pytest.mark.parametrize("tie", [True, False])
def test_resize_vocab_pads_with_zeros_and_trims(tie):
    hf = {**LLAMA, "tie_word_embeddings": tie}
    tensors = _llama_tensors()
    if tie:
        del tensors["lm_head.weight"]
    cfg, params = params_from_hf(hf, tensors)
    model = TransformerLM(cfg)
    big, big_params = resize_vocab(model, params, 7)
    assert big.vocab_size == 7 and big.config.num_layers == 1
    emb = np.asarray(big_params["embed"]["embedding"])  # [7, 8]
    np.testing.assert_array_equal(emb[:5], params["embed"]["embedding"])
    np.testing.assert_array_equal(emb[5:], 0)
    if not tie:
        kernel = np.asarray(big_params["head"]["kernel"])  # [8, 7]
        np.testing.assert_array_equal(kernel[:, :5], params["head"]["kernel"])
        np.testing.assert_array_equal(kernel[:, 5:], 0)
    small, small_params = resize_vocab(model, params, 3)
    np.testing.assert_array_equal(
        small_params["embed"]["embedding"], params["embed"]["embedding"][:3]
    )
    # The resized params fit the resized model, and the added ids read as logit 0.
    tokens = jnp.asarray([[1, 6]])
    logits, _ = jax.jit(big.apply)(big_params, big.init_state(1, 4), tokens, jnp.asarray([2]))
    np.testing.assert_array_equal(np.asarray(logits)[0, :, 5:], 0)
    assert jax.eval_shape(
        small.apply, small_params, small.init_state(1, 4), tokens[:, :1], jnp.asarray([1])
    )[0].shape == (1, 1, 3)


def test_checkpoint_directory_errors(tmp_path):
    with pytest.raises(ValueError, match="not a local directory.*never downloads"):
        read_tensors(tmp_path / "gpt2")
    with pytest.raises(ValueError, match="has no config.json"):
        read_tensors(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(GPT2))
    with pytest.raises(ValueError, match="no weights"):
        read_tensors(tmp_path)


def test_sharded_safetensors_are_merged(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    tensors = _gpt2_tensors()
    names = sorted(tensors)
    shards = {
        "model-00001-of-00002.safetensors": names[:5],
        "model-00002-of-00002.safetensors": names[5:],
    }
    for file, part in shards.items():
        safetensors_numpy.save_file({n: tensors[n] for n in part}, str(tmp_path / file))
    weight_map = {n: file for file, part in shards.items() for n in part}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (tmp_path / "config.json").write_text(json.dumps(GPT2))
    loaded = read_tensors(tmp_path)
    assert sorted(loaded) == names
    for n in names:
        np.testing.assert_array_equal(loaded[n], tensors[n])
