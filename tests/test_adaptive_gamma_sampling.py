"""Sampling with an adaptive γ: the first three tokens follow the target's exact law.

The machinery of test_decoding_sampling.py: an 8-token vocabulary, the exact joint law of the
first three sampled tokens enumerated with the target itself (512 cells), 100,000 continuations
of one prompt per case (a batch of identical prompts, every row with its own randomness), and a
Pearson chi-square with sparse cells pooled. gamma_max = 3, so rows draft 1, 2 or 3 tokens, and
three tokens take one or two iterations: the second iteration's γ depends on the first's
verdict (heuristic, theory), and the confidence rule stops rows after low-probability draws.

Negative control: the confidence rule with the classic mistake, a drawn token DROPPED (not
verified) when its own q(x) is below the threshold, must be rejected at p < 1e-12 by the same
statistic, same seed as the correct confidence case: measured p = 0.0 (below float64's range;
5e-202 at threshold 0.5). The correct cases measured p = 0.66 (heuristic), 0.38 (confidence),
0.22 (theory), with drafted-length histograms [d=1, 2, 3] of [34189, 0, 10177],
[32329, 9007, 1607] and [14020, 24632, 0] row-iterations in their first 20,000-row chunk; the
heuristic through block_accept (per-row γ_t of 1 or 3) p = 0.59.
Runtime: about 65 s on the 2-core development machine (compilation of 4 programs included).

False failures: 4 checks at P_THRESHOLD = 1e-6, each within a factor of about 2 of its nominal
level after pooling: a correct implementation fails this file with probability below
4 x 2e-6 = 8e-6 (Bonferroni). Seeds are fixed, so the outcome is deterministic.
"""

import jax.numpy as jnp
import numpy as np
import pytest
from test_decoding_sampling import (
    DRAFT,
    NUM_TOKENS,
    P_THRESHOLD,
    PLAIN,
    TARGET,
    chi_square_pvalue,
    counts_of,
    exact_joint,
    sample_first_tokens,
)
from test_decoding_sampling import models as models  # noqa: F401  (the fixture)

from specjax.decoding import (
    AdaptiveDrafter,
    ConfidenceGamma,
    HeuristicGamma,
    SpeculativeDecoder,
    TheoryGamma,
    block_accept,
)

# fusion_emitters: with XLA:CPU's older emitter one program here ran for minutes (conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.runtime_bound, pytest.mark.fusion_emitters]

GAMMA_MAX = 3
CACHE_LEN = 12  # prompt 4 + 3 new + gamma_max 3 lookahead
THRESHOLD = 0.25


class DroppingDrafter(AdaptiveDrafter):
    """BIASED on purpose: drops the last drawn token when its own q(x) < THRESHOLD.

    Under `ConfidenceGamma` that is exactly the token that stopped the row: it is drawn, then
    not verified, so the verified drafts are distributed as q given q(x) >= threshold, not q.
    """

    def propose(self, params, state, seq, key, gamma):
        proposal = super().propose(params, state, seq, key, gamma)
        last = jnp.maximum(proposal.num_drafted - 1, 0)[:, None]  # [batch, 1]
        token = jnp.take_along_axis(proposal.tokens, last, axis=1)  # [batch, 1]
        q = jnp.take_along_axis(proposal.probs, last[:, :, None], axis=1)[:, 0]  # [batch, V]
        q_x = jnp.take_along_axis(q, token, axis=1)[:, 0]  # [batch]
        kept = proposal.num_drafted - (q_x < THRESHOLD).astype(jnp.int32)
        return proposal.replace(num_drafted=kept, state=proposal.state.replace(num_drafted=kept))


def _sample(models, decoder, seed):
    target_params, (_, draft_params), _ = models
    return sample_first_tokens(
        lambda prompts, key: decoder.generate(
            target_params, draft_params, prompts, key, NUM_TOKENS
        ),
        seed=seed,
    )


# Distinct seeds: with shared keys, policies that differ only where it does not change the first
# three tokens would give identical samples.
POLICIES = {
    "heuristic": (HeuristicGamma(initial=1), 40),
    "confidence": (ConfidenceGamma(THRESHOLD), 41),
    "theory": (TheoryGamma(c=0.15, prior_alpha=0.5, prior_strength=1.0), 42),
}


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_adaptive_speculative_matches_exact_target_joint(models, name):
    policy, seed = POLICIES[name]
    target_params = models[0]
    joint = exact_joint(TARGET, target_params, PLAIN)
    decoder = SpeculativeDecoder(
        TARGET, DRAFT, GAMMA_MAX, PLAIN, CACHE_LEN, min_bucket=4, gamma_policy=policy
    )
    samples, summary = _sample(models, decoder, seed=seed)
    # False failure <= ~2e-6 (threshold 1e-6, chi-square approximation within a factor 2).
    assert chi_square_pvalue(counts_of(samples), joint) > P_THRESHOLD
    # γ really varies: rows drafted 1 and more than 1 token, and were rejected and accepted.
    hist = summary["drafted_histogram"]
    assert hist[1] > 0 and sum(hist[2:]) > 0, hist
    assert 0.05 < summary["alpha_empirical"] < 0.95, summary


def test_adaptive_gamma_with_block_verification_matches_exact_target_joint(models):
    """Ragged per-row γ through block_accept (h at each row's own γ_t): still the target's law."""
    target_params = models[0]
    joint = exact_joint(TARGET, target_params, PLAIN)
    decoder = SpeculativeDecoder(
        TARGET,
        DRAFT,
        GAMMA_MAX,
        PLAIN,
        CACHE_LEN,
        min_bucket=4,
        gamma_policy=HeuristicGamma(initial=1),
        accept=block_accept,
    )
    samples, summary = _sample(models, decoder, seed=43)
    # False failure <= ~2e-6, as above.
    assert chi_square_pvalue(counts_of(samples), joint) > P_THRESHOLD
    hist = summary["drafted_histogram"]
    assert hist[1] > 0 and sum(hist[2:]) > 0, hist


def test_dropping_a_low_confidence_draw_is_caught(models):
    """Negative control: the biased stop rule must fail the same chi-square test decisively."""
    target_params = models[0]
    joint = exact_joint(TARGET, target_params, PLAIN)
    drafter = DroppingDrafter(DRAFT, PLAIN, ConfidenceGamma(THRESHOLD), GAMMA_MAX)
    decoder = SpeculativeDecoder(TARGET, drafter, GAMMA_MAX, PLAIN, CACHE_LEN, min_bucket=4)
    samples, _ = _sample(models, decoder, seed=POLICIES["confidence"][1])
    pvalue = chi_square_pvalue(counts_of(samples), joint)
    assert pvalue < 1e-12, pvalue
    # The bias is in the tokens, not a broken decoder: every row still emitted three tokens.
    assert np.all(samples >= 0)
