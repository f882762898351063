"""Tests for specjax.theory against independent computations: sums, brute force, Monte Carlo."""

import warnings

import numpy as np
import pytest

from specjax import theory

# Measured CPU cost of scoring k tokens with model A (ms), from /work/shared/PERF-NOTES.md.
_CPU_POINTS = {1: 8.5, 2: 15.5, 5: 24.6, 9: 29.1}


def _direct_tokens(alpha: float, gamma: int) -> float:
    """E[tokens/iteration] as the plain sum sum_{i=0..gamma} alpha^i (no closed form)."""
    return sum(alpha**i for i in range(gamma + 1))


# ----------------------------------------------------------------------------- divergences


def test_acceptance_rate_on_hand_written_distributions():
    p = np.array(
        [
            [0.5, 0.5, 0.0, 0.0],  # vs uniform: min = .25 + .25 -> 0.5
            [0.1, 0.2, 0.3, 0.4],  # identical -> 1
            [1.0, 0.0, 0.0, 0.0],  # disjoint supports -> 0
            [0.7, 0.1, 0.1, 0.1],  # vs [.1,.7,.1,.1]: .1 + .1 + .1 + .1 -> 0.4
        ]
    )  # [4, vocab]
    q = np.array(
        [
            [0.25, 0.25, 0.25, 0.25],
            [0.1, 0.2, 0.3, 0.4],
            [0.0, 0.5, 0.5, 0.0],
            [0.1, 0.7, 0.1, 0.1],
        ]
    )
    np.testing.assert_allclose(theory.acceptance_rate(p, q), [0.5, 1.0, 0.0, 0.4], atol=1e-15)
    np.testing.assert_allclose(theory.total_variation(p, q), [0.5, 0.0, 1.0, 0.6], atol=1e-15)
    # Along another axis: transposing the inputs must not change the answer.
    np.testing.assert_allclose(theory.acceptance_rate(p.T, q.T, axis=0), [0.5, 1.0, 0.0, 0.4])


def test_acceptance_rate_matches_definition_and_tv_matches_half_l1():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(50), size=20)  # [20, vocab]
    q = rng.dirichlet(np.ones(50), size=20)
    # Definition 3.1: beta = E_{x~q}[min(1, p(x)/q(x))] (q > 0 everywhere here).
    beta_def = np.sum(q * np.minimum(1.0, p / q), axis=-1)
    np.testing.assert_allclose(theory.acceptance_rate(p, q), beta_def, rtol=1e-12)
    # Total variation the textbook way: half the L1 distance; and it is symmetric.
    tv = 0.5 * np.abs(p - q).sum(axis=-1)
    np.testing.assert_allclose(theory.total_variation(p, q), tv, rtol=1e-12)
    np.testing.assert_allclose(theory.total_variation(q, p), tv, rtol=1e-12)


def test_expected_alpha_mean_and_weights():
    p = np.array([[0.5, 0.5], [1.0, 0.0], [0.2, 0.8]])  # [positions, vocab]
    q = np.array([[0.5, 0.5], [0.0, 1.0], [0.6, 0.4]])  # betas 1, 0, 0.6
    assert theory.expected_alpha(p, q) == pytest.approx(1.6 / 3, abs=1e-15)
    # Weights as a padding mask drop the middle position.
    assert theory.expected_alpha(p, q, weights=[1, 0, 1]) == pytest.approx(0.8, abs=1e-15)
    assert theory.expected_alpha(p, q, weights=[3, 1, 0]) == pytest.approx(0.75, abs=1e-15)


# ----------------------------------------------------------------------------- paper formulas


def test_expected_tokens_matches_direct_sum():
    alphas = np.linspace(0.0, 1.0, 21)  # includes both ends
    gammas = np.arange(1, 13)
    got = theory.expected_tokens_per_iteration(alphas[:, None], gammas[None, :])  # [A, G]
    want = np.array([[_direct_tokens(a, g) for g in gammas] for a in alphas])
    np.testing.assert_allclose(got, want, rtol=1e-13)


def test_expected_tokens_alpha_one_limit_is_exact_and_continuous():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no divide-by-zero / invalid warnings either
        at_one = theory.expected_tokens_per_iteration(1.0, np.arange(1, 6))
        near_one = theory.expected_tokens_per_iteration(1.0 - 1e-10, 7)
        at_zero = theory.expected_tokens_per_iteration(0.0, 7)
    np.testing.assert_array_equal(at_one, [2.0, 3.0, 4.0, 5.0, 6.0])
    # The naive closed form loses ~6 digits to cancellation here; the direct sum does not.
    assert near_one == pytest.approx(_direct_tokens(1.0 - 1e-10, 7), rel=1e-12)
    assert at_zero == 1.0
    assert theory.walltime_improvement(1.0, 4, 0.0) == 5.0


@pytest.mark.parametrize(
    "alpha,gamma",
    [(0.3, 2), (0.6, 3), (0.75, 7), (0.8, 4), (0.9, 8), (0.99, 5)],
)
def test_expected_tokens_matches_monte_carlo(alpha, gamma):
    n = 200_000
    samples = theory.simulate_iterations(alpha, gamma, n, seed=1234 + gamma)
    # Exact standard deviation of the truncated geometric, summed from its pmf:
    # P(k) = alpha^(k-1) (1 - alpha) for k = 1..gamma, P(gamma + 1) = alpha^gamma.
    ks = np.arange(1, gamma + 2)
    pmf = np.append(alpha ** (ks[:-1] - 1) * (1 - alpha), alpha**gamma)
    sd = np.sqrt(np.sum(pmf * ks**2) - np.sum(pmf * ks) ** 2)
    z = (samples.mean() - theory.expected_tokens_per_iteration(alpha, gamma)) / (sd / np.sqrt(n))
    # |z| < 4.5: two-sided false-failure probability 2 * (1 - Phi(4.5)) = 6.8e-6 per case
    # (CLT; n = 2e5 makes the normal approximation accurate), 4.1e-5 for all 6 cases together.
    assert abs(z) < 4.5
    # The same test rejects an off-by-one formula (1 - alpha^gamma) / (1 - alpha), at twice its
    # threshold: |z| = alpha^gamma / (sd / sqrt(n)) is 24.7 in expectation at alpha = .75,
    # gamma = 7 (measured 24.5) and 62 to 588 in the other cases, so the test has power. (The
    # bound was 20, 4.7 sd of noise below that expectation, within 1.25x of the measurement.)
    wrong = (1 - alpha**gamma) / (1 - alpha)
    assert abs((samples.mean() - wrong) / (sd / np.sqrt(n))) > 2 * 4.5


def test_simulator_extremes_are_deterministic():
    np.testing.assert_array_equal(theory.simulate_iterations(1.0, 3, 100, seed=0), 4)
    np.testing.assert_array_equal(theory.simulate_iterations(0.0, 3, 100, seed=0), 1)


def test_walltime_paper_bigram_example():
    # Paper: a bigram draft (alpha ~ 0.2) with c ~ 0 and gamma = 3 gives ~1.25x.
    assert theory.walltime_improvement(0.2, 3, 0.0) == pytest.approx(1.248, abs=1e-12)


def test_walltime_t5_small_point():
    # Paper, Table 2: T5-XXL target + T5-small draft on EnDe, alpha = 0.75, gamma = 7, c ~ 0.02.
    # The formula predicts 3.16x; the paper *measured* 3.4x. We test the formula only.
    want = _direct_tokens(0.75, 7) / (7 * 0.02 + 1)
    got = theory.walltime_improvement(0.75, 7, 0.02)
    assert got == pytest.approx(want, rel=1e-13)
    assert got == pytest.approx(3.1575, abs=1e-4)


def test_walltime_and_arithmetic_factor_match_cost_accounting():
    alphas = np.linspace(0.0, 1.0, 11)[:, None, None]
    gammas = np.arange(1, 9)[None, :, None]
    cs = np.array([0.0, 0.01, 0.1, 1.0])[None, None, :]
    tokens = np.vectorize(_direct_tokens)(alphas, gammas)  # [A, G, 1]
    # Time per iteration: gamma draft steps (c each) + one target step; baseline: 1 per token.
    np.testing.assert_allclose(
        theory.walltime_improvement(alphas, gammas, cs), tokens / (gammas * cs + 1), rtol=1e-13
    )
    # Ops per iteration: gamma draft steps (c_hat each) + gamma + 1 target token evaluations.
    np.testing.assert_allclose(
        theory.arithmetic_operations_factor(alphas, gammas, cs),
        (gammas * cs + gammas + 1) / tokens,
        rtol=1e-13,
    )
    assert theory.arithmetic_operations_factor(0.0, 3, 0.5) == pytest.approx(5.5)
    assert theory.arithmetic_operations_factor(1.0, 3, 0.0) == 1.0


def test_optimal_gamma_matches_brute_force():
    alphas = np.array([0.0, 0.1, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99])
    cs = np.array([0.0, 0.01, 0.05, 0.1, 0.3, 1.0])
    got = theory.optimal_gamma(alphas[:, None], cs[None, :], gamma_max=40)  # [A, C]
    for i, a in enumerate(alphas):
        for j, c in enumerate(cs):
            values = np.array([_direct_tokens(a, g) / (g * c + 1) for g in range(1, 41)])
            top2 = np.sort(values)[-2:]
            if top2[1] - top2[0] > 1e-9:
                assert got[i, j] == 1 + int(np.argmax(values)), (a, c)
            else:
                # Near-ties (small alpha with c = 0 plateaus within rounding) may go either way;
                # the chosen gamma must still be optimal up to rounding.
                assert values[got[i, j] - 1] >= top2[1] - 1e-12, (a, c)
    assert got.dtype == np.int64
    # Known points: larger alpha or cheaper draft -> longer drafts.
    assert theory.optimal_gamma(0.8, 0.05, gamma_max=10) == 8
    assert theory.optimal_gamma(0.99, 0.0, gamma_max=10) == 10
    assert theory.optimal_gamma(0.0, 0.0, gamma_max=10) == 1  # exact tie: smallest gamma


def test_corollary_3_9_speedup_when_alpha_exceeds_c():
    alphas = np.linspace(0.05, 0.95, 19)[:, None]
    cs = np.linspace(0.0, 0.9, 10)[None, :]
    best = theory.optimal_gamma(alphas, cs, gamma_max=30)
    speedup = theory.walltime_improvement(alphas, best, cs)
    mask = alphas > cs
    # Corollary 3.9: if alpha > c, the best gamma gives at least (1 + alpha) / (1 + c) > 1.
    assert np.all(speedup[mask] >= ((1 + alphas) / (1 + cs) * np.ones_like(cs))[mask] - 1e-12)
    assert np.all(speedup[mask] > 1.0)


def test_oracle_bound_is_the_limit():
    alphas = np.array([0.0, 0.5, 0.8, 0.9])
    np.testing.assert_allclose(theory.oracle_bound(alphas), [1.0, 2.0, 5.0, 10.0])
    np.testing.assert_allclose(
        theory.walltime_improvement(alphas, 2000, 0.0), theory.oracle_bound(alphas), rtol=1e-12
    )
    assert np.all(theory.walltime_improvement(alphas, 50, 0.01) < theory.oracle_bound(alphas))
    assert np.isinf(theory.oracle_bound(1.0))


# ----------------------------------------------------------------------------- measured costs


def test_measured_speedup_hand_computed():
    # alpha = .5, gamma = 2: E[tokens] = 1 + .5 + .25 = 1.75; iteration = T(3) + 2 * .5 = 4.
    assert theory.measured_speedup(0.5, 2, [1.0, 2.0, 3.0], 0.5) == pytest.approx(0.4375)
    # Same curve as a dict; units cancel, so ms and s agree.
    assert theory.measured_speedup(0.5, 2, {1: 1e-3, 3: 3e-3}, 0.5e-3) == pytest.approx(0.4375)


def test_measured_model_reduces_to_paper_formula():
    alphas = np.linspace(0.0, 1.0, 11)[:, None]
    gammas = np.arange(1, 12)[None, :]
    for c in (0.0, 0.02, 0.3):
        t1 = 7.0
        flat = np.full(12, t1)  # scoring k tokens costs the same as one
        np.testing.assert_allclose(
            theory.measured_speedup(alphas, gammas, flat, c * t1),
            theory.walltime_improvement(alphas, gammas, c),
            rtol=1e-13,
        )
        np.testing.assert_array_equal(
            theory.measured_optimal_gamma(alphas[:, 0], flat, c * t1),
            theory.optimal_gamma(alphas[:, 0], c, gamma_max=11),
        )


def test_cost_curve_interpolates_linearly():
    curve = theory.cost_curve(_CPU_POINTS)
    assert curve.shape == (9,)
    np.testing.assert_allclose(
        curve[[0, 1, 2, 3, 4, 5, 8]],
        [8.5, 15.5, 15.5 + 9.1 / 3, 15.5 + 2 * 9.1 / 3, 24.6, 24.6 + 4.5 / 4, 29.1],
        rtol=1e-13,
    )
    np.testing.assert_array_equal(theory.cost_curve([3.0, 4.0]), [3.0, 4.0])


def test_measured_optimal_gamma_matches_brute_force():
    curve = theory.cost_curve(_CPU_POINTS)
    alphas = np.array([0.3, 0.6, 0.8, 0.9])
    t_drafts = np.array([0.0, 0.22, 1.3, 5.0])
    got = theory.measured_optimal_gamma(alphas[:, None], _CPU_POINTS, t_drafts[None, :])
    for i, a in enumerate(alphas):
        for j, td in enumerate(t_drafts):
            values = [_direct_tokens(a, g) * curve[0] / (curve[g] + g * td) for g in range(1, 9)]
            assert got[i, j] == 1 + int(np.argmax(values)), (a, td)
    # On this CPU multi-token scoring is expensive: alpha = .6 with draft S wants gamma = 2,
    # where the paper's formula (c = .22 / 8.5) would say 5.
    assert got[1, 1] == 2
    assert theory.optimal_gamma(0.6, 0.22 / 8.5) == 5


# ----------------------------------------------------------------------------- tables


def test_gamma_table_values_and_format():
    table = theory.gamma_table([0.6, 0.8], [0.0, 0.05], [1, 2, 4, 8])
    assert table.speedup.shape == (2, 2, 4)
    assert table.tokens_per_iteration.shape == (2, 4)
    assert table.speedup[1, 1, 2] == pytest.approx(_direct_tokens(0.8, 4) / 1.2)
    np.testing.assert_array_equal(table.best_gamma, [[8, 4], [8, 8]])
    np.testing.assert_allclose(
        table.best_speedup,
        np.take_along_axis(table.speedup, np.array([[[3], [2]], [[3], [3]]]), -1)[..., 0],
    )
    text = table.format()
    assert "c = 0.05" in text and "g=8" in text
    rows = [line for line in text.splitlines() if line.startswith(" 0.")]
    assert len(rows) == 4 and all(row.count("*") == 1 for row in rows)  # one best gamma each
    assert table.to_dict()["best_gamma"] == [[8, 4], [8, 8]]


# ----------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: theory.expected_tokens_per_iteration(1.1, 3), "alpha"),
        (lambda: theory.expected_tokens_per_iteration(-0.1, 3), "alpha"),
        (lambda: theory.expected_tokens_per_iteration(np.nan, 3), "alpha"),
        (lambda: theory.expected_tokens_per_iteration(0.5, 0), "gamma"),
        (lambda: theory.expected_tokens_per_iteration(0.5, 2.5), "gamma"),
        (lambda: theory.walltime_improvement(0.5, 3, -0.1), "c"),
        (lambda: theory.arithmetic_operations_factor(0.5, 3, -1.0), "c_hat"),
        (lambda: theory.optimal_gamma(0.5, 0.1, gamma_max=0), "gamma_max"),
        (lambda: theory.oracle_bound([0.5, 2.0]), "alpha"),
        (lambda: theory.measured_speedup(0.5, 3, [1.0, 2.0, 3.0], 0.1), "gamma = 3 needs"),
        (lambda: theory.measured_speedup(0.5, 1, [1.0, 0.0], 0.1), "t_target"),
        (lambda: theory.measured_speedup(0.5, 1, {2: 1.0, 3: 2.0}, 0.1), "including 1"),
        (lambda: theory.measured_speedup(0.5, 1, [1.0, 2.0], -0.1), "t_draft"),
        (lambda: theory.measured_optimal_gamma(0.5, [1.0], 0.1), "at least"),
        (lambda: theory.acceptance_rate([0.5, 0.6], [0.5, 0.5]), "p must sum to 1"),
        (lambda: theory.acceptance_rate([0.5, 0.5], [1.5, -0.5]), "q has negative"),
        (lambda: theory.acceptance_rate([0.5, 0.5], [1 / 3] * 3), "broadcastable"),
        (lambda: theory.expected_alpha([[1.0, 0.0]], [[1.0, 0.0]], weights=[1, 1]), "weights"),
        (lambda: theory.gamma_table([[0.5]], [0.1], [1]), "alphas must be 1-D"),
        (lambda: theory.simulate_iterations([0.5, 0.6], 3, 10, seed=0), "scalars"),
        (lambda: theory.simulate_iterations(0.5, 3, 0, seed=0), "num_iterations"),
    ],
)
def test_bad_inputs_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_non_numeric_input_raises_type_error():
    with pytest.raises(TypeError, match="alpha"):
        theory.expected_tokens_per_iteration("0.5", 3)
    with pytest.raises(TypeError, match="gamma"):
        theory.walltime_improvement(0.5, True, 0.1)


def test_hierarchical_cost_model_on_hand_numbers():
    # Inner level middle <- small at alpha 0.5, gamma 1: E[tokens] = (1 - 0.25) / 0.5 = 1.5 per
    # inner iteration of T_middle(2) + T_small = 1.2 + 0.3 = 1.5, i.e. 1.0 per drafted token.
    inner = (0.5, 1, {1: 1.0, 2: 1.2}, 0.3)
    assert theory.hierarchical_draft_cost(*inner) == pytest.approx(1.0)
    # The outer level then drafts at 1.0 per token: 1.5 tokens x T(1) = 10 over T(2) + 1.0 = 12.
    assert theory.hierarchical_speedup(0.5, 1, {1: 10.0, 2: 11.0}, *inner) == pytest.approx(1.25)
    with pytest.raises(ValueError, match="T_middle\\(3\\)"):
        theory.hierarchical_draft_cost(0.5, 2, {1: 1.0, 2: 1.2}, 0.3)


def test_iteration_time_is_t_of_gamma_plus_one_plus_gamma_draft_steps():
    # T = (1.0, 1.2, 1.3), by hand: γ = 1 costs T(2) + 0.1 = 1.3, γ = 2 costs T(3) + 2 * 0.1 = 1.5.
    curve, gamma, time = theory.iteration_time([1.0, 1.2, 1.3], [1, 2], 0.1)
    np.testing.assert_allclose(time, [1.3, 1.5])
    np.testing.assert_array_equal(curve, [1.0, 1.2, 1.3])
    assert gamma.tolist() == [1, 2]
    names = ("t_middle", "gamma_inner", "t_small", "T_middle")
    with pytest.raises(
        ValueError, match=r"t_middle covers k = 1..3, but gamma_inner = 3 needs T_middle\(4\)"
    ):
        theory.iteration_time([1.0, 1.2, 1.3], 3, 0.1, names)
    with pytest.raises(ValueError, match="t_small must be >= 0"):
        theory.iteration_time([1.0, 1.2], 1, -0.1, names)
