"""Sampled hierarchical speculation: the first three tokens follow the target's exact law.

The machinery of test_decoding_sampling.py: an 8-token vocabulary, the exact joint law of the
first three sampled tokens enumerated with the target itself (512 cells), 100,000 continuations
of one prompt (a batch of identical prompts, every row with its own randomness), and a Pearson
chi-square with sparse cells pooled (`specjax.testing.stats.pooled_chi2`). Three levels: the
1-layer gpt2 target <- the 1-layer llama draft as the middle level <- a bigram fitted on random
tokens as the small level (it disagrees with the middle model often, so many of the middle
level's tokens are residual draws: the positions where the trap lies). Outer γ = 3, inner γ = 2:
the first three tokens are one outer iteration's drafts (plus its correction) or two; and outer
γ = 1, inner γ = 2: they always span two or three outer iterations, so every sample goes
through the outer commit (the middle and small caches rolled back past the cut, the outer
correction or bonus token fed to the middle level as its next context).

Negative control: the same decoder with q = the middle level's residual norm(max(0, M - q_small))
at the positions where it emitted a residual token (`ResidualLawDrafter`) must fail the same
statistic decisively (same seed).

Measured (seed 61, 415 bins after pooling, 100,000 samples each): correct chi-square 409
(p = 0.56) at γ 3/2 and 454 (p = 0.084) at γ 1/2; biased 7138 (p = 0.0, below float64's range).
The outer α of the correct runs, 0.54, equals the 2-level target <- middle decoder's (0.53 on
as many samples): the drafts follow the middle model's law. Runtime: about 30 s of CPU time
(three programs compiled; longer in wall time on a loaded machine).

False failures: two checks of a correct decoder at PVALUE_THRESHOLD = 1e-6, each within a
factor of about 2 of its nominal level after pooling: a correct implementation fails this file
with probability below 2 x 2e-6 = 4e-6 (Bonferroni). Seeds are fixed, so the outcome is
deterministic.
"""

import jax.numpy as jnp
import numpy as np
import pytest
from test_decoding_sampling import (
    DRAFT,
    NUM_TOKENS,
    PLAIN,
    TARGET,
    counts_of,
    exact_joint,
    sample_first_tokens,
)
from test_decoding_sampling import models as models  # noqa: F401  (the fixture)

from specjax.decoding import SpeculativeDecoder, SpeculativeDrafter, residual_distribution
from specjax.testing.stats import PVALUE_THRESHOLD, pooled_chi2

pytestmark = [pytest.mark.slow, pytest.mark.runtime_bound]  # tests/conftest.py

CACHE_LEN = 12  # prompt 4 + 3 new + outer gamma <= 3 lookahead (the overshoot is dropped)
SEED = 61


class ResidualLawDrafter(SpeculativeDrafter):
    """BIASED on purpose: q = the inner residual where the middle level drew from its residual.

    A token the middle level emitted after rejecting a small-model draft is drawn from
    norm(max(0, M - q_small)); as a draft of the outer level it is still a sample of M (the
    inner level is lossless), so q = M is right and the residual is the classic mistake.
    """

    def draft_law(self, record):
        p = record.p  # [batch, inner_gamma + 1, vocab]
        n = record.num_accepted  # [batch]
        q_small = record.proposal.probs  # [batch, inner_gamma, vocab]
        pad = jnp.zeros_like(p[:, :1])  # the bonus position has no residual
        residual = residual_distribution(p, jnp.concatenate([q_small, pad], axis=1))
        position = jnp.arange(p.shape[1])[None, :]  # [1, inner_gamma + 1]
        inner_gamma = q_small.shape[1]
        rejected_here = (position == n[:, None]) & (n[:, None] < inner_gamma)
        return jnp.where(rejected_here[:, :, None], residual, p)


def _decoder(drafter_type, bigram, outer_gamma, inner_gamma):
    small, _ = bigram
    inner = SpeculativeDecoder(DRAFT, small, inner_gamma, PLAIN, CACHE_LEN, min_bucket=4)
    return SpeculativeDecoder(
        TARGET, drafter_type(inner), outer_gamma, PLAIN, CACHE_LEN, min_bucket=4
    )


def _sample(models, drafter_type, outer_gamma=3, inner_gamma=2):
    target_params, (_, middle_params), bigram = models
    decoder = _decoder(drafter_type, bigram, outer_gamma, inner_gamma)
    return sample_first_tokens(
        lambda prompts, key: decoder.generate(
            target_params,
            (middle_params, bigram[1]),
            prompts=prompts,
            key=key,
            max_new_tokens=NUM_TOKENS,
        ),
        seed=SEED,
    )


@pytest.mark.parametrize("outer_gamma, inner_gamma", [(3, 2), (1, 2)])
def test_three_levels_match_the_exact_target_joint(models, outer_gamma, inner_gamma):
    joint = exact_joint(TARGET, models[0], PLAIN)
    samples, summary = _sample(models, SpeculativeDrafter, outer_gamma, inner_gamma)
    chi2 = pooled_chi2(counts_of(samples), joint)
    # False failure <= ~2e-6 (threshold 1e-6, chi-square approximation within a factor 2).
    assert chi2.pvalue > PVALUE_THRESHOLD, chi2
    # Both branches of the outer rule, and accepted runs, are exercised.
    assert 0.1 < summary["alpha_empirical"] < 0.9, summary
    assert summary["acceptance_by_position"][-1] > 0.05, summary


def test_residual_as_draft_law_is_caught(models):
    """Negative control: q = the inner residual at residual positions fails the same test."""
    joint = exact_joint(TARGET, models[0], PLAIN)
    samples, _ = _sample(models, ResidualLawDrafter)
    chi2 = pooled_chi2(counts_of(samples), joint)
    assert chi2.pvalue < 1e-12, chi2
    assert np.all(samples >= 0)  # every row still emitted three tokens
