"""Tiny GGUF files written with `gguf.GGUFWriter`, for testing `specjax.convert.load_gguf`.

`write_tiny_gguf` draws a random Llama in Hugging Face's layout, quantizes each weight with
`gguf.quants.quantize` in the type asked for, permutes the Q/K rows as llama.cpp's converter
does (`permute` in convert_hf_to_gguf.py, copied below), and writes the file with a small
byte-level BPE tokenizer and a chat template. It returns the HF-layout float32 tensors the
loader must recover (the dequantized weights: quantizing rows is independent per row, so it
commutes with the row permutation). Every metadata field can be dropped or overridden, so the
loader's refusals are exercised on files that differ from a good one in one field.
"""

from __future__ import annotations

import os

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

# The 256 byte characters of byte-level BPE (GPT-2's bytes_to_unicode), in byte order.
_PRINTABLE = (
    list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
)


def byte_chars() -> list[str]:
    """GPT-2's byte -> printable character map, as a list indexed by byte."""
    chars, extra = {}, 0
    for b in range(256):
        if b in _PRINTABLE:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Merges of a toy vocabulary (applied in this order); "Ġ" is the space byte.
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ Ġ", "a t", "Ġ a", "e r", "o n", "Ġ c"]
TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + "
    "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def toy_vocabulary() -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges): specials (control), 256 bytes, then one token per merge."""
    tokens = SPECIALS + byte_chars()
    for merge in MERGES:
        tokens.append(merge.replace(" ", ""))
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS))
    return tokens, types, list(MERGES)


def permute(weights: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf.py `permute` (HF "rotate half" rows -> interleaved)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _round_trip(w: np.ndarray, qtype) -> tuple[np.ndarray, np.ndarray]:
    """(what to write, what a correct reader recovers) for float32 `w` in `qtype`."""
    if qtype == Q.F32:
        return w, w
    if qtype == Q.F16:
        data = w.astype(np.float16)
        return data, data.astype(np.float32)
    data = gguf.quants.quantize(w, qtype)
    return data, gguf.quants.dequantize(data, qtype).reshape(w.shape)


def write_tiny_gguf(
    path,
    *,
    layers: int = 2,
    embed: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    mlp: int = 96,
    context: int = 128,
    tied: bool = False,
    qtype=Q.Q8_0,
    embed_qtype=Q.Q8_0,
    arch: str = "llama",
    pre: str = "smollm",
    meta: dict | None = None,
    drop: tuple = (),
    extra_tensors: dict | None = None,
    raw_tensors: dict | None = None,
    seed: int = 0,
    endianess=gguf.GGUFEndian.LITTLE,
) -> dict:
    """Writes a random tiny Llama GGUF to `path`.

    Args:
      path: the output file.
      layers, embed, heads, kv_heads, mlp, context: the architecture (head_dim = embed // heads;
        quantized types need embed and mlp multiples of their block size, 32 or 256).
      tied: omit `output.weight` (the head is the embedding).
      qtype: type of the block projections (norms stay F32, as llama.cpp writes them).
      embed_qtype: type of token_embd (and output).
      arch: `general.architecture` (keys are prefixed by it).
      pre: `tokenizer.ggml.pre`.
      meta: metadata to add or override, {key: (value, GGUFValueType)}.
      drop: metadata keys (or tensor names) to leave out.
      extra_tensors: {gguf name: float32 array} written as F32 besides the model's.
      raw_tensors: {gguf name: (uint8 array, GGMLQuantizationType)} written as given.
      seed: numpy seed of the weights.
      endianess: the file's byte order (`gguf.GGUFEndian.BIG`: as written on a big-endian host).

    Returns:
      {HF Llama name: float32 array}: the weights a correct loader recovers.
    """
    rng = np.random.default_rng(seed)
    tokens, types, merges = toy_vocabulary()
    vocab, hd = len(tokens), embed // heads

    def w(*shape, scale=0.3):
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    hf, stored = {}, {}  # HF name -> recovered; gguf name -> (data, qtype)

    def put(gguf_name, hf_name, value, q, n_perm=None):
        data, back = _round_trip(value, q)
        hf[hf_name] = back
        if n_perm is not None:  # llama.cpp stores Q/K rows permuted
            data = permute(data, heads, n_perm)
        stored[gguf_name] = (data, q)

    put("token_embd.weight", "embed_tokens.weight", w(vocab, embed), embed_qtype)
    put("output_norm.weight", "norm.weight", 1 + w(embed, scale=0.1), Q.F32)
    if not tied:
        put("output.weight", "lm_head.weight", w(vocab, embed), embed_qtype)
    for i in range(layers):
        b, p = f"blk.{i}.", f"layers.{i}."
        put(b + "attn_norm.weight", p + "input_layernorm.weight", 1 + w(embed, scale=0.1), Q.F32)
        put(b + "attn_q.weight", p + "self_attn.q_proj.weight", w(heads * hd, embed), qtype, heads)
        put(
            b + "attn_k.weight",
            p + "self_attn.k_proj.weight",
            w(kv_heads * hd, embed),
            qtype,
            kv_heads,
        )
        put(b + "attn_v.weight", p + "self_attn.v_proj.weight", w(kv_heads * hd, embed), qtype)
        put(b + "attn_output.weight", p + "self_attn.o_proj.weight", w(embed, heads * hd), qtype)
        put(
            b + "ffn_norm.weight",
            p + "post_attention_layernorm.weight",
            1 + w(embed, scale=0.1),
            Q.F32,
        )
        put(b + "ffn_gate.weight", p + "mlp.gate_proj.weight", w(mlp, embed), qtype)
        put(b + "ffn_up.weight", p + "mlp.up_proj.weight", w(mlp, embed), qtype)
        put(b + "ffn_down.weight", p + "mlp.down_proj.weight", w(embed, mlp), qtype)
    for name, value in (extra_tensors or {}).items():
        stored[name] = (np.asarray(value, np.float32), Q.F32)
    for name, (data, q) in (raw_tensors or {}).items():
        stored[name] = (data, q)

    a = arch + "."
    fields = {
        a + "block_count": (layers, V.UINT32),
        a + "context_length": (context, V.UINT32),
        a + "embedding_length": (embed, V.UINT32),
        a + "feed_forward_length": (mlp, V.UINT32),
        a + "attention.head_count": (heads, V.UINT32),
        a + "attention.head_count_kv": (kv_heads, V.UINT32),
        a + "rope.freq_base": (10000.0, V.FLOAT32),
        a + "attention.layer_norm_rms_epsilon": (1e-5, V.FLOAT32),
        a + "rope.dimension_count": (hd, V.UINT32),
        a + "vocab_size": (vocab, V.UINT32),
        "tokenizer.ggml.model": ("gpt2", V.STRING),
        "tokenizer.ggml.pre": (pre, V.STRING),
        "tokenizer.ggml.tokens": (tokens, V.ARRAY),
        "tokenizer.ggml.token_type": (types, V.ARRAY),
        "tokenizer.ggml.merges": (merges, V.ARRAY),
        "tokenizer.ggml.bos_token_id": (1, V.UINT32),
        "tokenizer.ggml.eos_token_id": (2, V.UINT32),
        "tokenizer.ggml.padding_token_id": (2, V.UINT32),
        "tokenizer.ggml.add_bos_token": (False, V.BOOL),
        "tokenizer.chat_template": (TEMPLATE, V.STRING),
    }
    fields.update(meta or {})
    writer = gguf.GGUFWriter(str(path), arch, endianess=endianess)
    for key, (value, vtype) in fields.items():
        if key in drop:
            continue
        if vtype == V.ARRAY:
            sub = V.STRING if isinstance(value[0], str) else V.INT32
            writer.add_key_value(key, value, vtype, sub_type=sub)
        else:
            writer.add_key_value(key, value, vtype)
    for name, (data, q) in stored.items():
        if name in drop:
            continue
        if q in (Q.F32, Q.F16):
            writer.add_tensor(name, data)
        else:
            writer.add_tensor(name, data, raw_dtype=q)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return {k: v for k, v in hf.items() if k not in {_hf(n) for n in drop}}


def _hf(gguf_name: str) -> str:
    """HF name of a model tensor's gguf name (for `drop`), else the name itself."""
    from specjax.convert.gguf import _hf_name

    return _hf_name(gguf_name)


def write_tiny_chat_pair(root, steps: int = 4) -> tuple[str, str]:
    """(tiny.gguf path, trained draft workdir) under `root`: a tiny Llama GGUF with a chat
    template standing in for SmolLM2 (context 1024, tied embeddings), and its distilled
    one-layer draft trained for `steps` steps by the heads mode (as real runs train distilled2).
    """
    from configs import heads as heads_config
    from experiments.heads import train

    path = os.path.join(os.fspath(root), "tiny.gguf")
    write_tiny_gguf(path, context=1024, tied=True)
    head = heads_config.get_config(f"distilled,layers=1,steps={steps},prompts=4")
    head.target = path
    head.data.max_new_tokens = 8
    head.data.batch_size = 4
    head.train.seq_len = 32
    head.train.ce_vocab = 0
    head.train.checkpoint_every = 2
    head.train.warmup_steps = 1
    head_dir = os.path.join(os.fspath(root), "distilled1-tiny")
    train.run(head, head_dir)
    return path, head_dir
