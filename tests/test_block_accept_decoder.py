"""`SpeculativeDecoder(..., accept=block_accept)`: the rule plugged into a real decoder.

(a) Greedy: the output equals the target's autoregressive greedy continuation token for token
(tests/decoding_setup.py models; a noisy copy of the target as draft, so rows reject at different
positions and roll back by different amounts). (b) Sampling: on test_decoding_sampling.py's
8-token transformer pair at temperature 1 with γ = 2, 100,000 continuations of one prompt; the
joint of the first three generated tokens against the exact target joint (enumerated with one
forward pass), chi-square threshold 1e-6 (1 check: false failure <= ~2e-6).
"""

from __future__ import annotations

import jax
import pytest
import test_decoding_sampling as sampling
from decoding_setup import (
    CACHE_LEN,
    GAMMA,
    GREEDY,
    MAX_NEW,
    PROMPTS,
    TARGET,
    ar_decoder,
    as_lists,
    drafts,
    random_params,
    target_params,
)

from specjax.decoding import SpeculativeDecoder, block_accept


def test_greedy_block_decoder_equals_autoregressive():
    draft, draft_params = drafts()["noisy_self"]
    reference = ar_decoder().generate(target_params(), list(PROMPTS), jax.random.key(0), MAX_NEW)
    spec = SpeculativeDecoder(
        TARGET, draft, GAMMA, GREEDY, cache_len=CACHE_LEN, accept=block_accept
    )
    result = spec.generate(target_params(), draft_params, list(PROMPTS), jax.random.key(1), MAX_NEW)
    assert as_lists(result) == as_lists(reference)
    assert 0.2 < result.summary()["alpha_empirical"] < 0.9  # rows reject at different points


@pytest.mark.slow
def test_sampled_block_decoder_matches_exact_target_joint():
    target_params_ = random_params(sampling.TARGET, seed=1, scale=0.25)
    draft_params = random_params(sampling.DRAFT, seed=5, scale=0.25)
    joint = sampling.exact_joint(sampling.TARGET, target_params_, sampling.PLAIN)
    decoder = SpeculativeDecoder(
        sampling.TARGET,
        sampling.DRAFT,
        2,
        sampling.PLAIN,
        cache_len=sampling.CACHE_LEN,
        min_bucket=4,
        accept=block_accept,
    )
    samples, summary = sampling.sample_first_tokens(
        lambda prompts, key: decoder.generate(
            target_params_, draft_params, prompts, key, sampling.NUM_TOKENS
        ),
        seed=31,
    )
    # 1 check at 1e-6: false failure <= ~2e-6.
    pvalue = sampling.chi_square_pvalue(sampling.counts_of(samples), joint)
    assert pvalue > sampling.P_THRESHOLD, pvalue
    assert 0.1 < summary["alpha_empirical"] < 0.9, summary
    assert summary["acceptance_by_position"][-1] > 0.05, summary
    # Power: the draft's own joint is rejected by the same samples.
    draft_joint = sampling.exact_joint(sampling.DRAFT, draft_params, sampling.PLAIN)
    assert sampling.chi_square_pvalue(sampling.counts_of(samples), draft_joint) < 1e-12
