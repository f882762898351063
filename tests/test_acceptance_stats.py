"""Statistical losslessness of `speculative_accept`: the emitted tokens are distributed as p.

Every case fixes one target vector p used at all gamma + 1 positions (a context-free target, whose
own samples are i.i.d. p) and one draft rule; 2^20 = 1,048,576 independent keys per case
(stats_util.NUM_SAMPLES), drawn with fixed seeds by a jitted vmap over keys. Per case:

  (a) chi-square of the first emitted token against p;
  (b) chi-square of the first two tokens of the emitted stream (two consecutive calls) against
      p x p;
  (c) exact binomial test of the acceptance rate at each draft position i = 1..gamma, among the
      rows that reached it, against alpha (sum_x min(p, q), or E[p(x)] for a deterministic draft);
  (d) chi-square of the number of accepted drafts against the truncated geometric law, and a
      z-test (exact variance) of the mean emitted length n + 1 against
      (1 - alpha^(gamma + 1)) / (1 - alpha).
Any token of probability 0 under p (or p x p) appearing even once fails (a)/(b) outright.

False-failure budget: each check fails below p-value 1e-6 (stats_util.PVALUE_THRESHOLD). The file
runs 15 cases x (gamma + 4) checks with sum(gamma) = 45, i.e. 105 checks, plus 2 in
test_rows_of_one_call_are_independent: 107 checks, so a correct sampler fails this file with
probability <= 107 x 1e-6 ~= 1.1e-4 (Bonferroni; valid whatever the dependence between checks).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import stats_util
from stats_util import PVALUE_THRESHOLD, Case

from specjax.decoding.acceptance import speculative_accept
from specjax.decoding.sampling import make_warper

pytestmark = pytest.mark.slow


def _f32(x) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return (x / x.sum()).astype(np.float32)


def _softmax(logits) -> np.ndarray:
    z = np.exp(logits - np.max(logits))
    return _f32(z)


def _one_hot(index: int, vocab: int) -> np.ndarray:
    return np.eye(vocab, dtype=np.float32)[index]


def _cases() -> list[Case]:
    rng = np.random.default_rng(20230518)
    uniform4, uniform16, uniform64 = (_f32(np.ones(v)) for v in (4, 16, 64))
    peaked16 = _softmax(3.0 * rng.normal(size=16))
    peaked16_b = _softmax(3.0 * rng.normal(size=16))
    # Nearly disjoint supports: p puts 0.998 on the first half, q 0.998 on the second half.
    half = np.r_[np.full(8, 0.998 / 8), np.full(8, 0.002 / 8)]
    dir64_03 = _f32(rng.dirichlet(np.full(64, 0.3)))
    dir64_p, dir64_q = (_f32(rng.dirichlet(np.full(64, 0.1))) for _ in range(2))
    dir16_p, dir16_q = (_f32(rng.dirichlet(np.ones(16))) for _ in range(2))
    dir4_p, dir4_q = (_f32(rng.dirichlet(np.full(4, 10.0))) for _ in range(2))
    # bfloat16: rows of p and q no longer sum to 1 (here 0.9977 and 1.0010); the sampler must follow
    # the normalised bf16 values. This pair (a tiny q entry next to a p entry 1000x larger) made
    # the un-normalised rule (specjax before the fix) fail (a) with chi-square 141 (p = 2e-30).
    bf16_p = np.array([0.705, 0.2219, 0.0494, 0.0236]).astype(jnp.bfloat16)
    bf16_q = np.array([0.6943, 0.2141, 0.0916, 2.29e-5]).astype(jnp.bfloat16)
    bf64_p, bf64_q = (rng.dirichlet(np.full(64, 0.5)).astype(jnp.bfloat16) for _ in range(2))
    # The same warper on two correlated logit vectors: both have zeros, on different tokens.
    warper = make_warper(temperature=0.8, top_k=16, top_p=0.9)
    logits_p = 2.0 * rng.normal(size=64)
    logits_q = logits_p + rng.normal(size=64)
    warped_p = np.asarray(warper.probs(jnp.asarray(logits_p, jnp.float32)))
    warped_q = np.asarray(warper.probs(jnp.asarray(logits_q, jnp.float32)))
    greedy16 = np.asarray(make_warper(temperature=0).probs(jnp.asarray(peaked16)))
    return [
        Case("identical_uniform_v4_g1", uniform4, uniform4, uniform4, 1),
        Case("flat_p_peaked_q_v16_g3", uniform16, peaked16, peaked16, 3),
        Case("peaked_p_flat_q_v16_g5", peaked16, uniform16, uniform16, 5),
        Case("nearly_disjoint_v16_g3", _f32(half), _f32(half[::-1]), _f32(half[::-1]), 3),
        Case("identical_dirichlet0.3_v64_g5", dir64_03, dir64_03, dir64_03, 5),
        Case("dirichlet0.1_v64_g3", dir64_p, dir64_q, dir64_q, 3),
        Case("dirichlet1_v16_g1", dir16_p, dir16_q, dir16_q, 1),
        Case("dirichlet10_v4_g5", dir4_p, dir4_q, dir4_q, 5),
        Case("bf16_tiny_q_v4_g1", bf16_p, bf16_q, bf16_q, 1),
        Case("bf16_dirichlet0.5_v64_g3", bf64_p, bf64_q, bf64_q, 3),
        Case("top_k_top_p_v64_g3", warped_p, warped_q, warped_q, 3),
        Case("greedy_target_v16_g3", greedy16, peaked16_b, peaked16_b, 3),
        # Deterministic drafts (draft_probs=None): any rule independent of the sampler's
        # randomness is lossless, so argmax of a draft model and uniformly random tokens both are.
        Case(
            "deterministic_argmax_v16_g5", dir16_p, _one_hot(int(np.argmax(dir16_q)), 16), None, 5
        ),
        Case("deterministic_random_v64_g1", dir64_p, uniform64, None, 1),
        Case("deterministic_greedy_target_v4_g3", _one_hot(2, 4), uniform4, None, 3),
    ]


CASES = {case.name: case for case in _cases()}
SEEDS = {name: seed for seed, name in enumerate(CASES)}


@functools.cache
def _samples(name: str) -> stats_util.Samples:
    return stats_util.sample_case(CASES[name], speculative_accept, seed=SEEDS[name])


@pytest.mark.parametrize("name", list(CASES))
def test_first_token_is_target(name):
    case = CASES[name]
    result = stats_util.first_token_chi2(case, _samples(name))
    # Threshold 1e-6 per check; file-wide false failure <= 1.1e-4 (see module docstring).
    assert result.pvalue > PVALUE_THRESHOLD, result


@pytest.mark.parametrize("name", list(CASES))
def test_first_two_tokens_are_iid_target(name):
    case = CASES[name]
    result = stats_util.first_two_chi2(case, _samples(name))
    # Threshold 1e-6 per check; file-wide false failure <= 1.1e-4 (see module docstring).
    assert result.pvalue > PVALUE_THRESHOLD, result


@pytest.mark.parametrize("name", list(CASES))
def test_acceptance_rate_per_position(name):
    case = CASES[name]
    n = _samples(name).num_accepted
    for i in range(1, case.gamma + 1):
        reached = int(np.sum(n >= i - 1))
        accepted = int(np.sum(n >= i))
        pvalue = stats_util.binomial_pvalue(accepted, reached, case.alpha)
        # gamma checks at 1e-6 each; file-wide false failure <= 1.1e-4 (see module docstring).
        assert pvalue > PVALUE_THRESHOLD, (i, accepted, reached, case.alpha, pvalue)


@pytest.mark.parametrize("name", list(CASES))
def test_num_accepted_distribution(name):
    case = CASES[name]
    n = _samples(name).num_accepted
    pmf = stats_util.num_accepted_pmf(case.alpha, case.gamma)
    counts = np.bincount(n, minlength=case.gamma + 1)
    stats_util.assert_impossible_never_drawn(counts, pmf, f"{name} num_accepted")
    result = stats_util.pooled_chi2(counts, pmf)
    # Two checks at 1e-6 each; file-wide false failure <= 1.1e-4 (see module docstring).
    assert result.pvalue > PVALUE_THRESHOLD, result
    mean, variance = stats_util.emitted_length_moments(case.alpha, case.gamma)
    if case.alpha < 1:
        np.testing.assert_allclose(mean, (1 - case.alpha ** (case.gamma + 1)) / (1 - case.alpha))
    pvalue = stats_util.mean_pvalue(n + 1.0, mean, variance)
    assert pvalue > PVALUE_THRESHOLD, (np.mean(n + 1.0), mean, pvalue)


def test_alpha_of_hand_checked_cases():
    """The expectations above rest on `Case.alpha`; pin it where it is known in closed form."""
    assert CASES["identical_uniform_v4_g1"].alpha == pytest.approx(1.0)
    assert CASES["identical_dirichlet0.3_v64_g5"].alpha == pytest.approx(1.0)
    # p uniform on 16 tokens: sum min(1/16, q) over a q peaked well above 1/16 on few tokens.
    flat = CASES["flat_p_peaked_q_v16_g3"]
    assert flat.alpha == pytest.approx(np.minimum(1 / 16, flat.r).sum(), abs=1e-6)
    assert CASES["nearly_disjoint_v16_g3"].alpha == pytest.approx(0.004, abs=1e-6)
    assert CASES["deterministic_greedy_target_v4_g3"].alpha == pytest.approx(0.25, abs=1e-6)
    greedy = CASES["greedy_target_v16_g3"]
    assert greedy.alpha == pytest.approx(greedy.r[np.argmax(greedy.p)], abs=1e-6)


def test_rows_of_one_call_are_independent():
    """Two rows of one batched call: their first tokens must be independent draws of p."""
    case = CASES["dirichlet1_v16_g1"]
    vocab, gamma, chunk = case.vocab, case.gamma, stats_util.CHUNK
    p_rows = jnp.broadcast_to(jnp.asarray(case.target), (2, gamma + 1, vocab))
    q_rows = jnp.broadcast_to(jnp.asarray(case.draft_probs), (2, gamma, vocab))
    cdf = jnp.asarray(stats_util.draft_cdf(case.draft_dist))

    def one(key):
        k_draft, k_accept = jax.random.split(key)
        u = jax.random.uniform(k_draft, (2, gamma))
        drafts = jnp.sum(u[..., None] >= cdf, axis=-1).astype(jnp.int32)  # [2, gamma]
        tokens, _ = speculative_accept(k_accept, drafts, q_rows, p_rows)
        return tokens[:, 0]  # [2]

    @jax.jit
    def run(key):
        keys = jax.random.split(key, stats_util.NUM_SAMPLES // chunk)
        return jax.lax.map(lambda k: jax.vmap(one)(jax.random.split(k, chunk)), keys)

    firsts = np.asarray(run(jax.random.key(1234))).reshape(-1, 2)
    counts = np.bincount(firsts[:, 0] * vocab + firsts[:, 1], minlength=vocab * vocab)
    joint = np.outer(case.p, case.p).ravel()
    stats_util.assert_impossible_never_drawn(counts, joint, "rows (0, 1)")
    result = stats_util.pooled_chi2(counts, joint)
    # Threshold 1e-6; file-wide false failure <= 1.1e-4 (see module docstring).
    assert result.pvalue > PVALUE_THRESHOLD, result
    second = stats_util.pooled_chi2(np.bincount(firsts[:, 1], minlength=vocab), case.p)
    assert second.pvalue > PVALUE_THRESHOLD, second
