"""Parity of converted Hugging Face checkpoints with HF itself (needs the `[hf]` extra).

Tiny random HF models are built and saved locally (safetensors and pytorch_model.bin), loaded
with `specjax.convert`, and compared in float32: logits of prefill and of cached decoding
(ragged batch, one-token steps and a multi-token verification chunk), greedy generation, and
greedy speculative decoding with a converted pair. Every parameter is re-drawn at random (biases
and norm scales too), so a mis-mapped bias or norm cannot hide behind HF's zero/one init.
"""

import json
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
# Config keyword names (`rope_parameters`, `dtype`) are those of transformers 5.
transformers = pytest.importorskip("transformers", minversion="5.0")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from specjax.convert import load_hf_model, load_hf_pair, load_hf_tokenizer, read_config  # noqa: E402
from specjax.decoding import (  # noqa: E402
    AutoregressiveDecoder,
    SpeculativeDecoder,
    make_warper,
)

VOCAB = 101
EOS = 7
# float32 logits of O(1-10): the bound; measured differences are ~1e-6.
ATOL = 1e-4


def _randomize(model, seed):
    """Re-draws every parameter: weights N(0, 0.2^2), norm scales 1 + N(0, 0.1^2)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            is_norm = "norm" in name or ".ln_" in name
            p.copy_(1 + 0.1 * noise if is_norm and name.endswith("weight") else 0.2 * noise)
    return model.eval()


def _gpt2(layers=2, embed=32, tie=True, vocab=VOCAB):
    return transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=vocab,
            n_positions=64,
            n_embd=embed,
            n_layer=layers,
            n_head=4,
            layer_norm_epsilon=1e-5,
            tie_word_embeddings=tie,
            bos_token_id=0,
            eos_token_id=EOS,
        )
    )


def _llama(cls="Llama", layers=2, **kwargs):
    base = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        bos_token_id=0,
        eos_token_id=EOS,
    )
    base.update(kwargs)
    config = getattr(transformers, f"{cls}Config")(**base)
    return getattr(transformers, f"{cls}ForCausalLM")(config)


def _save_tokenizer(path, tokens):
    """Writes a word-level tokenizer (ids in list order) with transformers' wrapper files."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token=tokens[1]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=tokens[0], eos_token=tokens[EOS], unk_token=tokens[1]
    )
    fast.save_pretrained(path)


def _word_list(prefix):
    return ["<s>", "<unk>"] + [f"{prefix}{i}" for i in range(2, VOCAB)]


# Llama 3 scaling with a short original context, so that at head_dim 16, theta 1e4 some
# frequencies are divided by the factor, some kept and one (wavelength ~20) interpolated.
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 10000.0,
    "factor": 4.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}

# name -> (builder, save as safetensors?)
MODELS = {
    "gpt2_tied": (lambda: _gpt2(), True),
    "gpt2_untied_bin": (lambda: _gpt2(tie=False), False),
    "llama3_gqa_untied": (lambda: _llama(rope_parameters=LLAMA3_ROPE), True),
    "llama_mha_tied_bias_bin": (
        lambda: _llama(num_key_value_heads=4, tie_word_embeddings=True, attention_bias=True),
        False,
    ),
    "qwen2_bias_tied": (lambda: _llama("Qwen2", tie_word_embeddings=True), True),
    "mistral_mqa": (lambda: _llama("Mistral", num_key_value_heads=1, sliding_window=None), True),
}


def _save(model, path, safetensors=True):
    """save_pretrained, or the pytorch_model.bin layout of older transformers versions.

    transformers 5 writes only safetensors; hub repos of older models still ship pickles, which
    hold the full state dict (a tied lm_head.weight included).
    """
    if safetensors:
        model.save_pretrained(path)
    else:
        model.config.save_pretrained(path)
        torch.save(model.state_dict(), os.path.join(path, "pytorch_model.bin"))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """name -> (directory, HF model in float32 eval mode)."""
    out = {}
    for i, (name, (build, safetensors)) in enumerate(MODELS.items()):
        torch.manual_seed(i)
        model = _randomize(build(), seed=100 + i)
        path = tmp_path_factory.mktemp(name)
        _save(model, path, safetensors)
        out[name] = (str(path), model)
    return out


def _hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([list(ids)])).logits[0].numpy()  # [T, vocab]


def _prompts(seed, lengths):
    rng = np.random.RandomState(seed)
    return [rng.randint(0, VOCAB, n).astype(np.int32) for n in lengths]


def test_files_saved_as_intended(checkpoints):
    path, _ = checkpoints["gpt2_untied_bin"]
    assert "pytorch_model.bin" in os.listdir(path)
    path, _ = checkpoints["gpt2_tied"]
    assert "model.safetensors" in os.listdir(path)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_prefill_and_cached_decode_logits_match_hf(checkpoints, name):
    path, hf = checkpoints[name]
    model, params, _ = load_hf_model(path)
    # Ragged batch: row 0 (13 tokens) is prefilled with 7 tokens, row 1 (7 tokens) starts from
    # an empty cache with one; then three one-token steps and a 3-token chunk (the
    # verification shape), each row at its own cache position.
    rows = _prompts(1, [13, 7])
    schedule = ([7, 1], [1, 1], [1, 1], [1, 1], [3, 3])
    refs = [_hf_logits(hf, r) for r in rows]  # [T_b, vocab] each
    state = model.init_state(2, 32)
    step = jax.jit(model.apply)

    def feed(chunks):
        nonlocal state
        # Two compiled widths only: 1 (the decode step's special case) and 7 (prefill and
        # the 3-token chunk, right-padded; padding past num_new is ignored by the model).
        width = 1 if max(len(c) for c in chunks) == 1 else 7
        tokens = np.zeros((2, width), np.int32)
        for b, c in enumerate(chunks):
            tokens[b, : len(c)] = c
        num_new = jnp.asarray([len(c) for c in chunks], jnp.int32)
        logits, state = step(params, state, jnp.asarray(tokens), num_new)
        return np.asarray(logits)

    pos = [0, 0]
    worst = 0.0
    for sizes in schedule:
        chunks = [rows[b][pos[b] : pos[b] + sizes[b]] for b in range(2)]
        got = feed(chunks)
        for b in range(2):
            n = len(chunks[b])
            diff = np.abs(got[b, :n] - refs[b][pos[b] : pos[b] + n])
            worst = max(worst, float(diff.max(initial=0.0)))
            pos[b] += n
    assert pos == [13, 7]
    scale = max(float(np.abs(r).max()) for r in refs)
    assert scale > 1.0, "logits too small for the tolerance to mean anything"
    assert worst < ATOL, f"{name}: max |logit diff| {worst:.2e} (logit scale {scale:.1f})"


def test_rope_scaling_is_exercised(checkpoints):
    # Negative control: dropping the Llama 3 scaling from the loaded config must break parity,
    # otherwise the parity test above could not detect a wrong scaling.
    import dataclasses

    from specjax.models.transformer import TransformerLM

    path, hf = checkpoints["llama3_gqa_untied"]
    model, params, _ = load_hf_model(path)
    unscaled = TransformerLM(dataclasses.replace(model.config, rope_scaling=None))
    ids = _prompts(2, [24])[0]
    ref = _hf_logits(hf, ids)
    for m, close in ((model, True), (unscaled, False)):
        apply = jax.jit(m.apply)  # eager flax compiles every op separately: slower here
        logits, _ = apply(params, m.init_state(1, 32), jnp.asarray(ids[None]), jnp.array([24]))
        diff = float(np.abs(np.asarray(logits[0]) - ref).max())
        assert (diff < ATOL) == close, diff


def _hf_greedy(hf, prompt, max_new):
    ids = torch.tensor([list(prompt)])
    with torch.no_grad():
        out = hf.generate(
            ids,
            # Explicit: HF would otherwise mask every prompt token equal to pad_token_id.
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=EOS,
        )
    return out[0, len(prompt) :].numpy()


@pytest.mark.parametrize("name", ["gpt2_tied", "llama3_gqa_untied", "qwen2_bias_tied"])
def test_greedy_generate_matches_hf(checkpoints, name):
    path, hf = checkpoints[name]
    model, params, _ = load_hf_model(path)
    prompts = _prompts(3, [9, 4, 14])
    decoder = AutoregressiveDecoder(model, make_warper(temperature=0.0), cache_len=64)
    result = decoder.generate(params, prompts, jax.random.PRNGKey(0), 20, eos_id=EOS)
    for prompt, got in zip(prompts, result.new_tokens(), strict=True):
        np.testing.assert_array_equal(got, _hf_greedy(hf, prompt, 20))


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """Draft/target checkpoint pairs with one vocabulary: name -> (target dir, draft dir, HF).

    The GPT-2 pair ships one 90-token tokenizer but tables of 101 (target) and 96 (draft) rows,
    like Qwen2.5 sizes: `load_hf_pair` must pad the draft's table to the target's.
    """
    out = {}
    for name, target, draft in (
        ("gpt2", _gpt2(layers=2, embed=48), _gpt2(layers=1, embed=16, vocab=96)),
        (
            "llama",
            _llama(layers=2, rope_parameters=LLAMA3_ROPE),
            _llama(layers=1, hidden_size=32, intermediate_size=48, head_dim=8),
        ),
    ):
        dirs = []
        for role, model in (("target", target), ("draft", draft)):
            path = tmp_path_factory.mktemp(f"{name}_{role}")
            _randomize(model, seed=len(dirs) + 7).save_pretrained(path)
            if name == "gpt2":
                _save_tokenizer(path, _word_list("w")[:90])
            dirs.append(str(path))
        out[name] = (dirs[0], dirs[1], target)
    return out


@pytest.mark.slow  # ~7 s of compilation per pair on 2 cores
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_speculative_greedy_matches_hf_greedy(pairs, name):
    target_dir, draft_dir, hf_target = pairs[name]
    pair = load_hf_pair(target_dir, draft_dir)
    assert pair.draft.vocab_size == pair.target.vocab_size == VOCAB
    prompts = _prompts(4, [5, 11])
    decoder = SpeculativeDecoder(
        pair.target, pair.draft, gamma=3, warper=make_warper(temperature=0.0), cache_len=64
    )
    result = decoder.generate(
        pair.target_params, pair.draft_params, prompts, jax.random.PRNGKey(1), 24, eos_id=EOS
    )
    for prompt, got in zip(prompts, result.new_tokens(), strict=True):
        np.testing.assert_array_equal(got, _hf_greedy(hf_target, prompt, 24))
    # A random draft is a poor guesser, but it must have been asked: γ drafts per iteration.
    summary = result.summary()
    assert summary["draft_calls"] == 3 * summary["target_calls"] > 0


@pytest.mark.parametrize("backend", ["transformers", "tokenizers"])
def test_tokenizer_loads_and_round_trips(tmp_path, monkeypatch, backend):
    path = tmp_path / "ckpt"
    _randomize(_gpt2(), 0).save_pretrained(path)
    _save_tokenizer(path, _word_list("w"))
    if backend == "tokenizers":
        # Without transformers the bare tokenizer.json is used, special ids from config.json.
        monkeypatch.setitem(sys.modules, "transformers", None)
    tok = load_hf_tokenizer(path, read_config(path))
    assert type(tok.backend).__module__.split(".")[0] == backend
    ids = tok.encode("w5 w17 w2", add_bos=True, add_eos=True)
    np.testing.assert_array_equal(ids, [0, 5, 17, 2, EOS])
    assert (tok.bos_id, tok.eos_id, tok.vocab_size) == (0, EOS, VOCAB)
    assert tok.decode([5, 17, EOS, 9], stop_at_eos=True) == "w5 w17"
    assert tok.decode_batch([[5, 6, 7], [8, 9, 10]], lengths=[1, 2]) == ["w5", "w8 w9"]


def test_load_hf_model_returns_the_tokenizer(tmp_path):
    _randomize(_gpt2(), 0).save_pretrained(tmp_path)
    assert load_hf_model(tmp_path)[2] is None  # no tokenizer files: None, not an error
    _save_tokenizer(tmp_path, _word_list("w"))
    model, _, tok = load_hf_model(tmp_path)
    assert model.vocab_size == VOCAB and tok.encode("w9").tolist() == [9]


def test_vocab_size_mismatch_is_explained(tmp_path):
    _randomize(_gpt2(), 0).save_pretrained(tmp_path / "target")
    small = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=VOCAB - 1, n_positions=64, n_embd=16, n_layer=1, n_head=2
        )
    )
    small.save_pretrained(tmp_path / "draft")
    with pytest.raises(ValueError, match=r"vocabulary mismatch.*101 rows.*100"):
        load_hf_pair(tmp_path / "target", tmp_path / "draft")


def test_tokenizer_mismatch_is_explained(tmp_path):
    # Same vocab_size, different strings behind the ids: sizes alone would pass.
    for role, prefix, seed in (("target", "w", 0), ("draft", "v", 1)):
        _randomize(_gpt2(), seed).save_pretrained(tmp_path / role)
        _save_tokenizer(tmp_path / role, _word_list(prefix))
    with pytest.raises(
        ValueError, match=r"tokenizer mismatch: 99 token ids.*id 2: target .w2. vs draft .v2."
    ):
        load_hf_pair(tmp_path / "target", tmp_path / "draft")
    # The same tokenizer on both sides passes.
    _save_tokenizer(tmp_path / "draft", _word_list("w"))
    pair = load_hf_pair(tmp_path / "target", tmp_path / "draft")
    assert pair.tokenizer.encode("w3") == [3]


def test_bfloat16_safetensors_load_exactly(tmp_path):
    hf = _randomize(_llama(), 3).to(torch.bfloat16)
    hf.save_pretrained(tmp_path)
    with open(tmp_path / "config.json") as f:
        assert json.load(f)["dtype"] == "bfloat16"
    _, params, _ = load_hf_model(tmp_path)  # float32 params holding the bf16 values exactly
    want = hf.model.embed_tokens.weight.detach().float().numpy()
    np.testing.assert_array_equal(np.asarray(params["embed"]["embedding"]), want)
    assert params["embed"]["embedding"].dtype == jnp.float32
