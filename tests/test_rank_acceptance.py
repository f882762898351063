"""Acceptance by rank (`specjax.rank_acceptance`) against exact enumeration.

* "with" and "top_k" are closed forms: equal to `positional_reference.exact_positional` (an
  enumeration written from the rule's definition) to float32 rounding.
* "without" is a Monte Carlo of `tree_accept` itself: at each of 4 hand-written positions the
  counts of each rank (and of "none accepted") over 2^16 races go through a pooled chi-square
  against the exact enumeration, failing below PVALUE_THRESHOLD = 1e-6: 4 checks,
  false-failure probability <= 4e-6 (Bonferroni). Power: the with-replacement vector at the same
  positions must be rejected at p < 1e-12.
* P[1] is beta: over sequences scored by an n-gram pair, mean P[1] is the alpha of the same
  forward passes (exactly for "with", within Monte-Carlo error for "without").
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import stats_util
from positional_reference import exact_positional

from specjax.decoding import make_warper
from specjax.models.ngram import NgramLM, fit_ngram
from specjax.rank_acceptance import rank_acceptance, rank_acceptance_on_sequences
from specjax.testing.stats import PVALUE_THRESHOLD, pooled_chi2

P = np.array(
    [
        [0.45, 0.25, 0.2, 0.1, 0.0],
        [0.05, 0.05, 0.1, 0.3, 0.5],
        [1.0, 0.0, 0.0, 0.0, 0.0],  # one-hot target
        [0.2, 0.2, 0.2, 0.2, 0.2],
    ]
)
Q = np.array(
    [
        [0.1, 0.4, 0.3, 0.2, 0.0],
        [0.5, 0.3, 0.1, 0.05, 0.05],
        [0.25, 0.25, 0.25, 0.25, 0.0],
        [0.6, 0.4, 0.0, 0.0, 0.0],  # support of 2 < 4 ranks: the uniform fallback is used
    ]
)
WARPER = make_warper(temperature=1.0)


def _logits(probs):
    return jnp.asarray(np.log(np.maximum(probs, 1e-30)), jnp.float32)


def test_with_replacement_is_the_exact_residual_chain():
    got = np.asarray(rank_acceptance(jax.random.key(0), _logits(P), _logits(Q), WARPER, 4, "with"))
    want = np.stack([exact_positional(p, q, 4, True) for p, q in zip(P, Q, strict=True)])
    np.testing.assert_allclose(got, want, atol=2e-6)
    np.testing.assert_allclose(got[:, 0], np.minimum(P, Q).sum(-1), atol=2e-6)  # P_1 = beta


def test_top_k_is_the_target_probability_of_the_drafts_kth_token():
    got = np.asarray(rank_acceptance(jax.random.key(0), _logits(P), _logits(Q), WARPER, 2, "top_k"))
    top = np.argsort(-Q, axis=-1, kind="stable")[:, :2]
    np.testing.assert_allclose(got, np.take_along_axis(P, top, -1), atol=2e-6)


def test_without_replacement_monte_carlo_matches_enumeration():
    samples = 2**16
    got = np.asarray(
        rank_acceptance(jax.random.key(3), _logits(P), _logits(Q), WARPER, 4, "without", samples)
    )
    honest = np.stack([exact_positional(p, q, 4, False) for p, q in zip(P, Q, strict=True)])
    other = np.stack([exact_positional(p, q, 4, True) for p, q in zip(P, Q, strict=True)])
    worst, strongest = 1.0, 1.0
    for row in range(len(P)):
        counts = np.round(np.append(got[row], 1 - got[row].sum()) * samples)  # ranks, then none
        want = np.append(honest[row], 1 - honest[row].sum())
        stats_util.assert_impossible_never_drawn(counts, want, f"position {row}")
        worst = min(worst, pooled_chi2(counts, want).pvalue)
        wrong = np.append(other[row], 1 - other[row].sum())
        strongest = min(strongest, pooled_chi2(counts, np.maximum(wrong, 1e-9)).pvalue)
    assert worst > PVALUE_THRESHOLD, worst  # measured: min p = 0.014
    assert strongest < 1e-12, strongest  # power: the with-replacement vector is rejected


def test_greedy_with_replacement_collapses_to_a_chain_and_without_is_top_k():
    greedy = make_warper(temperature=0.0)
    t, d = _logits(P[:2]), _logits(Q[:2])
    with_ = np.asarray(rank_acceptance(jax.random.key(0), t, d, greedy, 3, "with"))
    # The same greedy draft token every time: only the first draw can be accepted.
    np.testing.assert_array_equal(with_[:, 1:], 0.0)
    np.testing.assert_array_equal(with_[:, 0], P[:2].argmax(-1) == Q[:2].argmax(-1))
    without = np.asarray(rank_acceptance(jax.random.key(0), t, d, greedy, 3, "without"))
    top = np.argsort(-Q[:2], axis=-1, kind="stable")[:, :3]
    np.testing.assert_array_equal(without, top == P[:2].argmax(-1)[:, None])


def test_on_sequences_first_rank_is_alpha():
    vocab = 7
    rng = np.random.default_rng(0)
    target, draft = NgramLM(vocab_size=vocab, order=2), NgramLM(vocab_size=vocab, order=1)
    tparams = fit_ngram(rng.integers(0, vocab, 400), vocab, 2)
    dparams = fit_ngram(rng.integers(0, vocab, 400), vocab, 1)
    sequences = rng.integers(0, vocab, (6, 12)).astype(np.int32)
    out = rank_acceptance_on_sequences(
        target, tparams, draft, dparams, sequences, 4, WARPER, 3, samples=256, batch_size=4
    )
    assert out["with"]["positions"] == 6 * 8
    assert out["with"]["positional"][0] == pytest.approx(out["with"]["alpha"], abs=1e-6)
    # "without" estimates beta by Monte Carlo: 48 positions x 256 races, SE < 0.005.
    assert out["without"]["positional"][0] == pytest.approx(out["with"]["alpha"], abs=0.03)
    for rule in ("with", "without", "top_k"):
        assert sum(out[rule]["positional"]) <= 1.0 + 1e-6
        assert out[rule]["conditional"][0] == pytest.approx(out[rule]["positional"][0])


def test_bad_arguments_raise_naming_them():
    t, d = _logits(P), _logits(Q)
    with pytest.raises(ValueError, match="rule"):
        rank_acceptance(jax.random.key(0), t, d, WARPER, 2, "both")
    with pytest.raises(ValueError, match="ranks"):
        rank_acceptance(jax.random.key(0), t, d, WARPER, 0, "with")
    with pytest.raises(ValueError, match="draft_logits"):
        rank_acceptance(jax.random.key(0), t, d[:, :4], WARPER, 2, "with")
