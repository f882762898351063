"""Verification only as wide as the longest drafted row (`decoding/decoders/verify_width.py`).

The width choice is checked with a fake target whose logits record how many tokens it was
given; the decoders are checked for equal output with and without it (greedy and sampled, same
key: the positions the rule reads get the same logits either way). Runtime: ~30 s.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from decoding_setup import CACHE_LEN, GREEDY, MAX_NEW, PROMPTS, TARGET, drafts, target_params

from specjax.decoding import HeuristicGamma, LookupDrafter, SpeculativeDecoder, make_warper
from specjax.decoding.decoders.verify_width import check_widths, score_to_longest

VOCAB = 7


class WidthTarget:
    """A target whose logits at every position are [T, T, ...]: T = tokens in its call."""

    def apply(self, params, state, tokens, num_new):
        del params
        batch, t = tokens.shape
        logits = jnp.full((batch, t, VOCAB), float(t))
        return logits, state + num_new


@pytest.mark.parametrize(
    "num_drafted, active, widths, expected_width",
    [
        ([1, 1], [True, True], (1, 2, 3, 4), 1),
        ([1, 3], [True, True], (1, 2, 3, 4), 3),
        ([1, 3], [True, True], (2, 4), 4),
        ([4, 2], [False, True], (1, 2, 3, 4), 2),  # finished rows do not widen the call
        ([0, 0], [True, True], (1, 2, 4), 1),  # a lookup that found nothing: bonus only
        ([2, 2], [True, True], (4,), 4),
    ],
)
def test_the_narrowest_width_covering_every_active_row_is_scored(
    num_drafted, active, widths, expected_width
):
    gamma_max = 4
    verify_in = jnp.zeros((2, gamma_max + 1), jnp.int32)
    active = jnp.asarray(active)
    logits, state = jax.jit(
        lambda n, a: score_to_longest(
            WidthTarget(), None, jnp.zeros((2,), jnp.int32), verify_in, n, a, widths
        )
    )(jnp.asarray(num_drafted, jnp.int32), active)
    assert logits.shape == (2, gamma_max + 1, VOCAB)
    used = expected_width + 1
    np.testing.assert_array_equal(logits[:, :used], float(used))
    np.testing.assert_array_equal(logits[:, used:], 0.0)
    np.testing.assert_array_equal(state, np.where(active, used, 0))


def test_widths_are_validated_naming_the_argument():
    assert check_widths([3, 1, 3], 3) == (1, 3)
    for bad in ([], [1, 2], [0, 3], ["a"], [1.7, 3], [True, 3], 3):
        with pytest.raises(ValueError, match="verify_widths"):
            check_widths(bad, 3)
    draft, _ = drafts()["noisy_self"]
    with pytest.raises(ValueError, match="verify_widths"):
        SpeculativeDecoder(TARGET, draft, 3, GREEDY, CACHE_LEN, verify_widths="dynamic")
    with pytest.raises(ValueError, match="verify_widths"):
        SpeculativeDecoder(TARGET, draft, 3, GREEDY, CACHE_LEN, verify_widths=(1, 2))


def test_auto_widths_follow_whether_proposals_vary_in_length():
    draft, _ = drafts()["noisy_self"]
    plain = SpeculativeDecoder(TARGET, draft, 3, GREEDY, CACHE_LEN)
    adaptive = SpeculativeDecoder(
        TARGET, draft, 3, GREEDY, CACHE_LEN, gamma_policy=HeuristicGamma(), verify_widths="auto"
    )
    lookup = SpeculativeDecoder(
        TARGET, LookupDrafter(TARGET.vocab_size), 3, GREEDY, CACHE_LEN, verify_widths="auto"
    )
    assert plain.widths == dataclasses.replace(plain, verify_widths="auto").widths == (3,)
    assert adaptive.widths == lookup.widths == (1, 2, 3)
    assert dataclasses.replace(adaptive, verify_widths="static").widths == (3,)  # the default
    assert dataclasses.replace(adaptive, verify_widths=(1, 3)).widths == (1, 3)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_bucketed_and_static_verification_emit_the_same_tokens(temperature):
    draft, draft_params = drafts()["noisy_self"]
    warper = make_warper(temperature)
    outputs = {}
    for widths in ("static", (1, 2, 3)):
        decoder = SpeculativeDecoder(
            TARGET,
            draft,
            3,
            warper,
            CACHE_LEN,
            gamma_policy=HeuristicGamma(initial=1),
            verify_widths=widths,
        )
        result = decoder.generate(
            target_params(),
            draft_params,
            prompts=PROMPTS,
            key=jax.random.PRNGKey(3),
            max_new_tokens=MAX_NEW,
        )
        outputs[widths] = (np.asarray(result.tokens), np.asarray(result.lengths))
        hist = np.asarray(result.stats.drafted_hist)
    static, bucketed = outputs["static"], outputs[(1, 2, 3)]
    np.testing.assert_array_equal(static[1], bucketed[1])
    np.testing.assert_array_equal(static[0], bucketed[0])
    # The case exercised narrow widths: some iterations drafted fewer than gamma_max tokens.
    assert hist[1:3].sum() > 0
