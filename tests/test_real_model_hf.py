"""SmolLM2-135M-Instruct: specjax against transformers live, on the same GGUF file (slow).

transformers loads the file itself (`from_pretrained(dir, gguf_file=...)`, its own torch
dequantization), so it is an independent implementation of the model. Checked here:
- float32 logits within 1e-4 of transformers', relative to each row's largest |logit|, for the
  prefill of every prompt and for cached decoding (one token per call along transformers'
  greedy continuation); measured max 4e-6 (prefill);
- the negative control: without the Q/K un-permutation the same comparison is off by ~2;
- greedy 64-token continuations of the 10 chat prompts identical, a first difference excused
  only where transformers' top-2 logits are within 1e-3 (relative);
- speculative greedy identical to autoregressive with a draft of the target's first 4 layers;
- the chat template rendered as transformers renders it;
- token ids identical to the reference tokenizer (transformers' GGUF tokenizer with llama.cpp's
  smollm pre-tokenizer) on the corpus, and where transformers' own GGUF tokenizer differs: it
  drops the digit split, so whitespace before a number comes out otherwise ("abc  123",
  " ½", " ٣٤٥"; "½" or "٣٤٥" alone are the same);
- the README's quick start prints the text it shows.

Needs the `[hf]` extra (torch, transformers, accelerate) and takes minutes (transformers'
generation alone is ~1 min on a 2-core CPU), so it runs only when asked:

    python -m pytest -n 0 -m slow tests/test_real_model_hf.py
"""

import os
import re
import unicodedata

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import real_model_cases as cases

import specjax
from specjax.convert.gguf import hf_config_from_gguf, hf_tensors, read_gguf, read_metadata
from specjax.convert.hf import params_from_hf
from specjax.models.build import truncated
from specjax.pretrained import fetch

pytestmark = pytest.mark.slow
TOLERANCE = 1e-4  # of the row's largest |logit|
WIDTH = 512  # one padded prefill shape for every prompt (one compiled program)


@pytest.fixture(autouse=True, scope="module")
def _only_when_asked(request):
    """Skips unless `-m slow` was given, then needs the [hf] extra (imported only then, so that
    the default run does not pay for importing torch)."""
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("minutes of transformers on CPU: run with -m slow (see the module docstring)")
    pytest.importorskip("torch")
    pytest.importorskip("transformers", minversion="5.0")
    pytest.importorskip("accelerate")


@pytest.fixture(scope="module")
def hf():
    """(transformers model, its GGUF tokenizer, the reference tokenizer)."""
    model, tok = cases.load_hf(fetch(cases.MODEL))
    return model, tok, cases.reference_tokenizer(tok)


@pytest.fixture(scope="module")
def prompt_ids(hf):
    _, tok, reference = hf
    return [cases.reference_prompt_ids(tok, reference, m) for m in cases.PROMPTS]


@pytest.fixture(scope="module")
def hf_runs(hf, prompt_ids):
    """transformers' greedy continuation of each prompt: [(tokens, gaps, logits)]."""
    model, tok, _ = hf
    return [
        cases.hf_greedy(model, ids, cases.MAX_NEW_TOKENS, tok.eos_token_id) for ids in prompt_ids
    ]


def _hf_logits(model, ids) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()  # [T, vocab]


def _relative_error(got, want) -> float:
    return float((np.abs(got - want).max(-1) / np.abs(want).max(-1)).max())


def test_prefill_logits_match_and_the_unpermutation_matters(smollm2, hf, prompt_ids):
    model, params, _ = smollm2
    hf_model = hf[0]
    apply = jax.jit(lambda p, t, n: model.apply(p, model.init_state(1, WIDTH), t, n)[0])
    path = fetch(cases.MODEL)
    reader = read_gguf(path)
    config = hf_config_from_gguf(read_metadata(reader), {t.name for t in reader.tensors})
    _, unpermuted = params_from_hf(config, hf_tensors(reader, config, unpermute=False))
    worst = 0.0
    for i, ids in enumerate(prompt_ids):
        tokens = np.zeros((1, WIDTH), np.int32)
        tokens[0, : len(ids)] = ids
        n = np.array([len(ids)], np.int32)
        want = _hf_logits(hf_model, ids)
        got = np.asarray(apply(params, tokens, n)[0, : len(ids)])
        worst = max(worst, _relative_error(got, want))
        if i == 0:  # negative control, on one prompt
            broken = np.asarray(apply(unpermuted, tokens, n)[0, : len(ids)])
            assert _relative_error(broken, want) > 0.5  # measured 2.09
    print(f"\nprefill: max relative logit error {worst:.2e}")
    assert worst < TOLERANCE / 2  # measured 4.1e-6


def test_cached_decoding_logits_match(smollm2, hf, prompt_ids, hf_runs):
    """Prefill the prompt, then feed transformers' greedy tokens one per call through the
    KV cache; each step's logits against transformers' cached decoding."""
    model, params, _ = smollm2
    prefill = jax.jit(lambda p, s, t, n: model.apply(p, s, t, n))
    step = jax.jit(lambda p, s, t: model.apply(p, s, t, jnp.ones((1,), jnp.int32)))
    worst = 0.0
    for ids, (tokens, _, want) in list(zip(prompt_ids, hf_runs, strict=True))[:3]:
        padded = np.zeros((1, WIDTH), np.int32)
        padded[0, : len(ids)] = ids
        logits, state = prefill(
            params, model.init_state(1, WIDTH + 64), padded, np.array([len(ids)], np.int32)
        )
        got = [np.asarray(logits[0, len(ids) - 1])]
        for token in tokens[:-1]:
            logits, state = step(params, state, np.array([[token]], np.int32))
            got.append(np.asarray(logits[0, 0]))
        worst = max(worst, _relative_error(np.stack(got), want))
    print(f"\ncached decoding: max relative logit error {worst:.2e}")
    assert worst < TOLERANCE / 2


def test_greedy_continuations_match_excusing_only_near_ties(smollm2, hf, prompt_ids, hf_runs):
    model, params, tok = smollm2
    pipe = specjax.Pipeline(model, params, tokenizer=tok)
    out = pipe.chat(cases.PROMPTS, max_new_tokens=cases.MAX_NEW_TOKENS)
    identical = 0
    for b, (tokens, gaps, _) in enumerate(hf_runs):
        assert np.asarray(out.result.tokens)[b, : len(prompt_ids[b])].tolist() == prompt_ids[b]
        got = out.new_tokens[b].tolist()
        common = min(len(got), len(tokens))
        first = next((i for i in range(common) if got[i] != tokens[i]), None)
        if first is None:
            assert got == tokens  # same prefix, and both stop at the same EOS or at 64
            identical += 1
        else:
            assert gaps[first] < cases.GAP_TOLERANCE, (b, first, gaps[first])
    print(f"\n{identical} of {len(hf_runs)} continuations identical to transformers'")
    assert identical >= len(hf_runs) - 2


def test_truncated_layer_draft_is_lossless(smollm2):
    model, params, tok = smollm2
    draft, draft_params = truncated(model, params, 4)
    prompts = cases.PROMPTS[:4]
    spec = specjax.Pipeline(model, params, draft, draft_params, tokenizer=tok)
    out = spec.chat(prompts, max_new_tokens=32, gamma=3)
    ar = specjax.Pipeline(model, params, tokenizer=tok).chat(prompts, max_new_tokens=32)
    for a, b in zip(out.new_tokens, ar.new_tokens, strict=True):
        np.testing.assert_array_equal(a, b)


def test_chat_template_renders_as_transformers(smollm2, hf):
    _, _, tok = smollm2
    for messages in cases.PROMPTS:
        want = hf[1].apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert tok.apply_chat_template(messages, tokenize=False) == want
        want = hf[1].apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
        assert (
            tok.apply_chat_template(messages, add_generation_prompt=False, tokenize=False) == want
        )


def test_tokenizer_equals_the_reference_and_shows_where_transformers_differs(smollm2, hf):
    _, _, tok = smollm2
    hf_tok, reference = hf[1], hf[2]
    for text in cases.CORPUS:
        assert tok.encode(text).tolist() == reference.encode(text, add_special_tokens=False).ids
    # transformers' own GGUF tokenizer keeps plain ByteLevel (no digit split): GPT-2's regex
    # then keeps whitespace with the number after it (" ?\p{N}+", and "\s+(?!\S)" leaves the
    # last space of a run to it), so it differs exactly where whitespace precedes a number.
    examples = {
        "abc  123": (["abc", "ĠĠ", "1", "2", "3"], ["abc", "Ġ", "Ġ", "1", "2", "3"]),
        " ½": (["Ġ", "Â½"], ["ĠÂ", "½"]),
        " ٣٤٥": (["Ġ", "Ù", "£", "Ù", "¤", "Ù", "¥"], ["ĠÙ", "£", "Ù", "¤", "Ù", "¥"]),
    }
    for text, (ours, theirs) in examples.items():
        assert [tok.token_string(i) for i in tok.encode(text)] == ours
        hf_ids = hf_tok.encode(text, add_special_tokens=False)
        assert hf_tok.convert_ids_to_tokens(hf_ids) == theirs
        assert reference.encode(text, add_special_tokens=False).ids == tok.encode(text).tolist()
    for text in ("½", "٣٤٥", "x½", "1½", "2024", "x 12", "3.14"):  # no whitespace before: same
        assert hf_tok.encode(text, add_special_tokens=False) == tok.encode(text).tolist()
    differs = [
        t
        for t in cases.CORPUS
        if hf_tok.encode(t, add_special_tokens=False) != tok.encode(t).tolist()
    ]
    assert "abc  123" in differs and len(differs) >= 3
    for text in differs:
        pairs = zip(text[:-1], text[1:], strict=True)
        assert any(a.isspace() and unicodedata.category(b)[0] == "N" for a, b in pairs), text


def test_readme_quick_start_prints_what_it_shows():
    """The README's real-model block (not run by test_readme: it fetches and compiles the
    30-layer model) prints the reply it quotes."""
    import contextlib
    import io

    readme = open(os.path.join(os.path.dirname(__file__), "..", "README.md"), encoding="utf-8")
    text = readme.read()
    block = re.search(r"<!-- no-run: fetches.*?-->\n```python\n(.*?)```", text, re.S).group(1)
    shown = re.search(r"\n\s*# ([^\n]*)\n", block[block.index("print(") :]).group(1)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(compile(block, "README.md", "exec"), {"__name__": "__readme__"})
    assert shown.strip() in buffer.getvalue()
