"""The losslessness statistics have power: they reject deliberately biased samplers decisively.

`_reference_accept` below is an independent implementation of the speculative-sampling rule with
switches that plant one bug each. Every biased sampler runs through the same machinery as
test_acceptance_stats.py (stats_util.sample_case, 2^20 samples, the same chi-square) and must be
rejected with p-value < 1e-12; the unbiased reference and `speculative_accept` itself must pass the
same statistic in the same configuration (controls), so it is the planted bug that is detected.

Power: for each bug the comment gives the exact output law f of the biased sampler and the
non-centrality lambda = N * sum((f - p)^2 / p) of Pearson's statistic at N = 2^20 samples. The
statistic is then ~ noncentral chi-square(dof, lambda), of mean dof + lambda and standard deviation
sqrt(2 (dof + 2 lambda)); the 1e-12 critical value is 70.8 for dof 7, 176.7 for dof 63, 58.9 for
dof 3. For bugs (i)-(v) the mean exceeds it by 155 to 870 standard deviations (miss probability
below 1e-300: scipy.stats.ncx2.cdf underflows to 0); for the bf16 regression by 4.3 (miss
probability 4e-8).

False-failure budget of the controls: 7 checks at p-value 1e-6 (6 controls + the (v) marginal
that the bonus bug leaves intact) -> <= 7e-6 for this file (Bonferroni).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import stats_util
from stats_util import Case

from specjax.decoding import speculative_accept
from specjax.testing.stats import PVALUE_THRESHOLD

pytestmark = [pytest.mark.slow, pytest.mark.runtime_bound]  # tests/conftest.py

# A biased sampler must be rejected at least this decisively.
DETECTION_PVALUE = 1e-12

# Hand-written configuration shared by the bugs: vocab 8, gamma 1 (so the bonus token is the second
# token of the stream when the draft is accepted). alpha = sum min(p, q) = 0.62.
P8 = np.array([0.30, 0.20, 0.15, 0.10, 0.10, 0.08, 0.05, 0.02], np.float32)
Q8 = np.array([0.10, 0.30, 0.05, 0.25, 0.05, 0.05, 0.10, 0.10], np.float32)
STOCHASTIC = Case.iid("stochastic_v8_g1", P8, Q8, Q8, 1)
# KerasHub's configuration: the draft proposes argmax q = token 1 deterministically, but the
# sampler is handed the softmax q as if the draft had sampled from it.
ARGMAX_WITH_SOFTMAX_Q = Case.iid("argmax_draft_softmax_q_v8_g1", P8, np.eye(8)[1], Q8, 1)
ARGMAX = Case.iid("argmax_draft_v8_g1", P8, np.eye(8)[1], None, 1)
# bfloat16 rows that do not sum to 1 (see test_acceptance_stats.py, case bf16_tiny_q_v4_g1).
P4_BF16 = np.array([0.705, 0.2219, 0.0494, 0.0236]).astype(jnp.bfloat16)
Q4_BF16 = np.array([0.6943, 0.2141, 0.0916, 2.29e-5]).astype(jnp.bfloat16)
BF16 = Case.iid("bf16_tiny_q_v4_g1", P4_BF16, Q4_BF16, Q4_BF16, 1)

BUGS = (
    "unnormalised_residual",
    "resample_from_p",
    "ignore_q",
    "bonus_from_residual",
    "unnormalised_rows",
)


def _reference_accept(key, draft_tokens, draft_probs, target_probs, *, bug=None):
    """Speculative sampling written independently of the library, with an optional planted bug.

    Args:
      key: PRNG key.
      draft_tokens: int [batch, gamma].
      draft_probs: [batch, gamma, vocab] q, or None for a point mass on each draft token.
      target_probs: [batch, gamma + 1, vocab] p.
      bug: None (correct) or one of BUGS:
        "unnormalised_residual": on rejection, inverse-CDF sampling of max(0, p - q) without
          dividing by its mass; the uniform falls past the CDF with probability 1 - mass and
          lands on a default token (the last one).
        "resample_from_p": on rejection, sample p instead of the residual. (Accepting with p / q
          "without the min" is this same sampler: u < p / q for u in [0, 1) already is the min.)
        "ignore_q": accept x with probability p(x), as if the draft were deterministic.
        "bonus_from_residual": when all drafts are accepted, the bonus token is drawn from the
          residual of the last draft position instead of p at the bonus position.
        "unnormalised_rows": p and q used as given (bfloat16 rows that do not sum to 1), the
          acceptance rule specjax had before normalising them.

    Returns:
      tokens int32 [batch, gamma + 1] (fill -1), num_accepted int32 [batch].
    """
    batch, gamma = draft_tokens.shape
    vocab = target_probs.shape[-1]
    p = target_probs.astype(jnp.float32)  # [batch, gamma + 1, vocab]
    if draft_probs is None:
        q = jax.nn.one_hot(draft_tokens, vocab)  # [batch, gamma, vocab]
    else:
        q = draft_probs.astype(jnp.float32)
    if bug != "unnormalised_rows":
        p = p / p.sum(-1, keepdims=True)
        q = q / q.sum(-1, keepdims=True)
    k_accept, k_next = jax.random.split(key)
    u = jax.random.uniform(k_accept, (batch, gamma))  # [batch, gamma]
    p_x = jnp.take_along_axis(p[:, :gamma], draft_tokens[..., None], -1)[..., 0]
    q_x = jnp.take_along_axis(q, draft_tokens[..., None], -1)[..., 0]
    if bug == "ignore_q":
        accepted = u < p_x
    else:
        accepted = u * q_x < p_x  # u < min(1, p / q)
    n = jnp.sum(jnp.cumprod(accepted, axis=-1), axis=-1)  # [batch]

    # q at the bonus position is 0 (sample p itself) unless the bonus bug repeats the last q.
    bonus_q = q[:, -1:] if bug == "bonus_from_residual" else jnp.zeros_like(q[:, -1:])
    q_ext = jnp.concatenate([q, bonus_q], axis=1)  # [batch, gamma + 1, vocab]
    p_n = p[jnp.arange(batch), n]  # [batch, vocab]
    q_n = q_ext[jnp.arange(batch), n]  # [batch, vocab]
    residual = jnp.maximum(p_n - q_n, 0.0)  # [batch, vocab]
    if bug == "resample_from_p":
        residual = jnp.where((n < gamma)[:, None], p_n, residual)
    if bug == "unnormalised_residual":
        cdf = jnp.cumsum(residual, axis=-1)  # [batch, vocab], ends at the residual mass
        u_next = jax.random.uniform(k_next, (batch, 1))
        next_token = jnp.minimum(jnp.sum(u_next >= cdf, axis=-1), vocab - 1)
    else:
        mass = residual.sum(-1, keepdims=True)
        residual = jnp.where(mass > 0, residual, p_n)  # p == q: rejection has probability 0
        next_token = jax.random.categorical(k_next, jnp.log(residual), axis=-1)

    positions = jnp.arange(gamma + 1)[None]
    drafted = jnp.pad(draft_tokens, ((0, 0), (0, 1)))
    tokens = jnp.where(
        positions < n[:, None], drafted, jnp.where(positions == n[:, None], next_token[:, None], -1)
    )
    return tokens.astype(jnp.int32), n.astype(jnp.int32)


@functools.cache
def _run(case_name: str, sampler: str, seed: int) -> tuple[Case, stats_util.Samples]:
    case = {c.name: c for c in (STOCHASTIC, ARGMAX_WITH_SOFTMAX_Q, ARGMAX, BF16)}[case_name]
    if sampler == "library":
        fn = speculative_accept
    else:
        fn = functools.partial(_reference_accept, bug=None if sampler == "correct" else sampler)
    return case, stats_util.sample_case(case, fn, seed=seed)


def _first(case_name, sampler, seed=7):
    case, samples = _run(case_name, sampler, seed)
    return stats_util.first_token_chi2(case, samples)


def _first_two(case_name, sampler, seed=7):
    case, samples = _run(case_name, sampler, seed)
    return stats_util.first_two_chi2(case, samples)


@pytest.mark.parametrize("sampler", ["correct", "library"])
def test_controls_pass(sampler):
    # 4 checks at 1e-6 (2 samplers x 2 statistics); file-wide false failure <= 7e-6.
    assert _first("stochastic_v8_g1", sampler).pvalue > PVALUE_THRESHOLD
    assert _first_two("stochastic_v8_g1", sampler).pvalue > PVALUE_THRESHOLD


def test_control_deterministic_argmax_draft_passes():
    # Correct use of a greedy draft: draft_probs=None (point mass). 1 check at 1e-6.
    assert _first("argmax_draft_v8_g1", "library").pvalue > PVALUE_THRESHOLD


def test_detects_keras_hub_softmax_q_for_argmax_draft():
    # (i) The draft proposes token 1 = argmax q deterministically, but the rule is told q = softmax,
    # so token 1 is accepted with min(1, 0.2 / 0.3) = 2/3 instead of p(1) = 0.2, and a rejection
    # resamples norm(max(0, p - q)): f = [0.175, 0.667, 0.088, 0, 0.044, 0.026, 0, 0];
    # lambda = 1.47e6 (dof 7).
    result = _first("argmax_draft_softmax_q_v8_g1", "correct")
    assert result.pvalue < DETECTION_PVALUE, result
    # The same configuration with the correct call (draft_probs=None) passes:
    # test_control_deterministic_argmax_draft_passes.


def test_detects_unnormalised_residual():
    # (ii) Rejections (prob 1 - alpha = 0.38) fall through the unnormalised CDF (mass 0.38) with
    # probability 0.62 onto token 7: f(7) = 0.02 + 0.38 * 0.62 = 0.256 vs p(7) = 0.02;
    # lambda = 3.0e6 (dof 7).
    result = _first("stochastic_v8_g1", "unnormalised_residual")
    assert result.pvalue < DETECTION_PVALUE, result


def test_detects_resample_from_p():
    # (iii) f = min(p, q) + 0.38 p: f(0) = 0.1 + 0.114 = 0.214 vs p(0) = 0.3; lambda = 9.6e4
    # (dof 7).
    result = _first("stochastic_v8_g1", "resample_from_p")
    assert result.pvalue < DETECTION_PVALUE, result


def test_detects_acceptance_ignoring_q():
    # (iv) Drafts drawn from q accepted with probability p(x): f = q p + (1 - sum q p) norm(max(0,
    # p - q)) = [0.483, 0.06, 0.234, 0.025, 0.118, 0.072, 0.005, 0.002]; lambda = 3.9e5 (dof 7).
    result = _first("stochastic_v8_g1", "ignore_q")
    assert result.pvalue < DETECTION_PVALUE, result


def test_detects_bonus_from_residual_only_in_the_stream():
    # (v) With gamma = 1 the bonus is the second emitted token after an accepted draft (prob 0.62);
    # drawing it from norm(max(0, p - q)) = [0.526, 0, 0.263, 0, 0.132, 0.079, 0, 0] instead of p
    # changes the joint law of the first two tokens (lambda = 3.2e5, dof 63) but not the first
    # token's, so (a) alone is blind to it and (b) catches it.
    marginal = _first("stochastic_v8_g1", "bonus_from_residual")
    # 1 check at 1e-6 (the first token is still exactly p); file-wide false failure <= 7e-6.
    assert marginal.pvalue > PVALUE_THRESHOLD, marginal
    joint = _first_two("stochastic_v8_g1", "bonus_from_residual")
    assert joint.pvalue < DETECTION_PVALUE, joint


def test_detects_unnormalised_bf16_rows():
    # (vi) bf16 rows of p and q sum to 0.9977 and 1.0010; the rule without renormalisation (specjax
    # before the fix) gives f = [0.7031, 0.2221, 0.0493, 0.0255] vs normalised p = [0.7048, 0.2222,
    # 0.0494, 0.0236]: lambda = 168 at 2^20 samples (dof 3), chi-square ~ 171 +- 26 vs the 1e-12
    # critical value 58.9 (miss probability scipy.stats.ncx2.cdf(58.9, 3, 168) = 4e-8).
    result = _first("bf16_tiny_q_v4_g1", "unnormalised_rows")
    assert result.pvalue < DETECTION_PVALUE, result
    # Control: the library (which renormalises) passes in the same configuration, 1 check at 1e-6.
    assert _first("bf16_tiny_q_v4_g1", "library").pvalue > PVALUE_THRESHOLD
