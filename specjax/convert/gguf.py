"""GGUF files (llama.cpp's format) as specjax models: the `llama` architecture, byte-level BPE.

    model, params, tokenizer = load_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")

The file is parsed by `convert/gguf_file.py` (metadata and tensor table, memory-mapped). Every
weight is dequantized by `gguf.quants.dequantize`, from the `gguf` package that llama.cpp
maintains on PyPI (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the K-quants Q2_K..Q6_K),
then held in float32 or bfloat16: specjax computes on dequantized weights, so a 4-bit file
takes the memory of its float model.

The mapping reuses the Hugging Face Llama converter (`convert/llama.py`): the `llama.*`
metadata becomes a config.json-like dict for `llama_config`, and the tensors are renamed to
HF's names for `llama_params`, with one change on the way: llama.cpp's converter permutes the
rows of the Q and K projections (`permute` in convert_hf_to_gguf.py: each head's rows are
interleaved so that rotary pairs are adjacent, GPT-J style), with `head_count` heads for Q and
`head_count_kv` for K; `unpermute_rows` undoes it, giving back the "rotate half" layout that HF
and specjax share. The head is tied when the file has no `output.weight`.

Anything specjax does not model is refused with one line naming the field: another
`general.architecture`, experts (`llama.expert_count` > 0), RoPE scaling, a rotary dimension
other than the head size, tokenizers other than `gpt2` (`gguf_tokenizer.py`), quantization
types outside the list above (naming the tensor), big-endian files, and truncated or corrupt
files.
"""

from __future__ import annotations

import math
import os

import gguf
import jax
import jax.numpy as jnp
import numpy as np
from gguf import GGMLQuantizationType as Q

from specjax import checks
from specjax.convert.gguf_file import GGUFFile
from specjax.convert.gguf_tokenizer import tokenizer_from_gguf
from specjax.convert.hf import host_params_from_hf, params_from_hf
from specjax.models.layout import resolve_matmul, with_matmul
from specjax.models.transformer import TransformerLM

ARCHITECTURE = "llama"
DTYPES = ("float32", "bfloat16")
# Weight types dequantized through gguf.quants.dequantize.
SUPPORTED_TYPES = (
    Q.F32,
    Q.F16,
    Q.BF16,
    Q.Q4_0,
    Q.Q4_1,
    Q.Q5_0,
    Q.Q5_1,
    Q.Q8_0,
    Q.Q2_K,
    Q.Q3_K,
    Q.Q4_K,
    Q.Q5_K,
    Q.Q6_K,
)
# GGUF tensor name -> HF Llama name (llama.cpp's `MODEL_TENSOR` names for LLM_ARCH_LLAMA).
GLOBAL_TENSORS = {
    "token_embd": "embed_tokens",
    "output_norm": "norm",
    "output": "lm_head",
}
BLOCK_TENSORS = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def read_gguf(path) -> GGUFFile:
    """Opens a GGUF file (memory-mapped); one-line ValueError if it is truncated or corrupt."""
    path = os.fspath(path)
    size = os.path.getsize(path)
    try:
        return GGUFFile.open(path)
    except ValueError as e:
        reason = " ".join(str(e).split())
        raise ValueError(
            f"{path}: not a readable GGUF file, truncated or corrupt ({size} bytes; {reason[:200]})"
        ) from e


def read_metadata(reader: GGUFFile) -> dict:
    """{key: value} of a file's metadata (strings, numbers, bools, lists)."""
    return dict(reader.metadata)


def unpermute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undoes llama.cpp's rotary permutation of a Q or K projection.

    convert_hf_to_gguf.py stores `w.reshape(n_head, 2, rows // n_head // 2, ...)
    .swapaxes(1, 2)`: within each head, row j of the first half and row j of the second half
    become rows 2j and 2j + 1. This is the inverse.

    Args:
      w: [n_head * head_dim, ...] the stored weight (or a bias [n_head * head_dim]).
      n_head: heads of this projection (head_count for Q, head_count_kv for K).

    Returns:
      The weight in HF's layout, same shape.
    """
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _require(meta: dict, key: str, path: str):
    if key not in meta:
        raise ValueError(f"{path}: GGUF metadata field {key!r} is missing")
    value = meta[key]
    if isinstance(value, list):
        raise ValueError(
            f"{path}: GGUF metadata field {key!r} is a per-layer list; specjax needs one value"
        )
    return value


def _count(meta: dict, key: str, path: str, default: int | None = None) -> int:
    """A metadata field that counts something: an integer >= 1 (`default` where absent)."""
    value = _require(meta, key, path) if default is None or key in meta else default
    if not checks.is_integer(value) or value < 1:
        raise ValueError(
            f"{path}: GGUF metadata field {key!r} must be an integer >= 1, got {value!r}"
        )
    return int(value)


def _positive(meta: dict, key: str, path: str, default: float | None = None) -> float:
    """A metadata field that is a finite number > 0 (`default` where absent)."""
    value = _require(meta, key, path) if default is None or key in meta else default
    if not checks.is_real(value):
        raise ValueError(f"{path}: GGUF metadata field {key!r} must be a number, got {value!r}")
    if not (math.isfinite(float(value)) and float(value) > 0):
        raise ValueError(
            f"{path}: GGUF metadata field {key!r} must be finite and > 0, got {value!r}"
        )
    return float(value)


def hf_config_from_gguf(meta: dict, tensor_names, path: str = "GGUF file") -> dict:
    """A config.json-like dict (the keys `llama_config` reads) from a file's llama metadata.

    Args:
      meta: the file's metadata (`read_metadata`).
      tensor_names: the names of its tensors (the head is tied when `output.weight` is absent).
      path: the file, for error messages.

    Raises:
      ValueError: one line naming the field that specjax does not implement.
    """
    arch = meta.get("general.architecture")
    if arch != ARCHITECTURE:
        raise ValueError(
            f"{path}: general.architecture={arch!r}; specjax converts only {ARCHITECTURE!r} "
            "GGUF files"
        )
    p = ARCHITECTURE + "."
    experts = meta.get(p + "expert_count", 0) or 0
    if experts > 0:
        raise ValueError(
            f"{path}: {p}expert_count={experts}; mixture-of-experts models are not implemented"
        )
    scaling = meta.get(p + "rope.scaling.type", "none")
    factor = meta.get(p + "rope.scaling.factor", 1.0)
    if scaling != "none" or factor not in (0.0, 1.0):
        raise ValueError(
            f"{path}: {p}rope.scaling.type={scaling!r} (factor {factor}); RoPE scaling of GGUF "
            "files is not implemented"
        )
    if "rope_freqs.weight" in tensor_names:
        raise ValueError(
            f"{path}: has tensor 'rope_freqs.weight' (per-frequency RoPE factors, Llama 3.1 "
            "style); RoPE scaling of GGUF files is not implemented"
        )
    heads = _count(meta, p + "attention.head_count", path)
    kv_heads = _count(meta, p + "attention.head_count_kv", path, default=heads)
    if heads % kv_heads:
        raise ValueError(
            f"{path}: {p}attention.head_count={heads} is not a multiple of "
            f"{p}attention.head_count_kv={kv_heads} (grouped-query attention shares each key/value "
            "head among a whole number of query heads)"
        )
    embed = _count(meta, p + "embedding_length", path)
    if p + "attention.key_length" not in meta and embed % heads:
        raise ValueError(
            f"{path}: {p}embedding_length={embed} is not divisible by {p}attention.head_count="
            f"{heads}, and {p}attention.key_length (the head dim) is not given"
        )
    head_dim = _count(meta, p + "attention.key_length", path, default=embed // heads)
    value_dim = _count(meta, p + "attention.value_length", path, default=head_dim)
    if value_dim != head_dim:
        raise ValueError(
            f"{path}: {p}attention.value_length={value_dim} differs from key_length={head_dim}"
        )
    rope_dim = _count(meta, p + "rope.dimension_count", path, default=head_dim)
    if rope_dim != head_dim:
        raise ValueError(
            f"{path}: {p}rope.dimension_count={rope_dim} but the head dim is {head_dim}; specjax "
            "rotates the whole head (partial rotary embeddings are not implemented)"
        )
    tokens = meta.get("tokenizer.ggml.tokens")
    vocab = meta.get(p + "vocab_size") or (len(tokens) if tokens else None)
    if vocab is None:
        raise ValueError(f"{path}: neither {p}vocab_size nor tokenizer.ggml.tokens is present")
    return {
        "model_type": "llama",
        "hidden_act": "silu",
        "vocab_size": int(vocab),
        "hidden_size": embed,
        "num_hidden_layers": _count(meta, p + "block_count", path),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": _count(meta, p + "feed_forward_length", path),
        "max_position_embeddings": _count(meta, p + "context_length", path),
        "rms_norm_eps": _positive(meta, p + "attention.layer_norm_rms_epsilon", path),
        "rope_theta": _positive(meta, p + "rope.freq_base", path, default=10000.0),
        "tie_word_embeddings": "output.weight" not in tensor_names,
    }


def _hf_name(name: str) -> str:
    """HF name of a GGUF tensor; names outside the llama layout are kept (and then refused by
    `TensorSource.check_all_used` as tensors with no place in the model)."""
    stem, _, suffix = name.rpartition(".")
    if stem in GLOBAL_TENSORS:
        return f"{GLOBAL_TENSORS[stem]}.{suffix}"
    parts = stem.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in BLOCK_TENSORS:
        return f"layers.{parts[1]}.{BLOCK_TENSORS[parts[2]]}.{suffix}"
    return name


def hf_tensors(reader: GGUFFile, hf: dict, path: str = "GGUF file", unpermute=True):
    """{HF Llama name: float32 numpy array} of every tensor, dequantized and un-permuted.

    Args:
      reader: the open file.
      hf: `hf_config_from_gguf`'s dict (head counts for the un-permutation).
      path: the file, for error messages.
      unpermute: undo the rotary permutation of Q and K (False only to show it matters).

    Raises:
      ValueError: a tensor has a type specjax does not dequantize, naming both.
    """
    if reader.byte_order != "<":
        # gguf.quants.dequantize reads every number (F32 data, the scales inside quantized
        # blocks) in the host's little-endian order: a big-endian file would load as garbage.
        raise ValueError(
            f"{path}: a big-endian GGUF file; specjax loads little-endian files only (llama.cpp "
            "writes big-endian ones only when asked, for big-endian hosts)"
        )
    tensors = {}
    for t in reader.tensors:
        qtype = t.tensor_type
        if qtype not in SUPPORTED_TYPES:
            raise ValueError(
                f"{path}: tensor {t.name!r} has type {qtype.name}, which specjax does not "
                f"dequantize (supported: {', '.join(q.name for q in SUPPORTED_TYPES)})"
            )
        value = np.asarray(gguf.quants.dequantize(t.data, qtype), np.float32)
        shape = t.shape[::-1]  # ggml lists ne0 (in) first
        value = value.reshape(shape)
        name = _hf_name(t.name)
        if unpermute and name.endswith(("self_attn.q_proj.weight", "self_attn.q_proj.bias")):
            value = unpermute_rows(value, hf["num_attention_heads"])
        elif unpermute and name.endswith(("self_attn.k_proj.weight", "self_attn.k_proj.bias")):
            value = unpermute_rows(value, hf["num_key_value_heads"])
        tensors[name] = value
    return tensors


def check_dtype(dtype) -> str:
    """`dtype` after checking it is one load_gguf computes in."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}; load_gguf computes in one of {DTYPES}")
    return dtype


def params_from_gguf(reader: GGUFFile, dtype: str = "float32", *, path="GGUF file"):
    """(TransformerConfig, params) of an open GGUF file.

    Args:
      reader: `read_gguf(path)`.
      dtype: "float32" or "bfloat16" (parameters and compute).
      path: the file, for error messages.

    Returns:
      (config, params) with params as device arrays, checked against the shapes
      `TransformerLM(config).init_params` produces (`params_from_hf`, which also makes
      `TensorSource.check_all_used` name any tensor with no place in the model).
    """
    check_dtype(dtype)
    hf = hf_config_from_gguf(read_metadata(reader), {t.name for t in reader.tensors}, path)
    return params_from_hf(hf, hf_tensors(reader, hf, path), dtype)


def load_gguf(path, dtype: str = "float32", matmul: str = "auto"):
    """Loads a llama-architecture GGUF file as a specjax model with its tokenizer.

    Args:
      path: the .gguf file.
      dtype: "float32" (logits within 1e-4 of transformers' float32 on the same file) or
        "bfloat16".
      matmul: the weight layout (`TransformerConfig.matmul`): "xla", "packed" (specjax's CPU
        kernels), or "auto": "packed" for float32 where the kernels run (a CPU backend with
        the compiled kernels), else "xla" (`models.layout.default_matmul`).

    Returns:
      (TransformerLM, params, HFTokenizer): the same contract as `load_hf_model`. The model's
      `trained_context` is the file's `llama.context_length`; `specjax.Pipeline` warns when
      its cache_len goes beyond it.
    """
    path = os.fspath(path)
    check_dtype(dtype)
    matmul = resolve_matmul(matmul, dtype)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"path={path!r}: no such GGUF file")
    reader = read_gguf(path)
    meta = read_metadata(reader)
    hf = hf_config_from_gguf(meta, {t.name for t in reader.tensors}, path)
    tokenizer = tokenizer_from_gguf(meta, path)  # fails before any weight is dequantized
    tensors = hf_tensors(reader, hf, path)  # its errors name the file
    try:
        cfg, params = host_params_from_hf(hf, tensors, dtype)
    except ValueError as err:  # a tensor's shape or values: name the file too
        raise ValueError(f"{path}: {err}") from err
    # The layout change in numpy, then one move to the device (SmolLM2: 0.3 s, not the 1.4 s
    # of the same repacking as eager jax ops).
    model, params = with_matmul(TransformerLM(cfg), params, matmul)
    return model, jax.tree.map(jnp.asarray, params), tokenizer
