"""Statistical losslessness of `speculative_accept`: the emitted tokens are distributed as p.

Every case fixes a context-free target (p_t per position t, the same vector at every position in
most cases, so the target's own samples are i.i.d. p) and one draft rule; 2^20 = 1,048,576
independent keys per case (stats_util.NUM_SAMPLES), drawn with fixed seeds by a jitted vmap over
keys. Per case:

  (a) chi-square of the first emitted token against p_1;
  (b) chi-square of the first two tokens of the emitted stream (two consecutive calls) against
      p_1 x p_2;
  (c) exact binomial test of the acceptance rate at each draft position i = 1..gamma, among the
      rows that reached it, against alpha_i (sum_x min(p_i, q_i), or E[p_i(x)] for a
      deterministic draft);
  (d) chi-square of the number of accepted drafts against its truncated-geometric law, and a
      z-test (exact variance) of the mean emitted length n + 1 against its expectation,
      (1 - alpha^(gamma + 1)) / (1 - alpha) when alpha is the same at every position;
  (e) chi-square of the bonus token, among rows that accepted all gamma drafts, against
      p_{gamma+1} (the stream test (b) reaches the bonus only when gamma = 1).
Any token of probability 0 under the reference law appearing even once fails outright.

False-failure budget: each check fails below p-value 1e-6 (PVALUE_THRESHOLD). The file
runs 18 cases x (gamma + 5) checks with sum(gamma) = 52, i.e. 142 checks, plus 2 in
test_rows_of_one_call_are_independent: 144 checks, so a correct sampler fails this file with
probability <= 144 x 1e-6 ~= 1.4e-4 (Bonferroni; valid whatever the dependence between checks).

Compiled sampling programs: one per (gamma, vocab, dtype, draft kind), 10 for the 18 cases; the
three 4-token float32 cases are padded with zero-probability tokens to vocab 16 (`_padded`), so
they share the v16 cases' programs.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import stats_util
from stats_util import Case

from specjax.decoding import make_warper, speculative_accept
from specjax.testing.law import draft_cdf
from specjax.testing.stats import PVALUE_THRESHOLD, pooled_chi2

pytestmark = [pytest.mark.slow, pytest.mark.runtime_bound]  # tests/conftest.py


def _f32(x) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return (x / x.sum(-1, keepdims=True)).astype(np.float32)


def _softmax(logits) -> np.ndarray:
    z = np.exp(logits - np.max(logits))
    return _f32(z)


def _one_hot(index: int, vocab: int) -> np.ndarray:
    return np.eye(vocab, dtype=np.float32)[index]


def _padded(x: np.ndarray, vocab: int = 16) -> np.ndarray:
    """x [..., v] with zero-probability tokens appended up to `vocab`.

    The law and the draft are unchanged (a padded token has p = q = r = 0: the draft's CDF is
    exactly 1 from the last live token on, and emitting a padded token fails at once), but the
    case takes the shape of the v16 cases of its gamma, and so shares their compiled sampler.
    """
    return np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, vocab - x.shape[-1])])


def _cases() -> list[Case]:
    rng = np.random.default_rng(20230518)
    uniform4, uniform16, uniform64 = (_f32(np.ones(v)) for v in (4, 16, 64))
    peaked16 = _softmax(3.0 * rng.normal(size=16))
    near16 = _softmax(np.log(peaked16) + rng.normal(size=16))  # a draft close to peaked16
    # Nearly disjoint supports: p puts 0.998 on the first half, q 0.998 on the second half.
    half = np.r_[np.full(8, 0.998 / 8), np.full(8, 0.002 / 8)]
    dir64_03 = _f32(rng.dirichlet(np.full(64, 0.3)))
    dir64_p, dir64_q = (_f32(rng.dirichlet(np.full(64, 0.1))) for _ in range(2))
    dir16_p, dir16_q = (_f32(rng.dirichlet(np.ones(16))) for _ in range(2))
    dir4_p, dir4_q = (_f32(rng.dirichlet(np.full(4, 10.0))) for _ in range(2))
    # bfloat16: rows of p and q no longer sum to 1 (here 0.9977 and 1.0010); the sampler must follow
    # the normalised bf16 values. This pair (a tiny q entry next to a p entry 1000x larger) made
    # the un-normalised rule (specjax before the fix) fail (a) with chi-square 165 (p = 2e-35).
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
    # Position-dependent targets: p_t and q_t differ at every position, so any confusion of rows
    # (the draft's position vs the target's, the bonus row, the second call's offset) is biased.
    pos_p = _f32(rng.dirichlet(np.ones(16), 5))  # [gamma + 2, vocab] with gamma = 3
    pos_q = _f32(rng.dirichlet(np.ones(16), 4))  # [gamma + 1, vocab]
    pos_argmax = np.eye(16, dtype=np.float32)[np.argmax(pos_p, -1)[:4]]  # draft = argmax p_t
    pos_argmax[0] = np.eye(16, dtype=np.float32)[np.argsort(pos_p[0])[-2]]  # runner-up at t=1
    # gamma = 1: the bonus (from p_2) is the second token of the stream after an acceptance.
    pos1_p = _f32(rng.dirichlet(np.ones(16), 3))  # [gamma + 2, vocab]
    pos1_q = _f32(rng.dirichlet(np.ones(16), 2))  # [gamma + 1, vocab]
    iid = Case.iid
    return [
        Case("positional_dirichlet_v16_g3", pos_p, pos_q, pos_q, 3),
        Case("positional_deterministic_v16_g3", pos_p, pos_argmax, None, 3),
        Case("positional_dirichlet_v16_g1", pos1_p, pos1_q, pos1_q, 1),
        # The three v4 cases: 4 live tokens, padded to vocab 16 (`_padded`).
        iid("identical_uniform_v4_g1", *(_padded(uniform4) for _ in range(3)), 1),
        iid("flat_p_peaked_q_v16_g3", uniform16, peaked16, peaked16, 3),
        iid("peaked_p_flat_q_v16_g5", peaked16, uniform16, uniform16, 5),
        iid("nearly_disjoint_v16_g3", _f32(half), _f32(half[::-1]), _f32(half[::-1]), 3),
        iid("identical_dirichlet0.3_v64_g5", dir64_03, dir64_03, dir64_03, 5),
        iid("dirichlet0.1_v64_g3", dir64_p, dir64_q, dir64_q, 3),
        iid("dirichlet1_v16_g1", dir16_p, dir16_q, dir16_q, 1),
        iid("dirichlet10_v4_g5", _padded(dir4_p), _padded(dir4_q), _padded(dir4_q), 5),
        iid("bf16_tiny_q_v4_g1", bf16_p, bf16_q, bf16_q, 1),
        iid("bf16_dirichlet0.5_v64_g3", bf64_p, bf64_q, bf64_q, 3),
        iid("top_k_top_p_v64_g3", warped_p, warped_q, warped_q, 3),
        iid("greedy_target_v16_g3", greedy16, near16, near16, 3),
        # Deterministic drafts (draft_probs=None): any rule independent of the sampler's
        # randomness is lossless, so a greedy draft that agrees with the target's mode and
        # uniformly random tokens both are.
        iid("deterministic_argmax_v16_g5", dir16_p, _one_hot(int(np.argmax(dir16_p)), 16), None, 5),
        iid("deterministic_random_v64_g1", dir64_p, uniform64, None, 1),
        iid(
            "deterministic_greedy_target_v4_g3", _padded(_one_hot(2, 4)), _padded(uniform4), None, 3
        ),
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
    # Threshold 1e-6 per check; file-wide false failure <= 1.4e-4 (see module docstring).
    assert result.pvalue > PVALUE_THRESHOLD, result


@pytest.mark.parametrize("name", list(CASES))
def test_first_two_tokens_are_independent_target_draws(name):
    case = CASES[name]
    result = stats_util.first_two_chi2(case, _samples(name))
    # Threshold 1e-6 per check; file-wide false failure <= 1.4e-4 (see module docstring).
    assert result.pvalue > PVALUE_THRESHOLD, result


@pytest.mark.parametrize("name", list(CASES))
def test_bonus_token_is_target(name):
    case = CASES[name]
    result = stats_util.bonus_chi2(case, _samples(name))
    # Threshold 1e-6 per check; file-wide false failure <= 1.4e-4 (see module docstring).
    assert result.pvalue > PVALUE_THRESHOLD, result


@pytest.mark.parametrize("name", list(CASES))
def test_acceptance_rate_per_position(name):
    case = CASES[name]
    n = _samples(name).num_accepted
    for i in range(1, case.gamma + 1):
        reached = int(np.sum(n >= i - 1))
        accepted = int(np.sum(n >= i))
        alpha = case.alphas[i - 1]
        pvalue = stats_util.binomial_pvalue(accepted, reached, alpha)
        # gamma checks at 1e-6 each; file-wide false failure <= 1.4e-4 (see module docstring).
        assert pvalue > PVALUE_THRESHOLD, (i, accepted, reached, alpha, pvalue)


@pytest.mark.parametrize("name", list(CASES))
def test_num_accepted_distribution(name):
    case = CASES[name]
    n = _samples(name).num_accepted
    pmf = stats_util.num_accepted_pmf(case.alphas)
    counts = np.bincount(n, minlength=case.gamma + 1)
    stats_util.assert_impossible_never_drawn(counts, pmf, f"{name} num_accepted")
    result = pooled_chi2(counts, pmf)
    # Two checks at 1e-6 each; file-wide false failure <= 1.4e-4 (see module docstring).
    assert result.pvalue > PVALUE_THRESHOLD, result
    mean, variance = stats_util.emitted_length_moments(case.alphas)
    pvalue = stats_util.mean_pvalue(n + 1.0, mean, variance)
    assert pvalue > PVALUE_THRESHOLD, (np.mean(n + 1.0), mean, pvalue)


def test_expectations_of_hand_checked_cases():
    """The expectations above rest on `Case.alphas` and the pmf; pin them in closed form."""
    assert CASES["identical_uniform_v4_g1"].alphas == pytest.approx([1.0])
    assert CASES["identical_dirichlet0.3_v64_g5"].alphas == pytest.approx([1.0] * 5)
    assert CASES["nearly_disjoint_v16_g3"].alphas == pytest.approx([0.004] * 3, abs=1e-6)
    assert CASES["deterministic_greedy_target_v4_g3"].alphas == pytest.approx([0.25] * 3, abs=1e-6)
    greedy = CASES["greedy_target_v16_g3"]
    assert greedy.alphas[0] == pytest.approx(greedy.r[0, np.argmax(greedy.p[0])], abs=1e-6)
    flat = CASES["flat_p_peaked_q_v16_g3"]  # p uniform: sum_x min(1/16, q(x))
    assert flat.alphas[0] == pytest.approx(np.minimum(1 / 16, flat.r[0]).sum(), abs=1e-6)
    positional = CASES["positional_deterministic_v16_g3"]  # runner-up of p_1, then argmaxes
    expected = [np.sort(positional.p[0])[-2], *np.max(positional.p[1:3], -1)]
    assert positional.alphas == pytest.approx(expected, abs=1e-6)
    # Truncated geometric law and Leviathan et al.'s expected length for a constant alpha.
    np.testing.assert_allclose(
        stats_util.num_accepted_pmf([0.5] * 3), [0.5, 0.25, 0.125, 0.125], rtol=1e-12
    )
    mean, _ = stats_util.emitted_length_moments([0.6] * 4)
    assert mean == pytest.approx((1 - 0.6**5) / (1 - 0.6), rel=1e-12)


def test_rows_of_one_call_are_independent():
    """Two rows of one batched call: their first tokens must be independent draws of p."""
    case = CASES["dirichlet1_v16_g1"]
    vocab, gamma, chunk = case.vocab, case.gamma, stats_util.CHUNK
    p_rows = jnp.broadcast_to(jnp.asarray(case.target[: gamma + 1]), (2, gamma + 1, vocab))
    q_rows = jnp.broadcast_to(jnp.asarray(case.draft_probs[:gamma]), (2, gamma, vocab))
    cdf = jnp.asarray(draft_cdf(case.draft_dist[:gamma]))  # [gamma, vocab]

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
    joint = np.outer(case.p[0], case.p[0]).ravel()
    stats_util.assert_impossible_never_drawn(counts, joint, "rows (0, 1)")
    result = pooled_chi2(counts, joint)
    # Threshold 1e-6; file-wide false failure <= 1.4e-4 (see module docstring).
    assert result.pvalue > PVALUE_THRESHOLD, result
    second = pooled_chi2(np.bincount(firsts[:, 1], minlength=vocab), case.p[0])
    assert second.pvalue > PVALUE_THRESHOLD, second
