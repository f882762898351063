"""Bit-identity across refactors: every decoder still generates what it did at commit 7a9733c.

`tests/data/decoding_fixture.json` holds, per case, the tokens and counters that
`scripts/record_decoding_fixture.py` recorded with the code *before* the decoding core was split
into drafters, acceptance rules and one loop driver (issue #13). Same key, same prompts, same
public API: any change in how keys are derived, in the order of random draws, or in the
acceptance arithmetic shows up here as a different token. The cases cover autoregressive and
speculative decoding, greedy / sampled / top-k+top-p warpers, transformer, bigram, uniform and
prompt-lookup drafts, GPT-2 and Llama (GQA) targets, on ragged prompts.

The recording used `jax.random.categorical` (one Gumbel per vocabulary entry). Since issue #20
`sample_from_probs` draws by blocks (same law, other random numbers), so this file runs the
decoders with the one-level sampler, `block >= vocab`, which is `jax.random.categorical`'s
arithmetic: the refactor check stays bit-exact, and the two-level sampler's law is tested by the
chi-square suites (`tests/test_categorical.py` and every decoder's).
"""

import json
import os
import sys

import jax
import pytest

from specjax.decoding import categorical

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))

import record_decoding_fixture as fixture  # noqa: E402

PATH = os.path.join(os.path.dirname(__file__), "data", "decoding_fixture.json")


@pytest.fixture(autouse=True, scope="module")
def one_level_sampler():
    """Every draw is one Gumbel-max over the whole row, as when the fixture was recorded.

    Module-scoped: the cases share the patch, so the models traced for one case serve the next.
    Clearing jax's caches around every test re-traced them: the file alone at -n 0, alternating,
    took 25.9 / 28.7 s that way and 23.1 / 22.1 s this way."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(categorical, "default_block", lambda vocab: vocab)
        jax.clear_caches()  # no program traced with the two-level sampler is reused here
        yield
        jax.clear_caches()  # and none traced here outlives the patch


@pytest.fixture(scope="module")
def recorded() -> dict:
    with open(PATH, encoding="utf-8") as f:
        return json.load(f)


def test_fixture_covers_every_case(recorded):
    assert sorted(recorded) == sorted(name for name, *_ in fixture.CASES)


@pytest.mark.parametrize("case", fixture.CASES, ids=[c[0] for c in fixture.CASES])
def test_decoder_output_is_bit_identical_to_the_recorded_one(recorded, case):
    name, *rest = case
    assert fixture.run_case(name, *rest) == recorded[name]
