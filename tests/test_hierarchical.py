"""Hierarchical speculation (drafters/hierarchical.py): greedy exactness, depth, EOS, errors.

Random-weight models of tests/decoding_setup.py on its ragged prompts. The sampled law (with
the biased q = residual negative control) is tests/test_hierarchical_sampling.py.
"""

import jax
import pytest
from decoding_setup import (
    CACHE_LEN,
    DRAFT_NAN,
    GREEDY,
    MAX_NEW,
    PROMPTS,
    SMALL_DRAFT,
    TARGET,
    V,
    ar_decoder,
    as_lists,
    drafts,
    nan_params,
    target_params,
)

from specjax.decoding import (
    LookupDrafter,
    LossyRuleWarning,
    SpeculativeDecoder,
    SpeculativeDrafter,
    loop,
)
from specjax.decoding.rules import accept_rule
from specjax.models import NgramLM, TransformerConfig, TransformerLM

OUTER_GAMMA = 3


def _level(target, draft, gamma):
    """One speculative level: `draft` a model, or the decoder below (as a SpeculativeDrafter)."""
    if isinstance(draft, SpeculativeDecoder):
        draft = SpeculativeDrafter(draft)
    return SpeculativeDecoder(target, draft, gamma, GREEDY, CACHE_LEN)


def three_levels():
    """TARGET <- noisy copy of TARGET <- small transformer; params nest as (middle, small)."""
    middle, middle_params = drafts()["noisy_self"]
    small, small_params = drafts()["transformer"]
    decoder = _level(TARGET, _level(middle, small, 2), OUTER_GAMMA)
    return decoder, (middle_params, small_params)


def four_levels():
    """TARGET <- noisy TARGET <- small transformer <- bigram: depth 4 with an n-gram bottom."""
    middle, middle_params = drafts()["noisy_self"]
    small, small_params = drafts()["transformer"]
    bigram, bigram_params = drafts()["bigram"]
    decoder = _level(TARGET, _level(middle, _level(small, bigram, 2), 2), 4)
    return decoder, (middle_params, (small_params, bigram_params))


def self_middle():
    """TARGET <- TARGET itself <- bigram: the middle level's drafts are the target's own."""
    bigram, bigram_params = drafts()["bigram"]
    decoder = _level(TARGET, _level(TARGET, bigram, 1), OUTER_GAMMA)
    return decoder, (target_params(), bigram_params)


BUILDS = {"three_levels": three_levels, "four_levels": four_levels, "self_middle": self_middle}


def _generate(decoder, draft_params, prompts=PROMPTS, max_new_tokens=MAX_NEW, eos_id=None):
    return decoder.generate(
        target_params(),
        draft_params,
        prompts=prompts,
        key=jax.random.PRNGKey(0),
        max_new_tokens=max_new_tokens,
        eos_id=eos_id,
    )


@pytest.fixture(scope="module")
def ar_tokens():
    result = ar_decoder().generate(target_params(), PROMPTS, jax.random.PRNGKey(0), MAX_NEW)
    return as_lists(result)


@pytest.fixture(scope="module")
def results():
    return {name: _generate(*build()) for name, build in BUILDS.items()}


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_greedy_hierarchy_equals_greedy_autoregressive(results, ar_tokens, name):
    assert as_lists(results[name]) == ar_tokens
    summary = results[name].summary()
    # A draft that were not the middle model's greedy continuation would be accepted less: with
    # the noisy copy the outer level still accepts about half (0.49 measured; 0.52 for the
    # 2-level noisy_self pair), and a stale or misaligned draft accepts ~0.1.
    assert summary["alpha_empirical"] > 0.3, summary


def test_self_middle_drafts_are_always_accepted(results):
    """With the target as the middle model, every outer draft is the target's own choice."""
    summary = results["self_middle"].summary()
    assert summary["alpha_empirical"] == 1.0, summary
    # The outer draft calls are the middle level's iterations (>= 1 per outer iteration).
    assert summary["draft_calls"] >= summary["target_calls"]


def test_eos_and_no_recompilation(results, ar_tokens):
    """A new prompt set, budget and EOS id reuse the compiled program; rows stop at EOS."""
    del results  # compiled there
    decoder, draft_params = three_levels()
    programs = loop.generate_jit._cache_size()
    eos = ar_tokens[0][5]  # row 0 stops at its 6th token; other rows wherever it occurs
    result = _generate(decoder, draft_params, max_new_tokens=MAX_NEW - 4, eos_id=eos)
    assert loop.generate_jit._cache_size() == programs
    ar = ar_decoder().generate(
        target_params(), PROMPTS, jax.random.PRNGKey(0), MAX_NEW - 4, eos_id=eos
    )
    assert as_lists(result) == as_lists(ar)
    assert len(as_lists(result)[0]) == 6


def test_nan_in_any_lower_level_is_named(results):
    """Greedy levels pass point masses up, whose q cannot show NaN; the inner loop's own NaN
    flags reach the outer decoder (Proposal.draft_nan), for the middle and the bottom model."""
    del results  # compiled there
    decoder, (middle_params, small_params) = three_levels()
    for params in (
        (nan_params(middle_params), small_params),
        (middle_params, nan_params(small_params)),
    ):
        with pytest.raises(ValueError, match=DRAFT_NAN):
            _generate(decoder, params)


def _lossy_level():
    """A middle level whose output is not the middle model's law (lenient acceptance)."""
    with pytest.warns(LossyRuleWarning):
        return SpeculativeDecoder(
            SMALL_DRAFT, NgramLM(V, 2), 2, GREEDY, CACHE_LEN, accept=accept_rule("lenient:0.5")
        )


OTHER_VOCAB = TransformerLM(
    TransformerConfig.llama(V + 1, num_layers=1, embed_dim=16, num_heads=2, mlp_dim=32, max_len=64)
)


@pytest.mark.parametrize(
    "build, error, match",
    [
        (lambda: _level(TARGET, _level(SMALL_DRAFT, OTHER_VOCAB, 2), 3), ValueError, "vocab"),
        (lambda: _level(TARGET, _level(OTHER_VOCAB, NgramLM(V + 1, 2), 2), 3), ValueError, "vocab"),
        (lambda: _level(TARGET, _level(SMALL_DRAFT, NgramLM(V, 2), 0), 3), ValueError, "gamma"),
        (lambda: _level(TARGET, _level(SMALL_DRAFT, NgramLM(V, 2), 2), 0), ValueError, "gamma"),
        (lambda: SpeculativeDrafter(SMALL_DRAFT), TypeError, "inner"),
        (lambda: SpeculativeDrafter(_lossy_level()), ValueError, "inner uses a lossy"),
    ],
    ids=[
        "small-vs-middle",
        "middle-vs-target",
        "inner-gamma",
        "outer-gamma",
        "not-a-decoder",
        "lossy-inner",
    ],
)
def test_bad_arguments_raise_naming_the_argument(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_a_parameter_free_bottom_level_takes_empty_params(ar_tokens):
    """TARGET <- noisy TARGET <- prompt lookup: the lookup's slot takes {} (or None), as a
    parameter-free draft does on its own; wrong counts and slots are named."""
    middle, middle_params = drafts()["noisy_self"]
    decoder = _level(TARGET, _level(middle, LookupDrafter(V), 2), OUTER_GAMMA)
    assert as_lists(_generate(decoder, (middle_params, {}))) == ar_tokens
    inner = decoder.models[1]
    assert inner.params_mismatch((middle_params, None)) is None
    assert "not 2" in inner.params_mismatch((middle_params,))
    assert "not a tuple of 2" in inner.params_mismatch(middle_params)
    small_params = drafts()["transformer"][1]
    assert inner.params_mismatch((small_params, {})).startswith("at [0] (for TransformerLM)")
    with pytest.raises(ValueError, match=r"draft_params .*at \[0\]"):
        _generate(decoder, (small_params, {}))


def test_swapped_level_params_are_named(results):
    """(small, middle) params in the (middle, small) slot: the error names draft_params."""
    del results
    decoder, (middle_params, small_params) = three_levels()
    with pytest.raises(ValueError, match="draft_params"):
        _generate(decoder, (small_params, middle_params))
