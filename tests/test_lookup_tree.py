"""Prompt lookup in token trees: `PromptLookupLM` drafting a tree, and `LookupTreeDrafter`.

Greedy tree decoding with either equals autoregressive greedy token for token: proposals are
deterministic, so the tree rule keeps the output exact whatever they are; these tests check that
the plumbing (tree masks, `valid`, commits) keeps it so, and that `LookupTreeDrafter` proposes
what its definition says on hand-built sequences. Compilation dominates: the decoders share
`decoding_setup`'s target, prompt bucket and one tree.

False failures: the one statistical check (slow; chi-square of the first three sampled tokens
against their exact enumerated joint, 100,000 samples) fails below p = 1e-6; with the chi-square
approximation accurate within a factor of 2 at that tail, a correct decoder fails it with
probability <= 2e-6. The seed is fixed, so the outcome is deterministic.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from decoding_setup import (
    CACHE_LEN,
    GREEDY,
    MAX_NEW,
    PROMPTS,
    SAMPLING,
    TARGET,
    V,
    ar_decoder,
    as_lists,
    random_params,
    target_params,
)

from specjax.decoding import (
    LookupDrafter,
    LookupTreeDrafter,
    Proposal,
    TokenTree,
    TreeSpeculativeDecoder,
)
from specjax.decoding.drafters.base import NoState
from specjax.decoding.state import init_sequences
from specjax.models import PromptLookupLM

KEY = jax.random.PRNGKey(5)
TREE = TokenTree.from_branching((2, 2, 1))  # 11 nodes: 2 children, 2 each, then 1 each


def _propose(drafter, rows, cache_len=16):
    """The drafter's proposal for hand-written rows (one jitted program per drafter)."""
    prompts = np.zeros((len(rows), cache_len), np.int32)
    for b, row in enumerate(rows):
        prompts[b, : len(row)] = row
    lengths = jnp.asarray([len(r) for r in rows], jnp.int32)
    seq = init_sequences(jnp.asarray(prompts), lengths, cache_len)
    state = drafter.init({}, jnp.asarray(prompts), lengths, cache_len)
    propose = jax.jit(drafter.propose, static_argnums=4)
    return propose({}, state, seq, KEY, drafter.tree.num_nodes - 1)


# -- PromptLookupLM as the draft of a tree (through TreeDrafter) --------------------------------


def test_greedy_tree_decoding_with_a_prompt_lookup_draft_equals_autoregressive():
    want = as_lists(ar_decoder().generate(target_params(), list(PROMPTS), KEY, MAX_NEW))
    # top_k children: the lookup's one proposal, then the lowest-numbered other tokens.
    decoder = TreeSpeculativeDecoder(
        TARGET, PromptLookupLM(V), TREE, GREEDY, cache_len=CACHE_LEN, children="top_k"
    )
    result = decoder.generate(target_params(), {}, list(PROMPTS), KEY, MAX_NEW)
    assert as_lists(result) == want
    summary = result.summary()
    assert summary["draft_calls"] == TREE.max_depth * summary["target_calls"]
    assert summary["tokens_per_iteration"] > 1.0  # some lookups were accepted


# -- LookupTreeDrafter: proposals on hand-built sequences -------------------------------------


def test_lookup_tree_drafter_children_are_distinct_followers_most_recent_first():
    rows = [
        # Root 1; (4, 1) never occurred before, so unigram 1: followed by 7 (at 2), 8 (at 5)
        # and 7 (at 8). Distinct, most recent first: 7, 8; the third child is invalid.
        # Under 7: (1, 7) occurred at 1 (-> 2) and 7 (-> 4): children 4, 2.
        # Under 8: (1, 8) occurred at 4 (-> 3): child 3, the second invalid.
        [5, 1, 7, 2, 1, 8, 3, 1, 7, 4, 1],
        # Root 4 never occurred before: nothing is proposed. (Invalid nodes hold token 0, which
        # was followed by 3 here: the children of invalid nodes must not be revived by it.)
        [0, 3, 6, 2, 6, 4],
        # Root 5: the bigram (2, 5) occurred at 0 (-> 6) and wins over unigram 5 (-> 7, 6):
        # one child 6. Under 6: (5, 6) at 1 (-> 9): one child 9.
        [2, 5, 6, 9, 5, 7, 2, 5],
    ]
    tree = TokenTree.from_branching((3, 2))  # nodes 1-3 at depth 1; 4,5 | 6,7 | 8,9 below
    proposal = _propose(LookupTreeDrafter(V, tree, max_ngram=2), rows)
    assert proposal.probs is None and proposal.num_drafted is None and proposal.calls == 0
    want_tokens = [
        [7, 8, 0, 4, 2, 3, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 0, 0],
        [6, 0, 0, 9, 0, 0, 0, 0, 0],
    ]
    want_valid = [
        [1, 1, 0, 1, 1, 1, 0, 0, 0],  # node 3 invalid, so are its children 8 and 9
        [0, 0, 0, 0, 0, 0, 0, 0, 0],
        [1, 0, 0, 1, 0, 0, 0, 0, 0],
    ]
    np.testing.assert_array_equal(proposal.tokens, want_tokens)
    np.testing.assert_array_equal(proposal.valid, np.asarray(want_valid, bool))


def test_lookup_tree_drafter_reads_each_nodes_ancestors_at_depth_three():
    # Node 1 has children 3, 4; node 2 has child 5; node 3 has child 6 (depth 3).
    tree = TokenTree((-1, 0, 0, 1, 1, 2, 3))
    rows = [
        # As above: root children 7, 8; under 7: 4, 2; under 8: 3. Under (7, 4): history
        # ... 1 7 4 1 7 4: (7, 4) occurred at 8 (-> 1): child 1.
        [5, 1, 7, 2, 1, 8, 3, 1, 7, 4, 1],
        # Root children 6 (rank 1 invalid); under 6: 9 (rank 1 invalid, so node 5 under the
        # invalid node 2 too); under (6, 9): history ... 2 5 6 9: (6, 9) at 2 (-> 5): child 5.
        [2, 5, 6, 9, 5, 7, 2, 5],
    ]
    proposal = _propose(LookupTreeDrafter(V, tree, max_ngram=2), rows)
    np.testing.assert_array_equal(proposal.tokens, [[7, 8, 4, 2, 3, 1], [6, 0, 9, 0, 0, 5]])
    np.testing.assert_array_equal(proposal.valid, [[1] * 6, [1, 0, 1, 0, 0, 1]])


def test_a_chain_shaped_lookup_tree_proposes_what_lookup_drafter_does():
    rows = [
        [1, 2, 3, 4, 5, 9, 1, 2],  # (1, 2) at 0: followers 3 4 5
        [7, 8, 9, 7, 8, 9, 7, 8],  # (7, 8) latest at 3: followers 9 7 8
    ]
    tree = TokenTree.chain(3)
    tree_proposal = _propose(LookupTreeDrafter(V, tree, max_ngram=2), rows)
    np.testing.assert_array_equal(tree_proposal.tokens, [[3, 4, 5], [9, 7, 8]])
    assert np.asarray(tree_proposal.valid).all()
    prompts = np.zeros((2, 16), np.int32)
    prompts[:, :8] = rows
    seq = init_sequences(jnp.asarray(prompts), jnp.array([8, 8]), 16)
    chain = LookupDrafter(V, max_ngram=2).propose({}, NoState(), seq, KEY, 3)
    np.testing.assert_array_equal(chain.num_drafted, [3, 3])
    np.testing.assert_array_equal(tree_proposal.tokens, chain.tokens)


def test_lookup_tree_drafter_rejects_bad_configuration():
    with pytest.raises(ValueError, match="min_ngram <= max_ngram"):
        LookupTreeDrafter(V, TREE, max_ngram=1, min_ngram=2)
    with pytest.raises(TypeError, match="TokenTree"):
        LookupTreeDrafter(V, (2, 2))
    with pytest.raises(TypeError, match="tree must be a TokenTree"):
        TreeSpeculativeDecoder(TARGET, LookupTreeDrafter(V, TREE), (2, 2, 1), GREEDY)
    with pytest.raises(ValueError, match="different tree"):
        TreeSpeculativeDecoder(TARGET, LookupTreeDrafter(V, TokenTree.chain(2)), TREE, GREEDY)
    with pytest.raises(ValueError, match="vocab mismatch"):
        TreeSpeculativeDecoder(TARGET, LookupTreeDrafter(V + 1, TREE), TREE, GREEDY)


# -- LookupTreeDrafter in TreeSpeculativeDecoder ----------------------------------------------


def _lookup_decoder(warper, target=TARGET, max_ngram=3):
    drafter = LookupTreeDrafter(V, TREE, max_ngram=max_ngram)
    return TreeSpeculativeDecoder(target, drafter, TREE, warper, cache_len=CACHE_LEN)


def test_greedy_with_lookup_tree_drafter_equals_autoregressive_greedy():
    want = as_lists(ar_decoder().generate(target_params(), list(PROMPTS), KEY, MAX_NEW))
    result = _lookup_decoder(GREEDY).generate(target_params(), {}, list(PROMPTS), KEY, MAX_NEW)
    assert as_lists(result) == want
    summary = result.summary()
    assert summary["draft_calls"] == 0
    assert summary["tokens_per_iteration"] > 1.0


# Repetitive prompts, decoded by a target that continues them: prompt lookup on bigrams. The
# drafter matches unigrams, so the target's continuation is often an older match's follower:
# after "3 1" (-> 4) in row 0 the latest 1 was followed by 2 (rank 0), an older one by 4.
REPEATS = [
    np.array(r, np.int32)
    for r in (
        [1, 2, 3, 1, 4, 5, 1, 2, 3, 1, 4, 5, 1, 2],
        [9, 8, 7, 9, 8, 6, 9, 8, 7, 9, 8, 6, 9],
        [5, 6, 5, 7, 5, 6, 5, 7, 5],
        [9],
    )
]


def test_lookup_tree_accepts_older_matches_on_repetitive_text():
    target = PromptLookupLM(V, max_ngram=2)
    want = as_lists(ar_decoder(target=target).generate({}, REPEATS, KEY, MAX_NEW))
    result = _lookup_decoder(GREEDY, target, max_ngram=1).generate({}, {}, REPEATS, KEY, MAX_NEW)
    assert as_lists(result) == want
    summary = result.summary()
    assert summary["tokens_per_iteration"] > 3.0  # of at most depth + 1 = 4
    ranks = np.asarray(result.stats.accepted_rank)  # [depth, branch]
    assert ranks[:, 1].sum() > 0  # second-ranked children (older matches) were accepted


def test_sampling_with_lookup_tree_drafter_runs_and_rows_are_valid():
    prompts = list(PROMPTS)
    result = _lookup_decoder(SAMPLING).generate(target_params(), {}, prompts, KEY, MAX_NEW)
    lengths = np.asarray(result.lengths)
    np.testing.assert_array_equal(lengths, [len(p) + MAX_NEW for p in prompts])
    tokens = np.asarray(result.tokens)
    for b, p in enumerate(prompts):
        np.testing.assert_array_equal(tokens[b, : len(p)], p)
        assert ((tokens[b, : lengths[b]] >= 0) & (tokens[b, : lengths[b]] < V)).all()
    assert not np.asarray(result.stats.nan_rows).any()
    assert result.summary()["draft_calls"] == 0


def test_a_row_with_no_valid_children_counts_no_test():
    decoder = _lookup_decoder(GREEDY)
    batch, n = 4, TREE.num_nodes
    valid = np.ones((batch, n - 1), bool)
    valid[0] = False  # row 0: nothing proposed
    valid[1, 1:] = False  # row 1: node 1 alone, which has no valid children
    proposal = Proposal(jnp.zeros((batch, n - 1), jnp.int32), None, None, NoState(), 0, valid)
    num_accepted = jnp.array([0, 1, 1, 1], jnp.int32)
    path = jnp.array([[0, -1, -1, -1], [0, 1, -1, -1], [0, 1, -1, -1], [0, 1, -1, -1]])
    active = jnp.array([True, True, True, False])
    accepted, tested, rank = decoder.acceptance_events(proposal, num_accepted, path, active)
    np.testing.assert_array_equal(tested, [[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 0, 0]])
    np.testing.assert_array_equal(accepted, [[0, 0, 0], [1, 0, 0], [1, 0, 0], [0, 0, 0]])
    np.testing.assert_array_equal(rank[:, 0], [[0, 0], [1, 0], [1, 0], [0, 0]])
    # Without `valid`, every node of this tree has children: rows 0 and 1 would count tests.
    _, all_tested, _ = decoder.acceptance_events(
        proposal.replace(valid=None), num_accepted, path, active
    )
    np.testing.assert_array_equal(all_tested, [[1, 0, 0], [1, 1, 0], [1, 1, 0], [0, 0, 0]])


@pytest.mark.slow
def test_sampling_with_lookup_tree_drafter_matches_the_exact_target_joint():
    import test_decoding_sampling as tds  # its tiny-vocabulary enumeration machinery

    params = random_params(tds.TARGET, seed=1, scale=0.25)
    joint = tds.exact_joint(tds.TARGET, params, tds.PLAIN)
    tree = TokenTree((-1, 0, 0, 1, 1, 3))  # lookahead 5: prompt 4 + 3 new + 5 = cache 12
    decoder = TreeSpeculativeDecoder(
        tds.TARGET,
        LookupTreeDrafter(tds.V, tree),
        tree,
        tds.PLAIN,
        cache_len=tds.CACHE_LEN,
        min_bucket=4,
    )
    samples, summary = tds.sample_first_tokens(
        lambda prompts, key: decoder.generate(params, {}, prompts, key, tds.NUM_TOKENS), seed=41
    )
    # False failure <= ~2e-6 (threshold 1e-6, chi-square approximation within a factor 2).
    assert tds.chi_square_pvalue(tds.counts_of(samples), joint) > tds.P_THRESHOLD
    # The prompt (3 1 4 1) has an earlier match: lookups were made and sometimes accepted.
    assert summary["sampler_tokens_per_iteration"] > 1.0
