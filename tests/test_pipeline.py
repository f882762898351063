"""`specjax.Pipeline`: text in, text out, equal to the decoders' own output decoded.

Tiny random byte-vocabulary models (weights N(0, 0.3²): peaked, context-dependent outputs, so a
wrong key, prompt or decoder gives different text). One decoder per setting is compiled and
shared by the tests through the module's one Pipeline.
"""

import jax
import numpy as np
import pytest
from decoding_setup import random_params

import specjax
from specjax.checkpoint import export_model, model_config_to_dict
from specjax.data import EOS_ID, VOCAB_SIZE, ByteTokenizer
from specjax.data.text_stream import TextStream
from specjax.decoding import AutoregressiveDecoder, SpeculativeDecoder, make_warper
from specjax.models import TransformerConfig, TransformerLM
from specjax.models.build import truncated

CACHE_LEN = 64
TARGET = TransformerLM(
    TransformerConfig.gpt2(
        VOCAB_SIZE, num_layers=2, embed_dim=32, num_heads=2, mlp_dim=64, max_len=CACHE_LEN
    )
)
TARGET_PARAMS = random_params(TARGET, seed=0)
DRAFT, DRAFT_PARAMS = truncated(TARGET, TARGET_PARAMS, 1)
PROMPTS = ["def fib(n):", "x = "]
TOK = ByteTokenizer()


@pytest.fixture(scope="module")
def pipe():
    return specjax.Pipeline(TARGET, TARGET_PARAMS, DRAFT, DRAFT_PARAMS, cache_len=CACHE_LEN)


def _decoder_texts(decoder, params, prompts, seed, max_new):
    ids = [TOK.encode(p, add_bos=True) for p in prompts]
    result = decoder.generate(*params, ids, jax.random.PRNGKey(seed), max_new, EOS_ID)
    return [TOK.decode(row, stop_at_eos=True) for row in result.new_tokens()]


def test_greedy_batch_equals_the_decoders_own_output(pipe):
    out = pipe.generate(PROMPTS, max_new_tokens=20, temperature=0.0, gamma=3)
    spec = SpeculativeDecoder(TARGET, DRAFT, 3, make_warper(0.0), cache_len=CACHE_LEN)
    ar = AutoregressiveDecoder(TARGET, make_warper(0.0), cache_len=CACHE_LEN)
    expected = _decoder_texts(spec, (TARGET_PARAMS, DRAFT_PARAMS), PROMPTS, 0, 20)
    assert out.text == expected
    # Lossless: greedy speculative text is the target's own greedy text.
    assert out.text == _decoder_texts(ar, (TARGET_PARAMS,), PROMPTS, 0, 20)
    assert isinstance(out.text, list) and len(out.text) == 2 and all(out.text)
    assert out.stats["new_tokens"] == sum(len(r) for r in out.new_tokens)
    assert 0.0 <= out.stats["alpha"] <= 1.0
    assert out.stats["tokens_per_iteration"] >= 1.0
    assert out.stats["ms_per_token"] > 0


def test_one_string_gives_one_string_and_the_seed_matters(pipe):
    kwargs = dict(max_new_tokens=20, temperature=1.0, gamma=3)
    out = pipe.generate(PROMPTS[0], seed=1, **kwargs)
    spec = SpeculativeDecoder(TARGET, DRAFT, 3, make_warper(1.0), cache_len=CACHE_LEN)
    assert out.text == _decoder_texts(spec, (TARGET_PARAMS, DRAFT_PARAMS), PROMPTS[:1], 1, 20)[0]
    assert pipe.generate(PROMPTS[0], seed=1, **kwargs).text == out.text
    others = {pipe.generate(PROMPTS[0], seed=s, **kwargs).text for s in (2, 3)}
    assert others != {out.text}  # 20 sampled bytes from peaked random models: seeds differ


def test_stream_concatenates_to_generate(pipe):
    # Sampled, so the stream must also draw with generate's keys to give the same text.
    kwargs = dict(max_new_tokens=20, temperature=1.0, gamma=3, seed=1)
    whole = pipe.generate(PROMPTS, **kwargs)
    steps = list(pipe.stream(PROMPTS, **kwargs))
    assert all(isinstance(s, list) and len(s) == 2 for s in steps)
    assert ["".join(s[b] for s in steps) for b in range(2)] == whole.text
    gen = pipe.stream(PROMPTS[0], **kwargs)
    pieces = []
    with pytest.raises(StopIteration) as stop:
        while True:
            pieces.append(next(gen))
    assert pieces and all(isinstance(p, str) and p for p in pieces)
    single = pipe.generate(PROMPTS[0], **kwargs)
    assert "".join(pieces) == stop.value.value.text == single.text
    assert stop.value.value.stats["target_calls"] == single.stats["target_calls"]


def test_without_a_draft_it_decodes_autoregressively():
    pipe = specjax.Pipeline(TARGET, TARGET_PARAMS, cache_len=CACHE_LEN)
    out = pipe.generate(PROMPTS, max_new_tokens=20)
    ar = AutoregressiveDecoder(TARGET, make_warper(0.0), cache_len=CACHE_LEN)
    assert out.text == _decoder_texts(ar, (TARGET_PARAMS,), PROMPTS, 0, 20)
    assert "alpha" not in out.stats
    steps = list(pipe.stream(PROMPTS, max_new_tokens=20))
    assert ["".join(s[b] for s in steps) for b in range(2)] == out.text


def test_baseline_reports_the_speedup_and_identical_greedy_output(pipe):
    out = pipe.generate(PROMPTS, max_new_tokens=20, gamma=3, baseline=True, repeats=1)
    s = out.stats
    assert s["ar_ms_per_token"] > 0 and s["ms_per_token"] > 0
    assert s["speedup"] == pytest.approx(s["ar_ms_per_token"] / s["ms_per_token"])
    assert s["greedy_identical"] is True and s["includes_compile"] is False


def test_from_pretrained_loads_specjax_exports(tmp_path, pipe):
    for name, model, params in (("t", TARGET, TARGET_PARAMS), ("d", DRAFT, DRAFT_PARAMS)):
        meta = {"model": model_config_to_dict(model.config), "step": 1}
        export_model(str(tmp_path / name), params, meta)
    loaded = specjax.Pipeline.from_pretrained(target=tmp_path / "t", draft=str(tmp_path / "d"))
    assert isinstance(loaded.tokenizer, ByteTokenizer) and loaded.cache_len == CACHE_LEN
    kwargs = dict(max_new_tokens=20, gamma=3)
    assert loaded.generate(PROMPTS, **kwargs).text == pipe.generate(PROMPTS, **kwargs).text


def test_bad_input_is_named(pipe, tmp_path):
    with pytest.raises(ValueError, match="prompts is an empty list"):
        pipe.generate([])
    with pytest.raises(ValueError, match=r"prompts\[1\] is empty"):
        pipe.generate(["a", ""])
    with pytest.raises(TypeError, match=r"prompts\[0\] must be a str"):
        pipe.generate([[1, 2]])
    with pytest.raises(ValueError, match=r"temperature must be >= 0 \(got -0.5\)"):
        pipe.generate("a", temperature=-0.5)
    with pytest.raises(ValueError, match="temperature must be a finite number >= 0"):
        pipe.generate("a", temperature=float("nan"))
    assert pipe.generate("a", max_new_tokens=2, temperature=np.float32(0.5)).text is not None
    with pytest.raises(ValueError, match="gamma must be an integer >= 1"):
        pipe.generate("a", gamma=0)
    # A seed past 32 bits would alias a smaller one (PRNGKey keeps the low 32 bits).
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 4294967295\]"):
        pipe.generate("a", seed=2**32 + 1)
    with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 1"):
        pipe.generate("a", max_new_tokens=0)
    with pytest.raises(ValueError, match="exceeds cache_len=64"):
        pipe.generate("a", max_new_tokens=60)
    other = TransformerLM(TransformerConfig.gpt2(64, num_layers=1, embed_dim=16, num_heads=1))
    with pytest.raises(ValueError, match="vocab mismatch: target has vocab_size=259"):
        specjax.Pipeline(TARGET, TARGET_PARAMS, other, {})
    with pytest.raises(ValueError, match="tokenizer=None means the byte tokenizer"):
        specjax.Pipeline(other, {})
    # Found at construction now, not at the first generate (or after it, for the tokenizer).
    with pytest.raises(TypeError, match=r"tokenizer must have encode and decode.*lacks"):
        specjax.Pipeline(TARGET, TARGET_PARAMS, tokenizer=object())
    with pytest.raises(ValueError, match=r"cache_len=1000 exceeds the target's learned position"):
        specjax.Pipeline(TARGET, TARGET_PARAMS, cache_len=1000)
    with pytest.raises(ValueError, match="baseline=True .* give a draft"):
        specjax.Pipeline(TARGET, TARGET_PARAMS).generate("a", baseline=True)
    with pytest.raises(FileNotFoundError, match="draft=.*does not exist"):
        specjax.Pipeline.from_pretrained(target=tmp_path, draft=tmp_path / "missing")
    # Params that do not fit their model are named when the pipeline is built, before any
    # compile: the draft's missing (or swapped with the target's), the target's of another model.
    with pytest.raises(ValueError, match="^draft_params do not fit"):
        specjax.Pipeline(TARGET, TARGET_PARAMS, DRAFT)
    with pytest.raises(ValueError, match="^draft_params do not fit"):
        specjax.Pipeline(TARGET, TARGET_PARAMS, DRAFT, TARGET_PARAMS)
    with pytest.raises(ValueError, match="^target_params do not fit"):
        specjax.Pipeline(TARGET, DRAFT_PARAMS, DRAFT, DRAFT_PARAMS)


def test_text_stream_holds_back_incomplete_characters():
    text = "é€ a😀"
    ids = TOK.encode(text)
    stream = TextStream(TOK)
    pieces = [stream.push(ids[i : i + 1]) for i in range(len(ids))]
    assert pieces[0] == "" and pieces[1] == "é"  # 2-byte character: nothing after its first byte
    assert "\ufffd" not in "".join(pieces)
    assert "".join(pieces) + stream.flush() == text
    # A truncated character at the end is flushed as the decoder renders it, and EOS ends it.
    stream = TextStream(TOK)
    assert stream.push(np.array([104, 0xE2, 0x82])) == "h"
    assert stream.push(np.array([EOS_ID, 105])) == ""
    assert "h" + stream.flush() == TOK.decode([104, 0xE2, 0x82]) == "h\ufffd"


def test_ids_past_the_tokenizer_are_left_out_of_the_text_with_a_warning():
    """A model whose embedding has more rows than its tokenizer has tokens may sample them: they
    have no text. Before, `.text` failed after the whole generation (the byte tokenizer) or
    dropped them without a word (a BPE tokenizer)."""
    wide = TransformerLM(
        TransformerConfig.gpt2(VOCAB_SIZE + 41, num_layers=1, embed_dim=16, num_heads=2, max_len=64)
    )
    pipe = specjax.Pipeline(wide, random_params(wide, seed=3), tokenizer=ByteTokenizer())
    with pytest.warns(UserWarning, match="past its tokenizer's vocabulary"):
        out = pipe.generate("ab", max_new_tokens=24, temperature=1.0, seed=1)
    row = out.new_tokens[0]
    assert (row >= VOCAB_SIZE).any()  # the case happened
    assert out.text == ByteTokenizer().decode(row[row < VOCAB_SIZE], stop_at_eos=True)
    with pytest.warns(UserWarning, match="past its tokenizer's vocabulary"):
        pieces = list(pipe.stream("ab", max_new_tokens=24, temperature=1.0, seed=1))
    assert "".join(pieces) == out.text
