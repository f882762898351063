"""`speculative_accept(..., num_drafted=...)`: rows that drafted fewer than γ tokens stay exact.

A row that drafted d < γ tokens (a prompt-lookup miss, an adaptive γ) must never accept a
position >= d, and when it accepts all d its extra token is the bonus from p_{d+1} (target row d),
not a residual against the padding draft at that position.

Exact checks (hand-written distributions) come first. The statistical checks reuse the chain
suite's machinery (`stats_util`, 2^20 = 1,048,576 fixed-seed samples per case): for each case
(a) chi-square of the first emitted token against p_1, (b) of the first two tokens of the stream
(two consecutive calls) against p_1 x p_2, (c) chi-square of the number of accepted drafts
against its law truncated at d, plus an exact check that it never exceeds d, and (d) chi-square
of the token after d accepted drafts against p_{d+1}. 5 cases x 4 chi-square checks = 20 checks
at p < 1e-6 each: a correct rule fails this file with probability <= 2e-5 (Bonferroni).

Negative controls (each must be rejected at p < 1e-12, far below the 1e-6 threshold): the rule
with the bonus drawn from the residual against the padding draft (the static-shape trap of
ALGORITHMS.md §2), and the rule that ignores num_drafted when accepting.

Compiled sampling programs: 3, one per case shape (positional v16 γ = 3, its deterministic-draft
variant, Dirichlet v8 γ = 5); the drafted count and the negative controls' variant are traced.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import stats_util
from stats_util import Case

from specjax.decoding import residual_distribution, sample_from_probs, speculative_accept
from specjax.testing import sampler
from specjax.testing.stats import PVALUE_THRESHOLD, pooled_chi2

pytestmark = pytest.mark.runtime_bound  # sampling dominates: tests/conftest.py


def _f32(x) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return (x / x.sum(-1, keepdims=True)).astype(np.float32)


# -- exact -------------------------------------------------------------------------------------


def _random_case(seed, batch=6, gamma=4, vocab=16):
    rng = np.random.default_rng(seed)
    p = jnp.asarray(_f32(rng.dirichlet(np.ones(vocab), (batch, gamma + 1))))
    q = jnp.asarray(_f32(rng.dirichlet(np.ones(vocab), (batch, gamma))))
    tokens = jnp.asarray(rng.integers(0, vocab, (batch, gamma)), jnp.int32)
    return tokens, q, p


def test_num_drafted_equal_to_gamma_is_bit_identical_to_none():
    tokens, q, p = _random_case(0)
    key = jax.random.PRNGKey(3)
    full = jnp.full((tokens.shape[0],), tokens.shape[1], jnp.int32)
    for probs in (q, None):
        want = speculative_accept(key, tokens, probs, p)
        got = speculative_accept(key, tokens, probs, p, num_drafted=full)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_positions_past_num_drafted_are_never_accepted_and_the_bonus_is_at_the_rows_length():
    # p == q everywhere: every drafted token is accepted with probability 1. p at target row k is
    # a point mass on token 10 + k, so the token after the accepted drafts names the row it came
    # from: a row that drafted d must emit its d drafts, then exactly 10 + d.
    gamma, vocab = 4, 16
    num_drafted = jnp.array([0, 1, 2, 3, 4], jnp.int32)
    batch = num_drafted.shape[0]
    point = np.eye(vocab, dtype=np.float32)[10 + np.arange(gamma + 1)]  # [gamma + 1, vocab]
    p = jnp.asarray(np.broadcast_to(point, (batch, gamma + 1, vocab)))
    drafted = jnp.broadcast_to(10 + jnp.arange(gamma), (batch, gamma)).astype(jnp.int32)
    for probs in (p[:, :gamma], None):  # stochastic q == p, and point-mass drafts
        for seed in range(5):
            tokens, n = speculative_accept(
                jax.random.PRNGKey(seed), drafted, probs, p, num_drafted=num_drafted
            )
            np.testing.assert_array_equal(n, num_drafted)
            for b, d in enumerate(np.asarray(num_drafted)):
                np.testing.assert_array_equal(tokens[b, : d + 1], 10 + np.arange(d + 1))
                assert (np.asarray(tokens[b, d + 1 :]) == -1).all()


def test_a_row_that_drafted_nothing_emits_one_target_sample():
    tokens, q, p = _random_case(1, batch=4096, gamma=2, vocab=4)
    none = jnp.zeros((tokens.shape[0],), jnp.int32)
    out, n = speculative_accept(jax.random.PRNGKey(0), tokens, q, p, num_drafted=none)
    assert (np.asarray(n) == 0).all()
    # Its token is a draw from p at target row 0, from the same key as sampling it directly.
    _, key_sample = jax.random.split(jax.random.PRNGKey(0))
    want = sample_from_probs(key_sample, p[:, 0])
    np.testing.assert_array_equal(out[:, 0], want)


@pytest.mark.parametrize(
    "num_drafted, message",
    [
        (jnp.array([0, 5], jnp.int32), r"num_drafted must lie in \[0, gamma=4\]"),
        (jnp.array([-1, 2], jnp.int32), r"num_drafted must lie in \[0, gamma=4\]"),
        (jnp.array([1, 2, 3], jnp.int32), r"num_drafted must have shape \[batch\] = \[2\]"),
        (jnp.array([[1], [2]], jnp.int32), r"num_drafted must have shape \[batch\]"),
    ],
)
def test_bad_num_drafted_raises_naming_it(num_drafted, message):
    tokens, q, p = _random_case(2, batch=2)
    with pytest.raises(ValueError, match=message):
        speculative_accept(jax.random.PRNGKey(0), tokens, q, p, num_drafted=num_drafted)


def test_float_num_drafted_is_rejected():
    tokens, q, p = _random_case(2, batch=2)
    with pytest.raises(TypeError, match="num_drafted must be an integer array"):
        speculative_accept(jax.random.PRNGKey(0), tokens, q, p, num_drafted=jnp.ones(2))


def test_new_num_drafted_values_do_not_retrace():
    tokens, q, p = _random_case(3)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def run(key, num_drafted):
        return speculative_accept(key, tokens, q, p, num_drafted=num_drafted)

    for d in range(5):
        run(jax.random.PRNGKey(d), jnp.full((tokens.shape[0],), d, jnp.int32))


# -- statistical -------------------------------------------------------------------------------


MODES = {"exact": 0, "residual_bonus": 1, "ignore": 2}


def _ragged_accept(key, draft_tokens, draft_probs, target_probs, drafted, mode):
    """The rule with every row drafting `drafted` of its gamma tokens.

    `drafted` and `mode` are traced int32 scalars (the sampler's `params`), so every case of one
    shape and its negative controls share one compiled program. `mode` (MODES) selects a biased
    variant for the negative controls: "residual_bonus" draws the token after d accepted drafts
    from norm(max(p_d - q_d, 0)) (q_d: the padding draft's row) instead of p_d; "ignore" does
    not tell the rule about the row's num_drafted: it passes num_drafted = gamma, which
    test_num_drafted_equal_to_gamma_is_bit_identical_to_none shows is the rule without it.
    """
    batch, gamma = draft_tokens.shape
    num = jnp.where(mode == MODES["ignore"], gamma, drafted)
    num = jnp.full((batch,), num, jnp.int32)  # [batch]
    tokens, n = speculative_accept(key, draft_tokens, draft_probs, target_probs, num_drafted=num)

    def residual_bonus(tokens):
        q_d = (
            draft_probs[:, drafted]
            if draft_probs is not None
            else jax.nn.one_hot(draft_tokens[:, drafted], target_probs.shape[-1])
        )  # [batch, vocab]
        biased = sample_from_probs(
            jax.random.fold_in(key, 99), residual_distribution(target_probs[:, drafted], q_d)
        )  # [batch]
        return tokens.at[:, drafted].set(jnp.where(n == drafted, biased, tokens[:, drafted]))

    # `mode` is not batched by the sampler's vmap: the branch not taken is not run.
    tokens = jax.lax.cond(mode == MODES["residual_bonus"], residual_bonus, lambda t: t, tokens)
    return tokens, n


def _cases():
    rng = np.random.default_rng(7)
    pos_p = _f32(rng.dirichlet(np.ones(16), 5))  # [gamma + 2, vocab], gamma = 3
    pos_q = _f32(rng.dirichlet(np.ones(16), 4))  # [gamma + 1, vocab]
    pos_argmax = np.eye(16, dtype=np.float32)[np.argmax(pos_p, -1)[:4]]
    dir_p, dir_q = (_f32(rng.dirichlet(np.full(8, 0.5))) for _ in range(2))
    return {
        # (case, drafted)
        "positional_d0": (Case("positional_v16_g3", pos_p, pos_q, pos_q, 3), 0),
        "positional_d1": (Case("positional_v16_g3", pos_p, pos_q, pos_q, 3), 1),
        "positional_d2": (Case("positional_v16_g3", pos_p, pos_q, pos_q, 3), 2),
        "deterministic_d1": (Case("positional_det_v16_g3", pos_p, pos_argmax, None, 3), 1),
        "dirichlet_v8_g5_d3": (Case.iid("dirichlet_v8_g5", dir_p, dir_q, dir_q, 5), 3),
    }


CASES = _cases()


def _samples(name, mode="exact"):
    """stats_util.sample_case's draws (2^20 keys, two chained calls) of the case's rule."""
    case, drafted = CASES[name]
    drawn = sampler.sample_stream(
        case.as_kit_case(),
        _ragged_accept,
        seed=100 + list(CASES).index(name),
        params=(jnp.int32(drafted), jnp.int32(MODES[mode])),
        pass_drafted=False,
        num_samples=stats_util.NUM_SAMPLES,
    )
    return stats_util.Samples(drawn.streams, drawn.first_n, drawn.first_call)


def _after_drafts_chi2(case, drafted, samples):
    """Chi-square of the first call's token at index d, among rows that accepted all d drafts,
    against p_{d+1} (target row d): the bonus drawn at the row's own length."""
    rows = samples.num_accepted == drafted
    counts = np.bincount(samples.first_call[rows, drafted], minlength=case.vocab)
    stats_util.assert_impossible_never_drawn(counts, case.p[drafted], f"{case.name} bonus")
    return pooled_chi2(counts, case.p[drafted])


@pytest.fixture(scope="module")
def samples():
    return {name: _samples(name) for name in CASES}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_ragged_rows_emit_target_tokens(samples, name):
    case, drafted = CASES[name]
    s = samples[name]
    # (a), (b): threshold 1e-6 per check; file-wide false failure <= 2e-5 (module docstring).
    first = stats_util.first_token_chi2(case, s)
    assert first.pvalue > PVALUE_THRESHOLD, first
    two = stats_util.first_two_chi2(case, s)
    assert two.pvalue > PVALUE_THRESHOLD, two
    # (c) exact: never more than d accepted; then the law of n, truncated at d.
    assert s.num_accepted.max() <= drafted
    pmf = stats_util.num_accepted_pmf(case.alphas[:drafted])  # [drafted + 1]
    law = pooled_chi2(np.bincount(s.num_accepted, minlength=drafted + 1), pmf)
    assert law.pvalue > PVALUE_THRESHOLD, law
    # (d) the token after d accepted drafts follows p_{d+1}.
    bonus = _after_drafts_chi2(case, drafted, s)
    assert bonus.pvalue > PVALUE_THRESHOLD, bonus


@pytest.mark.slow
def test_negative_control_bonus_from_the_padding_residual_is_caught():
    # Rows that drafted 2 of 3 (positional Dirichlet, q != p at row 2): drawing their bonus from
    # norm(max(p_3 - q_3, 0)) instead of p_3 is biased. Measured: chi-square 1.7e5 on 15 degrees
    # of freedom (p-value 0.0 in float64); the exact rule's p-values here are 0.07-0.97.
    case, drafted = CASES["positional_d2"]
    biased = _samples("positional_d2", mode="residual_bonus")
    assert _after_drafts_chi2(case, drafted, biased).pvalue < 1e-12


@pytest.mark.slow
def test_negative_control_ignoring_num_drafted_is_caught():
    # Accepting padding positions: n exceeds d in many rows (measured: 20 % of them).
    case, drafted = CASES["positional_d1"]
    biased = _samples("positional_d1", mode="ignore")
    assert (biased.num_accepted > drafted).mean() > 0.05
