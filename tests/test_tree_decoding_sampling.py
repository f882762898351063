"""Sampling through the whole tree decoder: its first three tokens follow the target's exact law.

The machinery of test_decoding_sampling.py: an 8-token vocabulary, the exact joint law of the
first three sampled tokens enumerated with the target itself (512 cells), 100,000 continuations
of one prompt per case (a batch of identical prompts, every row with its own randomness), and a
Pearson chi-square with sparse cells pooled. A tree of depth 3 reaches the third token inside
one iteration, so the check covers acceptance at depths 1, 2 and 3, residuals at every depth and
the bonus token; the cases cover both sibling rules, sampled and top-k children, an unbalanced
topology, and a warper chain whose top-k / top-p cut the draft's support below the number of
children (the without-replacement fallback to uniform over untried tokens).

Negative control: the same decoder with the sibling rule mismatched (children drawn without
replacement, verified as if drawn independently) must be rejected at p < 1e-12 by the same
statistic: measured p = 2.6e-86 (the correct cases measured p = 0.098, 0.58, 0.60, 0.30).

False failures: 5 checks at P_THRESHOLD = 1e-6 (4 cases + 1 row-independence check), each within
a factor of about 2 of its nominal level after pooling: a correct decoder fails this file with
probability below 5 x 2e-6 = 1e-5 (Bonferroni). Seeds are fixed.
"""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from test_decoding_sampling import (
    CHAIN,
    NUM_TOKENS,
    P_THRESHOLD,
    PLAIN,
    TARGET,
    V,
    chi_square_pvalue,
    counts_of,
    exact_joint,
    sample_first_tokens,
)
from test_decoding_sampling import models as models  # noqa: F401  (the fixture)

from specjax.decoding import TokenTree, TreeSpeculativeDecoder, tree_accept

pytestmark = [pytest.mark.slow, pytest.mark.runtime_bound]  # tests/conftest.py

CACHE_LEN = 16  # prompt 4 + 3 new + 7 tree slots <= 16 (the models' position table)
UNBALANCED = TokenTree((-1, 0, 0, 0, 1, 1, 2, 4))  # 8 nodes, depth 3
DEEP = TokenTree((-1, 0, 0, 1, 2, 3))  # two chains of depth 3 (6 nodes)


CASES = [
    # name, draft, warper, tree, replacement, children
    ("transformer-T1-unbalanced-with", "transformer", PLAIN, UNBALANCED, True, "sample"),
    ("transformer-T1-unbalanced-without", "transformer", PLAIN, UNBALANCED, False, "sample"),
    ("bigram-chain-two-chains-without", "bigram", CHAIN, DEEP, False, "sample"),
    ("transformer-T1-top-k", "transformer", PLAIN, DEEP, True, "top_k"),
]


def _decoder(draft, warper, tree, replacement, children):
    return TreeSpeculativeDecoder(
        TARGET,
        draft,
        tree,
        warper,
        replacement=replacement,
        cache_len=CACHE_LEN,
        min_bucket=4,
        children=children,
    )


@pytest.mark.parametrize(
    "draft_name, warper, tree, replacement, children",
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_tree_decoder_matches_exact_target_joint(
    models, draft_name, warper, tree, replacement, children
):
    target_params, transformer, bigram = models
    draft, draft_params = transformer if draft_name == "transformer" else bigram
    joint = exact_joint(TARGET, target_params, warper)
    decoder = _decoder(draft, warper, tree, replacement, children)
    samples, summary = sample_first_tokens(
        lambda prompts, key: decoder.generate(
            target_params, draft_params, prompts, key, NUM_TOKENS
        ),
        seed=40 + len(tree.parents) + 2 * replacement,
    )
    # False failure <= ~2e-6 (threshold 1e-6, chi-square approximation within a factor 2).
    assert chi_square_pvalue(counts_of(samples), joint) > P_THRESHOLD
    # The case exercised deep acceptance and more than the first rank.
    hist = summary["accepted_depth_histogram"]
    assert hist[2] + hist[3] > 0, hist
    assert np.asarray(summary["accepted_rank_by_depth"])[0, 1] > 0, summary
    if draft_name == "transformer" and replacement:
        # Rows are independent: first tokens of neighbouring rows follow p1 x p1.
        p1 = joint.sum((1, 2))
        pairs = samples[0::2, 0] * V + samples[1::2, 0]
        pvalue = chi_square_pvalue(np.bincount(pairs, minlength=V * V), np.outer(p1, p1))
        assert pvalue > P_THRESHOLD  # false failure <= ~2e-6


@dataclasses.dataclass(frozen=True)
class MismatchedRule(TreeSpeculativeDecoder):
    """Negative control: children drawn without replacement, verified with SpecInfer's rule."""

    def verify(self, key, proposal, p):
        batch = proposal.tokens.shape[0]
        node_tokens = jnp.concatenate([jnp.zeros((batch, 1), jnp.int32), proposal.tokens], 1)
        probs = jnp.concatenate([jnp.zeros_like(proposal.probs[:, :1]), proposal.probs], 1)
        return tree_accept(key, self.tree, node_tokens, probs, p, replacement=True, fill_value=0)


def test_mismatched_sibling_rule_is_detected(models):
    target_params, _, bigram = models
    draft, draft_params = bigram
    joint = exact_joint(TARGET, target_params, CHAIN)
    decoder = MismatchedRule(
        TARGET, draft, DEEP, CHAIN, replacement=False, cache_len=CACHE_LEN, min_bucket=4
    )
    samples, _ = sample_first_tokens(
        lambda prompts, key: decoder.generate(
            target_params, draft_params, prompts, key, NUM_TOKENS
        ),
        seed=77,
    )
    assert chi_square_pvalue(counts_of(samples), joint) < 1e-12
