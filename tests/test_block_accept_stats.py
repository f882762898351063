"""Statistical losslessness of `block_accept` on prefix-dependent p and q, and the power to see
block verification's published mistakes.

Harness: the kit's `specjax.testing.sampler`. For each case (`specjax.testing.law.make_case`:
4 tokens, p and q one row per whole prefix, γ drafts per call) 2^20 = 1,048,576 fixed-seed keys
each run a decoder of chained `block_accept` calls (vmapped, one row per key) and record the
first L = max(3, γ + 1) emitted tokens and the first call's number of accepted drafts. Per case:
  (a) chi-square of the joint of the first L tokens against the target's exact law (4^L cells);
  (b) chi-square of each position's marginal (L checks);
  (c) chi-square of the first call's num_accepted against block verification's exact law from the
      independent numpy reference (`stream_law.block_law`, drafts integrated out), so the JAX
      rule keeps exactly as many drafts as the rule should, not only a lossless number.
Any token sequence of target probability 0 appearing once fails outright. Cases: dense
prefix-dependent (γ = 2, 3), sparse supports (p and q on 2 of 4 tokens per context: often
disjoint), one-hot p, p == q, deterministic drafts (`draft_probs=None`), bfloat16 rows that do not
sum to 1, ragged rows (num_drafted = (row(context) + 1) mod (γ + 1), 0..γ). γ = 1 is the token-wise
rule (test_block_accept_exact.py shows it bit for bit), covered by test_acceptance_stats.py.

Negative controls: an independent JAX implementation of block verification with a traced bug
switch (`_reference_block`), run through the same harness, must be rejected at p < 1e-12 on the
joint (a); its bug-free setting must pass. Exact non-centralities at N = 2^20 from the
enumerated biased laws (dense prefix case, γ = 3, 255 degrees of freedom, 1e-12 critical value
447.5): h_i = b_i: lambda = 2.4e5; residual without b_τ: 4.7e3; stopping at the first failed
coin: 5.2e5 (miss probability scipy.stats.ncx2.cdf(447.5, 255, 4721) = 0 in float64). On the
sparse case (15 dof, critical value 90.0) the residual without b_τ has lambda = 1.9e4 on the
joint of 4 tokens but 5e-27 on the first two: a two-token test passes it, so (a) looks at >= 3.

False-failure budget: every check fails below 1e-6 (PVALUE_THRESHOLD). 7 cases with
L = 4 (6 checks each) + 1 with L = 3 (5 checks) + 3 control checks = 50 checks: a correct rule
fails this file with probability <= 5e-5 (Bonferroni, any dependence). Seeds are fixed, so a run
is deterministic. Compiled programs: block_accept at γ = 3 (one for all stochastic float32 cases,
ragged included: `ragged` and `num_drafted` are traced), γ = 2, deterministic, bfloat16, and one
for all settings of the reference.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest
import stream_law

from specjax.decoding import block_accept
from specjax.testing import sampler
from specjax.testing.law import make_case
from specjax.testing.stats import PVALUE_THRESHOLD

pytestmark = [pytest.mark.slow, pytest.mark.runtime_bound]  # tests/conftest.py

DETECTION_PVALUE = 1e-12

CASES = {
    c.name: c
    for c in (
        make_case("prefix", 3),
        make_case("sparse", 3),
        make_case("one_hot_p", 3),
        make_case("p_equals_q", 3),
        make_case("ragged", 3),
        make_case("prefix", 2),
        make_case("deterministic", 3),
        make_case("bf16", 3),
    )
}
SEEDS = {name: 300 + i for i, name in enumerate(CASES)}


@functools.cache
def _samples(name: str) -> sampler.StreamSamples:
    return sampler.sample_stream(CASES[name], block_accept, seed=SEEDS[name])


@pytest.mark.parametrize("name", list(CASES))
def test_emitted_stream_is_the_target_law(name):
    case = CASES[name]
    for check, result in sampler.stream_checks(case, _samples(name)).items():
        # 1 + L checks at 1e-6; file-wide false failure <= 5e-5 (module docstring).
        assert result.pvalue > PVALUE_THRESHOLD, (check, result)


@pytest.mark.parametrize("name", list(CASES))
def test_num_accepted_follows_block_verification(name):
    case = CASES[name]
    samples = _samples(name)
    result = sampler.first_n_chi2(case, samples, stream_law.block_law)
    # 1 check at 1e-6; file-wide false failure <= 5e-5 (module docstring).
    assert result.pvalue > PVALUE_THRESHOLD, result
    if case.ragged:  # the first call (empty context) drafts one token
        assert samples.first_n.max() == 1


def test_block_keeps_more_than_tokenwise_on_the_samples():
    # The designated dense case (gamma 3): exact E[n] block 1.392915 vs token-wise 1.259099; the
    # sampled mean is within 5 standard errors (sd of n <= 3/2, N = 2^20: 5 se <= 0.0074).
    n = _samples("prefix_g3").first_n
    assert abs(n.mean() - 1.392915) < 0.0074, n.mean()
    assert n.mean() > 1.259099 + 0.1


# ----------------------------------------------------------------------------- power

BUG_IDS = {None: 0, "h_is_b": 1, "residual_without_b": 2, "contiguous_prefix": 3}


def _reference_block(key, draft_tokens, draft_probs, target_probs, bug, *, num_drafted):
    """Block verification written independently of the library, with a traced bug switch.

    bug: int32 scalar, BUG_IDS: 0 correct; 1 h_i = b_i; 2 the correction residual without its
    b_τ weight; 3 τ = the position before the first failed coin. Stochastic drafts only (q > 0
    at every drafted token, as the harness's inverse CDF guarantees).
    """
    batch, gamma = draft_tokens.shape
    p = target_probs.astype(jnp.float32)
    p = p / p.sum(-1, keepdims=True)  # [batch, gamma + 1, vocab]
    q = draft_probs.astype(jnp.float32)
    q = q / q.sum(-1, keepdims=True)  # [batch, gamma, vocab]
    gather = functools.partial(jnp.take_along_axis, indices=draft_tokens[..., None], axis=-1)
    ratio = gather(p[:, :gamma])[..., 0] / gather(q)[..., 0]  # [batch, gamma]
    weights = [jnp.ones((batch,))]
    for i in range(gamma):  # b_{i+1} = min(1, b_i p/q)
        weights.append(jnp.minimum(1.0, weights[-1] * ratio[:, i]))
    b = jnp.stack(weights, axis=1)  # [batch, gamma + 1]
    rho = jnp.sum(jnp.maximum(b[:, :gamma, None] * p[:, :gamma] - q, 0.0), axis=-1)  # ρ_0..
    denom = rho + 1.0 - b[:, :gamma]
    h_rho = jnp.where(denom > 0, rho / jnp.where(denom > 0, denom, 1.0), 1.0)  # h_0..h_{γ-1}
    idx = jnp.arange(1, gamma + 1)
    mid = jnp.where(bug == 1, b[:, 1:], jnp.roll(h_rho, -1, axis=1))  # h_i at column i - 1
    d = num_drafted[:, None]
    h = jnp.where(idx < d, mid, jnp.where(idx == d, b[:, 1:], 0.0))  # [batch, gamma]
    k_eta, k_y = jax.random.split(key)
    ok = jax.random.uniform(k_eta, (batch, gamma)) < h
    tau_last = jnp.max(jnp.where(ok, idx, 0), axis=1)
    tau_contiguous = jnp.sum(jnp.cumprod(ok, axis=1), axis=1)
    tau = jnp.where(bug == 3, tau_contiguous, tau_last)  # [batch]
    rows = jnp.arange(batch)
    p_next = p[rows, tau]  # [batch, vocab]
    q_next = jnp.concatenate([q, jnp.zeros_like(q[:, :1])], axis=1)[rows, tau]
    weight = jnp.where(bug == 2, 1.0, b[rows, tau])[:, None]
    residual = jnp.maximum(weight * p_next - q_next, 0.0)
    residual = jnp.where(residual.sum(-1, keepdims=True) > 0, residual, p_next)
    dist = jnp.where((tau == num_drafted)[:, None], p_next, residual)
    y = jax.random.categorical(k_y, jnp.log(dist), axis=-1)
    pos = jnp.arange(gamma + 1)[None]
    padded = jnp.pad(draft_tokens, ((0, 0), (0, 1)))
    tokens = jnp.where(pos < tau[:, None], padded, jnp.where(pos == tau[:, None], y[:, None], -1))
    return tokens.astype(jnp.int32), tau.astype(jnp.int32)


@functools.cache
def _reference_samples(name: str, bug: str | None) -> sampler.StreamSamples:
    return sampler.sample_stream(
        CASES[name],
        _reference_block,
        seed=400 + BUG_IDS[bug],
        params=(jnp.int32(BUG_IDS[bug]),),
    )


def test_reference_without_bug_passes():
    # Control: the same reference with the switch at 0. 2 checks at 1e-6 (file budget 5e-5).
    case = CASES["prefix_g3"]
    samples = _reference_samples("prefix_g3", None)
    assert sampler.joint_chi2(case, samples).pvalue > PVALUE_THRESHOLD
    n_law = sampler.first_n_chi2(case, samples, stream_law.block_law)
    assert n_law.pvalue > PVALUE_THRESHOLD, n_law


@pytest.mark.parametrize("bug", ["h_is_b", "residual_without_b", "contiguous_prefix"])
def test_published_mistakes_are_rejected(bug):
    case = CASES["prefix_g3"]
    result = sampler.joint_chi2(case, _reference_samples("prefix_g3", bug))
    assert result.pvalue < DETECTION_PVALUE, result


def test_residual_without_b_needs_the_third_token():
    # Sparse case: exact law of the first two tokens (the 2-token check passes: 1 check at 1e-6),
    # lambda = 1.9e4 on the joint of four.
    case = CASES["sparse_g3"]
    samples = _reference_samples("sparse_g3", "residual_without_b")
    assert sampler.joint_chi2(case, samples, k=2).pvalue > PVALUE_THRESHOLD
    assert sampler.joint_chi2(case, samples).pvalue < DETECTION_PVALUE
