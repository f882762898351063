"""A γ policy over drafters that are not models (`TruncatedDrafter`): prompt lookup, EAGLE heads.

* `check_decoder` (the kit's exact-law test) on a tiny target, vocab 5, t = 1, 2^14 rows per
  prompt (the lossless runs with both prompts side by side in every call, `mixed=True`):
  prompt lookup under the heuristic policy (deterministic proposals, a budget that moves with
  every verdict) and under the positional policy (a budget from per-position survival counts),
  and an untrained EAGLE-1 head under the confidence policy (cuts by the head's own q).
  False-failure rate per test: the kit's Bonferroni bound, k x 1e-6 with
  k = 2 prompts x (3 + 1) + 2 = 10 checks, 1e-5.
* Negative control: the same cut reported wrongly (tokens zeroed past the cut but num_drafted
  left at γ, so the rule verifies zero tokens with q = 0 there) must fail the same test.
* Cuts happen (the γ histogram has short rows), and at t = 0 the output equals AR token for
  token.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from specjax import testing
from specjax.decoding import (
    AutoregressiveDecoder,
    ConfidenceGamma,
    HeuristicGamma,
    LookupDrafter,
    MedusaDrafter,
    PositionalGamma,
    SpeculativeBeamDecoder,
    SpeculativeDecoder,
    TruncatedDrafter,
    make_warper,
)
from specjax.models import EagleHead, MedusaHeads
from specjax.testing import tiny_llama

T1 = make_warper(1.0)
T0 = make_warper(0.0)
PROMPTS = ((2,), (1, 4, 1, 4, 1))  # the second repeats: lookup matches from the first step
HEURISTIC = HeuristicGamma(initial=1)
CONFIDENCE = ConfidenceGamma(0.5)
# c = 0.1 of a step per draft: γ = 2 at the prior (s_i = 0.5), 1 once a row's first position is
# mostly rejected, longer where its survival counts favour it (the cuts test checks both happen).
POSITIONAL = PositionalGamma(c=0.1, prior_alpha=0.5, prior_strength=1.0)


def _lookup(vocab=5, warper=T1, policy=HEURISTIC):
    target, tp = tiny_llama(vocab)
    dec = SpeculativeDecoder(target, LookupDrafter(vocab), 3, warper, cache_len=32,
                             gamma_policy=policy)  # fmt: skip
    return dec, tp, {}


def _eagle(vocab=5, warper=T1, policy=CONFIDENCE):
    target, tp = tiny_llama(vocab)
    head = EagleHead(target)
    hp = head.init_params(jax.random.PRNGKey(7))
    hp = jax.tree.map(lambda x: x * 4.0 if x.ndim == 2 else x, hp)
    dec = SpeculativeDecoder(target, head, 3, warper, cache_len=32, gamma_policy=policy)
    return dec, tp, hp


def _lookup_positional(vocab=5, warper=T1, policy=POSITIONAL):
    return _lookup(vocab, warper, policy)


@pytest.mark.parametrize(
    "build",
    [_lookup, _lookup_positional, _eagle],
    ids=["lookup-heuristic", "lookup-positional", "eagle-confidence"],
)
def test_a_policy_over_a_drafter_is_lossless(build):
    dec, tp, dp = build()
    assert isinstance(dec.drafter, TruncatedDrafter)
    report = testing.check_decoder(dec, tp, dp, draws=1 << 14, prompts=PROMPTS, mixed=True)
    print(report)
    assert report.passed


@dataclasses.dataclass(frozen=True)
class _CutButFull(TruncatedDrafter):
    """Planted bug: cuts the tokens and q but reports every row as having drafted γ."""

    def propose(self, params, state, seq, key, gamma):
        p = super().propose(params, state, seq, key, gamma)
        return p.replace(num_drafted=None)


def test_a_misreported_cut_is_caught():
    dec, tp, hp = _eagle()
    bad = dataclasses.replace(dec, draft=_CutButFull(dec.drafter, CONFIDENCE, 3),
                              gamma_policy=None)  # fmt: skip
    report = testing.check_decoder(bad, tp, hp, draws=1 << 14, prompts=PROMPTS)
    print(report)
    assert not report.passed


@pytest.mark.parametrize(
    "build, policy",
    [(_lookup, HEURISTIC), (_lookup, POSITIONAL), (_eagle, HEURISTIC)],
    ids=["lookup", "lookup-positional", "eagle"],
)
def test_cuts_happen_and_greedy_equals_autoregressive(build, policy):
    """The heuristic policy for both drafters (at t = 0 a proposal's q is a point mass, so the
    confidence policy has nothing to read from it and never cuts), and the positional one."""
    dec, tp, dp = build(vocab=23, warper=T0, policy=policy)
    prompts = [np.array([1, 2, 3, 1, 2, 3, 1]), np.array([7]), np.array([3, 3, 9, 1, 3, 3])]
    key = jax.random.PRNGKey(0)
    ar = AutoregressiveDecoder(dec.target, T0, cache_len=32).generate(
        tp, prompts=prompts, key=key, max_new_tokens=16
    )
    sp = dec.generate(tp, dp, prompts=prompts, key=key, max_new_tokens=16)
    for a, b in zip(ar.new_tokens(), sp.new_tokens(), strict=True):
        np.testing.assert_array_equal(a, b)
    hist = np.asarray(sp.stats.drafted_hist)  # [gamma + 1]: rows by tokens kept
    print("kept-token histogram", hist)
    assert hist[:3].sum() > 0  # some rows kept fewer than γ = 3
    if policy is POSITIONAL:
        assert hist[1] > 0 and hist[2:].sum() > 0  # its budget moved: γ = 1 and longer


def test_the_policy_must_be_a_policy():
    target, _ = tiny_llama(5)
    with pytest.raises(ValueError, match="gamma_max"):
        TruncatedDrafter(LookupDrafter(5), HeuristicGamma(), 0)
    # Built for another gamma, or around a draft that cannot take it: refused at construction.
    with pytest.raises(ValueError, match="built for gamma_max=2, got 3"):
        SpeculativeDecoder(target, TruncatedDrafter(LookupDrafter(5), HeuristicGamma(), 2), 3, T0)
    heads = TruncatedDrafter(MedusaDrafter(MedusaHeads(target, 2), T0), HeuristicGamma(), 3)
    with pytest.raises(ValueError, match="gamma=3 exceeds the 2 Medusa heads"):
        SpeculativeDecoder(target, heads, 3, T0)
    with pytest.raises(ValueError, match="gamma=3 exceeds the 2 Medusa heads"):
        SpeculativeBeamDecoder(target, heads, 3, 2)  # beam search asks the drafter too
