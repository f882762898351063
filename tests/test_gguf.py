"""`specjax.convert.load_gguf` on tiny GGUF files written here with `gguf.GGUFWriter`.

The files (`tests/gguf_writer.py`) hold a random Llama whose weights are quantized by
`gguf.quants.quantize` and whose Q/K rows are permuted as llama.cpp's converter permutes them,
with a toy byte-level BPE vocabulary. The loader must recover the HF-layout weights exactly,
build the tokenizer llama.cpp would, and refuse every file it does not implement in one line
naming the field, tensor or argument. No torch needed; `tests/test_real_model.py` covers the
real SmolLM2 file.
"""

import os
import warnings

import gguf
import jax
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V
from gguf_writer import SPECIALS, TEMPLATE, write_tiny_gguf

import specjax
from specjax.convert import load_gguf
from specjax.convert.gguf import hf_tensors, read_gguf, read_metadata
from specjax.convert.hf import params_from_hf
from specjax.convert.llama import llama_config


def _expected_params(hf_tensors_, path, dtype="float32"):
    """Params converted by the HF Llama path from the tensors the writer says it stored."""
    reader = read_gguf(path)
    meta = read_metadata(reader)
    hf = {
        "model_type": "llama",
        "vocab_size": meta["llama.vocab_size"],
        "hidden_size": meta["llama.embedding_length"],
        "num_hidden_layers": meta["llama.block_count"],
        "num_attention_heads": meta["llama.attention.head_count"],
        "num_key_value_heads": meta["llama.attention.head_count_kv"],
        "intermediate_size": meta["llama.feed_forward_length"],
        "max_position_embeddings": meta["llama.context_length"],
        "rms_norm_eps": meta["llama.attention.layer_norm_rms_epsilon"],
        "rope_theta": meta["llama.rope.freq_base"],
        "tie_word_embeddings": "lm_head.weight" not in hf_tensors_,
    }
    return params_from_hf(hf, hf_tensors_, dtype)


def _assert_trees_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x, np.float32), np.asarray(y, np.float32))


@pytest.mark.parametrize(
    "qtype, embed_qtype, tied",
    [
        (Q.F32, Q.F32, False),
        (Q.F16, Q.F16, True),
        (Q.Q8_0, Q.Q8_0, False),
        (Q.Q4_1, Q.Q8_0, True),  # SmolLM2's mix: Q4_1 blocks, Q8_0 tied embedding
        (Q.Q4_0, Q.BF16, False),
        (Q.Q5_1, Q.Q5_0, False),
    ],
)
def test_recovers_the_hf_layout_weights_exactly(tmp_path, qtype, embed_qtype, tied):
    path = tmp_path / "tiny.gguf"
    expected = write_tiny_gguf(path, qtype=qtype, embed_qtype=embed_qtype, tied=tied)
    model, params, _ = load_gguf(path, matmul="xla")  # the HF converter's layout
    cfg, want = _expected_params(expected, path)
    assert model.config == cfg
    assert cfg.tie_embeddings == tied and "head" not in params if tied else "head" in params
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.max_len) == (4, 2, 16, 128)
    _assert_trees_equal(params, want)
    if qtype == Q.F32:  # nothing quantized: the writer's random HF weights come back bit-exact
        q = np.asarray(params["block_0"]["attn"]["query"]["kernel"])  # [embed, heads, hd]
        np.testing.assert_array_equal(
            q.reshape(64, 64).T, expected["layers.0.self_attn.q_proj.weight"]
        )


def test_bfloat16_params_are_the_float32_ones_rounded(tmp_path):
    path = tmp_path / "tiny.gguf"
    expected = write_tiny_gguf(path, qtype=Q.Q8_0)
    model, params, _ = load_gguf(path, dtype="bfloat16")
    assert model.config.dtype == model.config.param_dtype == "bfloat16"
    _, want = _expected_params(expected, path, "bfloat16")
    _assert_trees_equal(params, want)


def test_skipping_the_qk_unpermutation_changes_q_and_k_only(tmp_path):
    """Negative control: the permutation is real, K's uses head_count_kv (2, not 4)."""
    path = tmp_path / "tiny.gguf"
    expected = write_tiny_gguf(path, qtype=Q.F32, heads=4, kv_heads=2)
    reader = read_gguf(path)
    hf = {"num_attention_heads": 4, "num_key_value_heads": 2}
    raw = hf_tensors(reader, hf, unpermute=False)
    fixed = hf_tensors(reader, hf)
    for name, value in expected.items():
        np.testing.assert_array_equal(fixed[name], value)
        permuted = name.endswith(("q_proj.weight", "k_proj.weight"))
        assert np.array_equal(raw[name], value) != permuted, name
    # Un-permuting K with the query heads' count (a plausible bug) gives other rows.
    from specjax.convert.gguf import unpermute_rows

    k = raw["layers.0.self_attn.k_proj.weight"]
    assert not np.array_equal(unpermute_rows(k, 4), expected["layers.0.self_attn.k_proj.weight"])


def test_logits_equal_the_hf_converted_model(tmp_path):
    """Same params -> same logits; the un-permuted (wrong) model differs clearly."""
    path = tmp_path / "tiny.gguf"
    expected = write_tiny_gguf(path, qtype=Q.Q8_0)
    model, params, tok = load_gguf(path, matmul="xla")  # the HF converter's layout
    ids = tok.encode("the cat sat on the mat 42")[None, :]  # [1, T]
    n = np.array([ids.shape[1]], np.int32)

    def logits(p):
        state = model.init_state(1, 32)
        return np.asarray(model.apply(p, state, ids, n)[0][0])  # [T, vocab]

    _, want = _expected_params(expected, path)
    np.testing.assert_array_equal(logits(params), logits(want))
    reader = read_gguf(path)
    hf = {"num_attention_heads": 4, "num_key_value_heads": 2}
    _, broken = _expected_params(hf_tensors(reader, hf, unpermute=False), path)
    err = np.abs(logits(broken) - logits(params)).max() / np.abs(logits(params)).max()
    assert err > 1e-2  # against 0 for the right params: the mapping is not a no-op


def test_k_quants_pass_through_gguf_dequantize(tmp_path):
    """Q4_K (256-wide blocks; gguf cannot quantize it, so its bytes are drawn at random with
    small scales): the loader's weight is exactly gguf's dequantization, transposed."""
    rng = np.random.default_rng(3)
    blocks = rng.integers(0, 256, size=(256, 2, 144), dtype=np.uint8)  # [rows, blocks, bytes]
    scales = np.array([0.01, 0.002], np.float16).view(np.uint8)  # d, dmin: finite
    blocks[:, :, :4] = scales
    data = blocks.reshape(256, 2 * 144)  # ffn_up [mlp=256, embed=512] as Q4_K bytes
    path = tmp_path / "k.gguf"
    write_tiny_gguf(
        path, embed=512, heads=8, kv_heads=4, mlp=256, qtype=Q.Q8_0,
        raw_tensors={"blk.0.ffn_up.weight": (data, Q.Q4_K)},
    )  # fmt: skip
    _, params, _ = load_gguf(path, matmul="xla")  # the HF converter's layout
    want = gguf.quants.dequantize(data, Q.Q4_K)  # [256, 512]
    assert np.isfinite(want).all() and np.abs(want).max() > 0
    np.testing.assert_array_equal(np.asarray(params["block_0"]["mlp"]["up"]["kernel"]), want.T)


# -- the tokenizer --------------------------------------------------------------------------


def test_tokenizer_splits_every_digit_and_keeps_specials_whole(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    _, _, tok = load_gguf(path)
    assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.add_bos) == (1, 2, 2, False)
    assert tok.vocab_size == 269
    pieces = [tok.token_string(i) for i in tok.encode("the cat  123<|im_start|>\n½")]
    # smollm: "\p{N}" first ("1", "2", "3", "½" alone), then GPT-2's regex on what is left, so
    # "  " before the digits is one whitespace piece, merged to "ĠĠ".
    assert pieces == ["t", "he", "Ġc", "at", "ĠĠ", "1", "2", "3", "<|im_start|>", "Ċ", "Â", "½"]
    text = "Übung 3½ <|im_end|> the end\n\n  x"
    assert tok.decode(tok.encode(text)) == text
    for i, special in enumerate(SPECIALS):
        np.testing.assert_array_equal(tok.encode(special), [i])


def test_decode_names_ids_it_cannot_decode(tmp_path):
    """The backend dropped an unknown id from the text and truncated floats: now each is named,
    as the byte tokenizer names them."""
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    _, _, tok = load_gguf(path)
    ok = tok.encode("the cat")
    assert tok.decode(np.asarray(ok)) == tok.decode(list(ok)) == "the cat"
    for ids, error, match in (
        ([5, 269, 6], ValueError, r"ids must lie in \[0, 269\), got values in \[5, 269\]"),
        ([5, -1], ValueError, r"ids must lie in \[0, 269\)"),
        ([5.7, 6.0], TypeError, "ids must hold integers"),
        ([[5, 6]], ValueError, "ids must be 1-D"),
        ("72", TypeError, "ids must be a sequence of token ids"),
    ):
        with pytest.raises(error, match=match):
            tok.decode(ids)
    with pytest.raises(ValueError, match="lengths must be >= 0"):
        tok.decode_batch([ok, ok], lengths=[2, -1])
    with pytest.raises(ValueError, match="lengths must be 2 integers"):
        tok.decode_batch([ok, ok], lengths=[2])
    assert tok.decode_batch([ok, ok], lengths=np.array([len(ok), 0])) == ["the cat", ""]


def test_plain_gpt2_pre_tokenizer_keeps_numbers_together(tmp_path):
    """`pre` = gpt2 (no digit split): " 123" is one pre-token, "  " before it splits."""
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, pre="gpt2")
    _, _, tok = load_gguf(path)
    pieces = [tok.token_string(i) for i in tok.encode("the cat  123")]
    assert pieces == ["t", "he", "Ġc", "at", "Ġ", "Ġ", "1", "2", "3"]


def test_chat_template_renders_and_specials_become_single_ids(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    _, _, tok = load_gguf(path)
    messages = [{"role": "user", "content": "the 2 cats"}]
    text = tok.apply_chat_template(messages, tokenize=False)
    assert text == "<|im_start|>user\nthe 2 cats<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.apply_chat_template(messages)
    assert ids.dtype == np.int32 and ids[0] == 1 and list(ids).count(1) == 2
    np.testing.assert_array_equal(ids, tok.encode(text))
    assert tok.decode(ids) == text
    without = tok.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    assert without == "<|im_start|>user\nthe 2 cats<|im_end|>\n"


def test_model_without_chat_template_says_so(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, drop=("tokenizer.chat_template",))
    _, _, tok = load_gguf(path)
    with pytest.raises(ValueError, match="no chat template"):
        tok.apply_chat_template([{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="byte tokenizer has no chat template"):
        specjax.data.ByteTokenizer().apply_chat_template([{"role": "user", "content": "hi"}])


# -- refusals: one line naming the field, tensor or argument --------------------------------

U32, F32, STR = V.UINT32, V.FLOAT32, V.STRING
REFUSALS = [
    (dict(arch="gpt2"), "general.architecture='gpt2'"),
    (dict(meta={"llama.expert_count": (8, U32)}), "llama.expert_count=8"),
    (dict(meta={"llama.rope.scaling.type": ("linear", STR)}), "llama.rope.scaling.type='linear'"),
    (dict(meta={"llama.rope.scaling.factor": (4.0, F32)}), "rope.scaling"),
    (dict(extra_tensors={"rope_freqs.weight": np.ones(8)}), "'rope_freqs.weight'"),
    (dict(meta={"llama.rope.dimension_count": (8, U32)}), "llama.rope.dimension_count=8"),
    (dict(meta={"tokenizer.ggml.model": ("llama", STR)}), "tokenizer.ggml.model='llama'"),
    (dict(pre="llama-bpe"), "tokenizer.ggml.pre='llama-bpe' is not implemented"),
    (dict(drop=("tokenizer.ggml.pre",)), "'tokenizer.ggml.pre' is missing"),
    (dict(drop=("tokenizer.ggml.model",)), "'tokenizer.ggml.model' is missing"),
    (dict(drop=("tokenizer.ggml.tokens",)), "'tokenizer.ggml.tokens' is missing"),
    (dict(drop=("tokenizer.ggml.merges",)), "'tokenizer.ggml.merges' is missing"),
    (dict(drop=("tokenizer.ggml.token_type",)), "'tokenizer.ggml.token_type' is missing"),
    (dict(meta={"tokenizer.ggml.merges": (["Ġ t", "x y"], V.ARRAY)}), "merges[1]='x y'"),
    (dict(meta={"tokenizer.ggml.merges": (["Ġ e"], V.ARRAY)}), "merges[0]='Ġ e' is not"),
    (dict(drop=("llama.block_count",)), "'llama.block_count' is missing"),
    (dict(drop=("llama.context_length",)), "'llama.context_length' is missing"),
    (dict(qtype=Q.TQ2_0), "tensor 'blk.0.attn_q.weight' has type TQ2_0"),
    (dict(drop=("blk.1.ffn_up.weight",)), "lacks tensor 'layers.1.mlp.up_proj.weight'"),
    (dict(extra_tensors={"blk.0.attn_q_norm.weight": np.ones(16)}), "blk.0.attn_q_norm"),
    # Fields out of range: a ZeroDivisionError, a reshape error or NaN logits before.
    (dict(meta={"llama.attention.head_count": (0, U32)}), "'llama.attention.head_count' must"),
    (dict(meta={"llama.attention.head_count_kv": (3, U32)}), "not a multiple of llama.attention"),
    (dict(meta={"llama.context_length": (0, U32)}), "'llama.context_length' must be an integer"),
    (dict(meta={"llama.rope.freq_base": (float("nan"), F32)}), "'llama.rope.freq_base' must be"),
    (dict(meta={"llama.rope.freq_base": (-1.0, F32)}), "freq_base' must be finite and > 0"),
    (dict(meta={"llama.attention.layer_norm_rms_epsilon": (-1.0, F32)}), "rms_epsilon' must be"),
]


@pytest.mark.parametrize("kwargs, message", REFUSALS, ids=[m for _, m in REFUSALS])
def test_refuses_what_it_does_not_implement(tmp_path, kwargs, message):
    path = tmp_path / "bad.gguf"
    wide = dict(embed=256, mlp=256) if "qtype" in kwargs else {}  # TQ2_0: 256-wide blocks
    write_tiny_gguf(path, **wide, **kwargs)
    with pytest.raises(ValueError) as info:
        load_gguf(path)
    text = str(info.value)
    assert message in text and "\n" not in text, text


@pytest.mark.parametrize("dtype", ["float16", "int8", None])
def test_refuses_dtypes_other_than_float32_and_bfloat16(tmp_path, dtype):
    with pytest.raises(ValueError, match=f"dtype={dtype!r}; load_gguf computes in one of"):
        load_gguf(tmp_path / "never-read.gguf", dtype=dtype)


def _cut_points(path):
    """{where: byte offset} of cuts inside the header, the metadata, the tensor infos and the
    tensor data of a written file."""
    reader = gguf.GGUFReader(path)
    tokens = reader.fields["tokenizer.ggml.tokens"]
    infos = reader.tensors[0].field.offset
    return {
        "header": 12,
        "metadata": int(tokens.offset) + 100,
        "tensor info": int(infos) + 5,
        "tensor data": os.path.getsize(path) - 100,
        "empty": 0,
    }


@pytest.mark.parametrize("where", ["header", "metadata", "tensor info", "tensor data", "empty"])
def test_truncated_files_fail_in_one_line_naming_the_file(tmp_path, where):
    good = tmp_path / "good.gguf"
    write_tiny_gguf(good)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good.read_bytes()[: _cut_points(good)[where]])
    with pytest.raises(ValueError) as info:
        load_gguf(cut)
    text = str(info.value)
    assert text.startswith(f"{cut}: not a readable GGUF file, truncated or corrupt"), text
    assert "\n" not in text


def test_a_big_endian_file_is_refused_not_loaded_as_garbage(tmp_path):
    # gguf.quants.dequantize reads numbers in little-endian order; the file parses (its tensors
    # are checked byte for byte in tests/test_gguf_file.py) but its weights would be garbage.
    path = tmp_path / "big.gguf"
    write_tiny_gguf(path, qtype=Q.F32, embed_qtype=Q.F32, endianess=gguf.GGUFEndian.BIG)
    with pytest.raises(ValueError, match=r"big\.gguf: a big-endian GGUF file; specjax loads"):
        load_gguf(path)


@pytest.mark.parametrize("bad", [np.nan, np.inf], ids=["nan", "inf"])
def test_a_non_finite_weight_is_named_with_the_file(tmp_path, bad):
    # One float32 of an F32 tensor overwritten in place: the file still parses, and used to
    # load into a model whose logits are NaN.
    path = tmp_path / "damaged.gguf"
    weights = write_tiny_gguf(path, qtype=Q.F32, embed_qtype=Q.F32)
    blob = bytearray(path.read_bytes())
    at = blob.find(weights["layers.1.mlp.up_proj.weight"].tobytes()[:64])
    assert at > 0
    blob[at + 8 : at + 12] = np.float32(bad).tobytes()
    path.write_bytes(bytes(blob))
    with pytest.raises(ValueError) as info:
        load_gguf(path)
    assert str(info.value).startswith(
        f"{path}: checkpoint tensor 'layers.1.mlp.up_proj.weight' holds 1 NaN or infinite"
    ), str(info.value)


def test_not_a_gguf_file(tmp_path):
    bad = tmp_path / "notes.gguf"
    bad.write_text("hello, this is not a model\n" * 10)
    with pytest.raises(ValueError, match=r"notes\.gguf: not a readable GGUF file.*magic"):
        load_gguf(bad)
    with pytest.raises(FileNotFoundError, match="no such GGUF file"):
        load_gguf(tmp_path / "missing.gguf")


# -- Pipeline on a GGUF file ----------------------------------------------------------------


def test_pipeline_bos_follows_the_file_and_chat_uses_the_template(tmp_path):
    """SmolLM2-style files: add_bos_token False and BOS = <|im_start|>. A raw prompt must start
    with its own text (no stray <|im_start|>), a chat prompt with exactly one <|im_start|>."""
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, qtype=Q.Q8_0)
    pipe = specjax.Pipeline.from_pretrained(target=os.fspath(path), cache_len=64)
    tok = pipe.tokenizer
    assert pipe.add_bos is False
    raw = pipe.generate(["the cat", "on the mat"], max_new_tokens=4)
    first = np.asarray(raw.result.tokens)[:, 0]
    np.testing.assert_array_equal(first, [tok.encode("the")[0], tok.encode("on")[0]])
    messages = [{"role": "user", "content": "the cat"}]
    chat = pipe.chat([messages, messages + [{"role": "assistant", "content": "at"}]], 4)
    assert isinstance(chat.text, list) and len(chat.text) == 2
    rows = np.asarray(chat.result.tokens)
    for b, conversation in enumerate(
        [messages, messages + [{"role": "assistant", "content": "at"}]]
    ):
        n = int(chat.result.prompt_lengths[b])
        np.testing.assert_array_equal(rows[b, :n], tok.apply_chat_template(conversation))
        assert rows[b, 0] == 1 and rows[b, 1] != 1  # one <|im_start|>, not two
    one = pipe.chat(messages, max_new_tokens=4)
    assert isinstance(one.text, str) and one.text == chat.text[0]
    # add_bos=True restores the old default explicitly.
    forced = specjax.Pipeline(pipe.target, pipe.target_params, tokenizer=tok, add_bos=True)
    assert forced.add_bos and forced.tokenizer.encode("x", add_bos=True)[0] == 1


def test_pipeline_warns_beyond_the_trained_context_and_refuses_long_prompts(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, context=128)
    model, params, tok = load_gguf(path)
    assert model.trained_context == 128 and model.max_positions is None
    with pytest.warns(UserWarning, match="trained context of 128 positions"):
        specjax.Pipeline(model, params, tokenizer=tok, cache_len=256)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pipe = specjax.Pipeline(model, params, tokenizer=tok, cache_len=32)
    with pytest.raises(ValueError, match=r"exceeds cache_len=32") as info:
        pipe.generate("the cat " * 20, max_new_tokens=4)
    assert "\n" not in str(info.value)
    with warnings.catch_warnings():  # its decoders do not warn a second time
        warnings.simplefilter("error")
        pipe.decoder(4, pipe._warper(0.0, None, None), speculative=False)


def test_decoders_warn_beyond_the_trained_context(tmp_path):
    """The decoders themselves (no Pipeline) warn once a cache passes the trained context."""
    from specjax.decoding import (
        AutoregressiveDecoder,
        LookupDrafter,
        SpeculativeDecoder,
        make_warper,
    )

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, context=128)
    model, _, _ = load_gguf(path)
    greedy = make_warper(0.0)
    with pytest.warns(UserWarning, match="the target's trained context of 128"):
        AutoregressiveDecoder(model, greedy, 129)
    with pytest.warns(UserWarning, match="the target's trained context of 128"):
        SpeculativeDecoder(model, LookupDrafter(model.vocab_size), 2, greedy, cache_len=200)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        AutoregressiveDecoder(model, greedy, 128)


@pytest.mark.parametrize(
    "messages, error, message",
    [
        ([{"role": "user"}], ValueError, r"messages\[0\] has no 'content'"),
        ([{"content": "hi"}], ValueError, r"messages\[0\] has no 'role'"),
        ([{"role": "user", "content": 3}], TypeError, r"messages\[0\]\['content'\] must be a str"),
        ([], ValueError, "messages is empty"),
        ("hi", TypeError, "messages must be a list"),
        ([[{"role": "user", "content": "a"}], [{"role": "x"}]], ValueError, r"messages\[1\]\[0\]"),
        # A conversation beside a bare dict: messages[0] was blamed for the dict at [1].
        (
            [[{"role": "user", "content": "a"}], {"role": "user", "content": "b"}],
            TypeError,
            r"mixes conversations .* messages\[1\] a dict",
        ),
    ],
)
def test_chat_refuses_malformed_messages(tmp_path, messages, error, message):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    pipe = specjax.Pipeline.from_pretrained(target=os.fspath(path), cache_len=64)
    with pytest.raises(error, match=message):
        pipe.chat(messages)


def test_llama_config_of_the_file_is_the_hf_one(tmp_path):
    """The metadata mapping feeds `llama_config` the keys it reads from a config.json."""
    from specjax.convert.gguf import hf_config_from_gguf

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, tied=True, meta={"llama.rope.freq_base": (100000.0, F32)})
    reader = read_gguf(path)
    hf = hf_config_from_gguf(read_metadata(reader), {t.name for t in reader.tensors})
    cfg = llama_config(hf)
    assert (cfg.rope_theta, cfg.tie_embeddings, cfg.norm_eps) == (100000.0, True, np.float32(1e-5))
    assert TEMPLATE in read_metadata(reader)["tokenizer.chat_template"]


def test_gguf_pairs_are_checked_for_one_tokenizer(tmp_path):
    from gguf_writer import toy_vocabulary

    target, draft, other = tmp_path / "t.gguf", tmp_path / "d.gguf", tmp_path / "o.gguf"
    write_tiny_gguf(target, layers=2)
    write_tiny_gguf(draft, layers=1, seed=1)
    tokens = toy_vocabulary()[0]
    tokens[0] = "<|eot|>"  # one id means another string
    write_tiny_gguf(other, layers=1, meta={"tokenizer.ggml.tokens": (tokens, V.ARRAY)})
    pipe = specjax.Pipeline.from_pretrained(target=os.fspath(target), draft=os.fspath(draft))
    assert pipe.draft.config.num_layers == 1 and pipe.cache_len == 128  # the trained context
    with pytest.raises(ValueError, match="tokenizer mismatch: 1 token ids mean different"):
        specjax.Pipeline.from_pretrained(target=os.fspath(target), draft=os.fspath(other))
