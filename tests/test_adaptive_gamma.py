"""Adaptive γ: greedy equality with autoregressive decoding, early stopping, policies, arguments.

Sampled losslessness (chi-square against the exact law, with the dropped-token negative control)
is tests/test_adaptive_gamma_sampling.py. Runtime: about 70 s on the 2-core development machine
(compiling the four greedy adaptive decoders and the autoregressive reference is most of it).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from decoding_setup import (
    CACHE_LEN,
    DRAFT_NAN,
    GAMMA,
    GREEDY,
    MAX_NEW,
    PROMPTS,
    TARGET,
    ar_decoder,
    as_lists,
    drafts,
    nan_params,
    target_params,
)

from specjax import theory
from specjax.decoding import (
    AdaptiveDrafter,
    ConfidenceGamma,
    FixedGamma,
    HeuristicGamma,
    PositionalGamma,
    SpeculativeDecoder,
    TheoryGamma,
    loop,
    parse_gamma_policy,
)

POLICIES = {
    "fixed1": FixedGamma(1),
    "heuristic": HeuristicGamma(),
    "confidence": ConfidenceGamma(0.5),
    "theory": TheoryGamma(c=0.3),
    "positional": PositionalGamma(c=0.3),
}
# The draft steps as unrolled conds for these; a `lax.while_loop` (the default on CPU) for the rest.
UNROLLED = ("theory",)


def _decoder(policy, unroll=None) -> SpeculativeDecoder:
    draft, _ = drafts()["noisy_self"]
    return SpeculativeDecoder(
        TARGET, draft, GAMMA, GREEDY, CACHE_LEN, unroll_draft=unroll, gamma_policy=policy
    )


@pytest.fixture(scope="module")
def ar_tokens():
    result = ar_decoder().generate(target_params(), PROMPTS, jax.random.PRNGKey(0), MAX_NEW)
    return as_lists(result)


@pytest.fixture(scope="module")
def results():
    """name -> GenerationResult of greedy adaptive decoding of the ragged prompts."""
    _, draft_params = drafts()["noisy_self"]
    return {
        name: _decoder(policy, True if name in UNROLLED else None).generate(
            target_params(), draft_params, PROMPTS, jax.random.PRNGKey(0), MAX_NEW
        )
        for name, policy in POLICIES.items()
    }


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_greedy_adaptive_equals_greedy_autoregressive(results, ar_tokens, name):
    assert as_lists(results[name]) == ar_tokens
    summary = results[name].summary()
    # One histogram entry per (row, iteration); every row drafts 1..gamma tokens.
    hist = summary["drafted_histogram"]
    assert len(hist) == GAMMA + 1 and hist[0] == 0
    assert sum(hist) == summary["row_iterations"]


def test_draft_loop_stops_when_every_row_has_stopped(results):
    """Draft calls per iteration = the most any row drafted, not gamma_max."""
    fixed1 = results["fixed1"].summary()
    assert fixed1["draft_calls"] == fixed1["target_calls"]  # one draw per iteration
    assert fixed1["drafted_histogram"][1] == fixed1["row_iterations"]
    for name in ("confidence", "theory"):
        summary = results[name].summary()
        assert summary["draft_calls"] < GAMMA * summary["target_calls"], (name, summary)
        assert summary["mean_gamma"] < GAMMA
    # The heuristic schedule moves every row's γ both ways.
    hist = results["heuristic"].summary()["drafted_histogram"]
    assert hist[GAMMA] > 0 and sum(hist[1:GAMMA]) > 0, hist


@pytest.mark.parametrize("name", ["confidence", "theory"])
def test_a_nan_draft_is_named_when_greedy(results, name):
    """The adaptive loop keeps each draw's one-hot q; a NaN draft makes it NaN (Warper.draw),
    so the decoder names the draft instead of verifying its garbage (the programs above)."""
    del results  # compiled there
    _, draft_params = drafts()["noisy_self"]
    decoder = _decoder(POLICIES[name], True if name in UNROLLED else None)
    with pytest.raises(ValueError, match=DRAFT_NAN):
        decoder.generate(
            target_params(), nan_params(draft_params), PROMPTS, jax.random.PRNGKey(0), MAX_NEW
        )


def test_no_recompilation_for_new_prompts_or_budget(results):
    del results  # compiled there
    _, draft_params = drafts()["noisy_self"]
    decoder = _decoder(POLICIES["heuristic"])
    programs = loop.generate_jit._cache_size()
    prompts = [p[::-1] + 1 for p in PROMPTS]  # same 16-token bucket
    decoder.generate(target_params(), draft_params, prompts, jax.random.PRNGKey(1), MAX_NEW - 5)
    assert loop.generate_jit._cache_size() == programs


def test_heuristic_schedule_per_row():
    policy = HeuristicGamma()
    state = jnp.array([1, 4, 3, 2], jnp.int32)
    drafted = jnp.array([1, 4, 3, 2], jnp.int32)
    accepted = jnp.array([1, 4, 0, 0], jnp.int32)  # all, all, none, none (inactive)
    active = jnp.array([True, True, True, False])
    new = policy.update(state, drafted, accepted, active, 4)
    np.testing.assert_array_equal(new, [3, 4, 2, 2])  # +2, clipped at 4, -1, unchanged
    np.testing.assert_array_equal(policy.init(2, 4), [4, 4])
    np.testing.assert_array_equal(HeuristicGamma(initial=9).init(1, 4), [4])
    np.testing.assert_array_equal(policy.budget(jnp.array([0, 5]), 4), [1, 4])


def test_theory_budget_is_the_papers_optimal_gamma():
    """With a negligible prior, γ_t is `theory.optimal_gamma` at α̂ (flat target costs) and
    `theory.measured_optimal_gamma` with a measured cost curve."""
    alphas = np.array([0.1, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95])
    counts = 1e6
    state = (jnp.asarray(alphas * counts, jnp.float32), jnp.asarray((1 - alphas) * counts))
    for c in (0.05, 0.2, 0.5):
        policy = TheoryGamma(c=c, prior_strength=1e-6)
        expected = theory.optimal_gamma(alphas, c, gamma_max=8)
        np.testing.assert_array_equal(policy.budget(state, 8), expected)
    curve = {1: 1.0, 2: 1.1, 5: 1.6, 9: 2.9}
    policy = TheoryGamma.from_costs(curve, 0.1, prior_strength=1e-6, static_verify=False)
    expected = theory.measured_optimal_gamma(alphas, curve, 0.1)
    np.testing.assert_array_equal(policy.budget(state, 8), expected)
    # A static-width verifier pays T(gamma_max + 1) whatever γ is: only draft steps trade off.
    static = TheoryGamma.from_costs(curve, 0.1, prior_strength=1e-6)
    gammas = np.arange(1, 9)
    speedup = theory.expected_tokens_per_iteration(alphas[:, None], gammas) / (2.9 + 0.1 * gammas)
    np.testing.assert_array_equal(static.budget(state, 8), gammas[np.argmax(speedup, axis=1)])
    assert not np.array_equal(static.budget(state, 8), expected)


def test_theory_estimate_is_the_censored_geometric_mle():
    """A/(A + R) recovers α from truncated runs, where accepted/drafted is biased low."""
    alpha, gamma, rows, rounds = 0.7, 3, 4000, 25
    rng = np.random.default_rng(0)
    policy = TheoryGamma(prior_strength=1e-3)
    state = policy.init(rows, gamma)
    drafted = jnp.full((rows,), gamma, jnp.int32)
    active = jnp.ones((rows,), bool)
    naive = []
    for _ in range(rounds):
        run = np.minimum(rng.geometric(1 - alpha, rows) - 1, gamma)  # accepted before a reject
        state = policy.update(state, drafted, jnp.asarray(run, jnp.int32), active, gamma)
        naive.append(run.mean() / gamma)
    estimate = float(policy.alpha(state).mean())
    assert abs(estimate - alpha) < 0.01, estimate
    assert np.mean(naive) < alpha - 0.1  # the truncation bias the MLE avoids


def _counts(survival, n=1e6):
    """A (reached, accepted) state whose estimates are `survival` [batch, G] (prior negligible)."""
    survival = np.asarray(survival, np.float64)
    return (jnp.full(survival.shape, n, jnp.float32), jnp.asarray(survival * n, jnp.float32))


def test_positional_budget_maximises_the_positional_model_per_row():
    """γ_t = argmax over γ of theory.positional_tokens_per_iteration(s, γ) / cost(γ), row by row;
    at equal survivals it is TheoryGamma's γ at that α."""
    survival = np.array(
        [
            [0.3, 0.95, 0.95, 0.95, 0.95, 0.95],  # lookup-like: a weak first draft, then a copy
            [0.9, 0.5, 0.2, 0.1, 0.1, 0.1],  # a head-like decay
            [0.6, 0.6, 0.6, 0.6, 0.6, 0.6],
            [0.05, 0.05, 0.05, 0.05, 0.05, 0.05],
        ]
    )
    state = _counts(survival)
    gammas = np.arange(1, 7)
    curve = {1: 1.0, 2: 1.02, 4: 1.1, 7: 1.3}
    for policy, cost in (
        (PositionalGamma(c=0.1, prior_strength=1e-6), 1.0 + 0.1 * gammas),
        (
            PositionalGamma.from_costs(curve, 0.05, prior_strength=1e-6, static_verify=False),
            np.interp(gammas + 1, [1, 2, 4, 7], [1.0, 1.02, 1.1, 1.3]) + 0.05 * gammas,
        ),
    ):
        tokens = np.array([[theory.positional_tokens_per_iteration(r, g) for g in gammas]
                           for r in survival])  # fmt: skip
        expected = gammas[np.argmax(tokens / cost, axis=1)]
        np.testing.assert_array_equal(policy.budget(state, 6), expected)
        assert expected[0] > 1 and expected[3] == 1  # the model's choice differs by row
        np.testing.assert_allclose(policy.survival(state), survival, rtol=1e-5)
    # Equal survivals: the i.i.d. model's choice (TheoryGamma at the same α).
    alphas = np.array([0.1, 0.3, 0.5, 0.7, 0.9])
    equal = _counts(np.repeat(alphas[:, None], 8, axis=1))
    iid = (jnp.asarray(alphas * 1e6, jnp.float32), jnp.asarray((1 - alphas) * 1e6, jnp.float32))
    for c in (0.05, 0.2, 0.5):
        positional = PositionalGamma(c=c, prior_strength=1e-6)
        np.testing.assert_array_equal(
            positional.budget(equal, 8), TheoryGamma(c=c, prior_strength=1e-6).budget(iid, 8)
        )


def test_positional_update_counts_reached_and_accepted_positions():
    policy = PositionalGamma(prior_alpha=0.5, prior_strength=2.0)
    state = policy.init(5, 4)
    assert [x.shape for x in state] == [(5, 4), (5, 4)]
    np.testing.assert_allclose(policy.survival(state), 0.5)  # the prior alone
    drafted = jnp.array([4, 4, 2, 3, 4], jnp.int32)
    accepted = jnp.array([0, 4, 1, 2, 3], jnp.int32)
    active = jnp.array([True, True, True, True, False])
    reached, took = policy.update(state, drafted, accepted, active, 4)
    # Row 0 reached position 1 and was rejected there; row 1 accepted all four; row 2 drafted
    # two, accepted the first; row 3 drafted three, accepted two; row 4 is inactive.
    np.testing.assert_array_equal(
        reached, [[1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]]
    )
    np.testing.assert_array_equal(
        took, [[0, 0, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]]
    )
    np.testing.assert_allclose(policy.survival((reached, took))[2], [2 / 3, 1 / 3, 0.5, 0.5])
    decayed = PositionalGamma(decay=0.5).update((reached, took), drafted, accepted, active, 4)
    np.testing.assert_array_equal(decayed[0][1], [1.5, 1.5, 1.5, 1.5])
    np.testing.assert_array_equal(decayed[0][4], [0, 0, 0, 0])  # inactive: unchanged


def test_parse_gamma_policy():
    assert parse_gamma_policy("fixed") is None and parse_gamma_policy(None) is None
    assert parse_gamma_policy("heuristic") == HeuristicGamma()
    assert parse_gamma_policy("confidence") == ConfidenceGamma()
    assert parse_gamma_policy("confidence:0.3") == ConfidenceGamma(0.3)
    assert parse_gamma_policy("theory:0.2") == TheoryGamma(c=0.2)
    assert parse_gamma_policy("positional:0.2") == PositionalGamma(c=0.2)
    assert parse_gamma_policy("positional", target_costs=(1, 2)).target_costs == (1.0, 2.0)
    assert parse_gamma_policy("theory", target_costs=(1, 2, 3)).target_costs == (1.0, 2.0, 3.0)


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: _decoder_with(HeuristicGamma(), gamma=0), "gamma_max"),
        (lambda: AdaptiveDrafter(TARGET, GREEDY, HeuristicGamma(), 0), "gamma_max"),
        # A hand-built adaptive draft for another gamma: refused when the decoder is built.
        (
            lambda: SpeculativeDecoder(
                TARGET, AdaptiveDrafter(TARGET, GREEDY, HeuristicGamma(), 3), 4, GREEDY, CACHE_LEN
            ),
            "built for gamma_max=3, got 4",
        ),
        (lambda: ConfidenceGamma(0.0), "threshold"),
        (lambda: ConfidenceGamma(1.0), "threshold"),
        (lambda: ConfidenceGamma(1.5), "threshold"),
        (lambda: parse_gamma_policy("confidence:2"), "threshold"),
        (lambda: parse_gamma_policy("bandit"), "gamma_policy"),
        (lambda: parse_gamma_policy("confidence:x"), "gamma_policy"),
        (lambda: parse_gamma_policy("heuristic:3"), "gamma_policy.*no argument"),
        (lambda: parse_gamma_policy("fixed:3"), "gamma_policy.*no argument"),
        (lambda: PositionalGamma(c=-1), "c must"),
        (lambda: _decoder_with(PositionalGamma(target_costs=(1.0, 1.2))), "target_costs"),
        (lambda: _decoder_with(FixedGamma(5)), "gamma_max"),
        (lambda: _decoder_with(TheoryGamma(target_costs=(1.0, 1.2))), "target_costs"),
        (lambda: TheoryGamma(c=-1), "c must"),
        (lambda: TheoryGamma(prior_alpha=1.0), "prior_alpha"),
        (lambda: HeuristicGamma(initial=0), "initial"),
        (lambda: _decoder_with("heuristic"), "gamma_policy"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(build, match):
    with pytest.raises((ValueError, TypeError), match=match):
        build()


def _decoder_with(policy, gamma=GAMMA, draft=None):
    draft = drafts()["noisy_self"][0] if draft is None else draft
    return SpeculativeDecoder(TARGET, draft, gamma, GREEDY, CACHE_LEN, gamma_policy=policy)


def test_theory_with_measured_iteration_costs_maximises_tokens_per_cost():
    """With whole-iteration costs, γ_t = argmax_γ E[tokens](α̂, γ) / cost(γ), computed here
    from the paper's expected-tokens formula (theory.expected_tokens_per_iteration)."""
    alphas = np.array([0.2, 0.5, 0.7, 0.85, 0.95, 0.99])
    counts = 1e6
    state = (jnp.asarray(alphas * counts, jnp.float32), jnp.asarray((1 - alphas) * counts))
    costs = (1.0, 1.3, 1.55, 1.9, 2.4, 3.2)  # loop overhead per draft step grows with γ
    policy = TheoryGamma.from_iteration_costs(costs, prior_strength=1e-6)
    gammas = np.arange(1, 7)
    rate = theory.expected_tokens_per_iteration(alphas[:, None], gammas) / np.array(costs)
    np.testing.assert_array_equal(policy.budget(state, 6), gammas[np.argmax(rate, axis=1)])
    # Only the first gamma_max costs are read; too few of them is an error naming the field.
    np.testing.assert_array_equal(policy.budget(state, 3), gammas[np.argmax(rate[:, :3], axis=1)])
    with pytest.raises(ValueError, match="iteration_costs"):
        policy.budget(state, 7)
    for bad in ((), (1.0, -2.0), (1.0, float("nan"))):
        with pytest.raises(ValueError, match="iteration_costs"):
            TheoryGamma(iteration_costs=bad)
