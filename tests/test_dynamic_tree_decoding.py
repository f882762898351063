"""EAGLE-2's dynamic trees decoding: lossless at t > 0, equal to AR at t = 0 (the traced topology
and the node selection: tests/test_dynamic_tree.py).

* `check_decoder` (the kit) on a tiny Llama-shaped target (vocab 5) with an untrained EAGLE head
  (a poor but arbitrary draft) at t = 1 and under a top-k warper: 2^14 rows per prompt, two
  prompts; false-failure rate the kit's Bonferroni bound, 11 checks x 1e-6, about 1.1e-5 each.
* The planted bug of the issue (Sequoia's without-replacement rule applied to the pruned tree,
  with each node's parent q) must fail the same check (same draws, prompts and threshold).
* t = 0: token-for-token equal to the autoregressive decoder, with acceptances past the first
  rank and past the first depth (the tree is used); the features gathered along the dynamic paths
  equal the target's hidden states; the step compiles once for every tree the rows draw, and rows
  draw different trees in one call.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import testing
from specjax.decoding import AutoregressiveDecoder, TreeSpeculativeDecoder, make_warper
from specjax.decoding.loop import init_jit, step_jit
from specjax.decoding.prompts import pad_prompts
from specjax.decoding.trees.dynamic import DynamicTree
from specjax.decoding.trees.eagle_dynamic import EagleDynamicTreeDrafter
from specjax.models import EagleHead
from tests.heads_setup import tiny_llama

T1 = make_warper(1.0)
T0 = make_warper(0.0)
TREE = DynamicTree(depth=3, top_k=3, num_nodes=8)  # 21 candidates, 7 kept
pytestmark = pytest.mark.runtime_bound  # tests/conftest.py: sampling 2^14 rows per prompt


def _decoder(vocab=5, warper=T1, seed=0, tree=TREE, draft=None):
    target, tp = tiny_llama(vocab, seed)
    head = EagleHead(target)
    hp = head.init_params(jax.random.PRNGKey(seed + 7))
    hp = jax.tree.map(lambda x: x * 4.0 if x.ndim == 2 else x, hp)
    dec = TreeSpeculativeDecoder(target, head if draft is None else draft(head, warper, tree),
                                 tree, warper, replacement=False, cache_len=32)  # fmt: skip
    return dec, tp, hp, target


def test_decoder_takes_a_dynamic_tree_only_from_a_head():
    dec, _, _, target = _decoder()
    assert isinstance(dec.drafter, EagleDynamicTreeDrafter)
    assert dec.lookahead == 7 and dec.depth == 3 and dec.branch == 3
    with pytest.raises(ValueError, match="a model draft takes a static TokenTree"):
        TreeSpeculativeDecoder(target, target, TREE, T1, cache_len=32)
    with pytest.raises(ValueError, match="children='sample'"):
        TreeSpeculativeDecoder(target, EagleHead(target), TREE, T1, children="sample")


@pytest.mark.parametrize("warper", [T1, make_warper(0.8, top_k=3)], ids=["t1", "t0.8-top3"])
def test_dynamic_tree_is_lossless(warper):
    dec, tp, hp, _ = _decoder(warper=warper)
    report = testing.check_decoder(dec, tp, hp, draws=1 << 14, prompts=((2,), (1, 4, 3)))
    print(report)
    assert report.passed


class _SequoiaOnPrunedTree(EagleDynamicTreeDrafter):
    """Planted bug: reports each node's parent q, so the decoder verifies the pruned tree with
    Sequoia's rule for children sampled without replacement."""

    parent_q = True


def test_sequoias_rule_on_a_pruned_tree_is_caught():
    """Negative control for the test above (same draws, prompts and threshold)."""
    dec, tp, hp, _ = _decoder(draft=_SequoiaOnPrunedTree)
    report = testing.check_decoder(dec, tp, hp, draws=1 << 14, prompts=((2,), (1, 4, 3)))
    print(report)
    assert not report.passed


def test_greedy_equals_autoregressive():
    dec, tp, hp, target = _decoder(vocab=5, warper=T0, seed=3)
    prompts = [np.array([1, 2, 3, 4, 0]), np.array([3]), np.array([3, 3, 4, 1])] * 4
    key = jax.random.PRNGKey(0)
    ar = AutoregressiveDecoder(target, T0, cache_len=32).generate(
        tp, prompts=prompts, key=key, max_new_tokens=16
    )
    sp = dec.generate(tp, hp, prompts=prompts, key=key, max_new_tokens=16)
    for a, b in zip(ar.new_tokens(), sp.new_tokens(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert int(np.asarray(sp.stats.accepted_rank).sum()) > 0  # drafts were accepted


def test_features_follow_the_dynamic_paths_in_one_program():
    """At t = 1 (point masses accepted with probability p): paths go deeper than one node and
    through later ranks; the features the head holds equal the target's hidden states."""
    dec, tp, hp, target = _decoder(vocab=5, warper=T1, seed=3)
    prompts = [np.array([1, 2, 3, 4, 0]), np.array([3]), np.array([3, 3, 4, 1])] * 4
    tokens, lengths = pad_prompts(prompts, 5)
    key = jax.random.PRNGKey(0)
    s = init_jit(dec, (tp, hp), jnp.asarray(tokens), jnp.asarray(lengths), key, 14, -1)
    programs = step_jit._cache_size()
    for _ in range(4):
        s = step_jit(dec, (tp, hp), s)
        assert step_jit._cache_size() == programs + 1  # one program for every tree
    rank = np.asarray(s.stats.accepted_rank)  # [depth, branch]
    assert rank[:, 1:].sum() > 0 and rank[1:].sum() > 0  # later ranks, deeper nodes
    _, d_state = s.model_states
    hidden = target.forward(tp, target.init_state(12, 32), s.seq.tokens, s.seq.lengths).hidden
    for b, length in enumerate(np.asarray(s.seq.lengths)):
        np.testing.assert_allclose(
            d_state.feats[b, : length - 1], hidden[b, : length - 1], rtol=2e-5, atol=2e-5
        )
    proposal = dec.drafter.propose((tp, hp), d_state, s.seq, key, dec.lookahead)
    assert len({tuple(row) for row in np.asarray(proposal.parents)}) > 1  # per-row trees


def test_a_reduced_draft_vocabulary_ranks_as_the_full_row():
    """With draft_ids the top-k is taken over the N ids: the same scores, tokens and order as
    over the full row (-inf outside them), including ties; greedy decoding stays AR's."""
    target, tp = tiny_llama(11)
    head = EagleHead(target, draft_ids=(0, 2, 3, 5, 7, 8))
    hp = head.with_target_columns(head.init_params(jax.random.PRNGKey(7)), tp)
    hp = dict(hp, lm_head=jnp.round(hp["lm_head"] * 4.0))  # rounded columns: tied logits
    drafter = EagleDynamicTreeDrafter(head, T1, TREE)
    feats = jnp.round(jax.random.normal(jax.random.PRNGKey(1), (64, 3, 16)))
    scores, tokens, _ = drafter._top_k((tp, hp), feats, 3)
    full = jax.nn.log_softmax(head.logits(tp, hp, feats), axis=-1)
    want_scores, want_tokens = jax.lax.top_k(jnp.minimum(full, 0.0), 3)
    np.testing.assert_array_equal(np.asarray(tokens), np.asarray(want_tokens))
    np.testing.assert_allclose(np.asarray(scores), np.asarray(want_scores), rtol=1e-6, atol=1e-6)
    sub = np.asarray(feats @ hp["lm_head"])
    assert (np.sort(sub, -1)[..., -1] == np.sort(sub, -1)[..., -2]).any()  # ties occurred

    dec = TreeSpeculativeDecoder(target, head, TREE, T0, cache_len=32)
    prompts = [np.array([1, 2, 3, 4, 0]), np.array([3]), np.array([3, 3, 4, 1])]
    key = jax.random.PRNGKey(0)
    ar = AutoregressiveDecoder(target, T0, cache_len=32).generate(
        tp, prompts=prompts, key=key, max_new_tokens=12
    )
    sp = dec.generate(tp, hp, prompts=prompts, key=key, max_new_tokens=12)
    for a, b in zip(ar.new_tokens(), sp.new_tokens(), strict=True):
        np.testing.assert_array_equal(a, b)
