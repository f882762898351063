"""EAGLE-2's dynamic trees decoding: lossless at t > 0, equal to AR at t = 0 (the traced topology
and the node selection: tests/test_dynamic_tree.py).

* `check_decoder` (the kit) on a tiny Llama-shaped target (vocab 5) with an untrained EAGLE head
  (a poor but arbitrary draft) at t = 1 and under a top-k warper: 2^14 rows per prompt, two
  prompts side by side in every call (`mixed=True`); false-failure rate the kit's Bonferroni
  bound, 11 checks x 1e-6, about 1.1e-5 each.
* The planted bug of the issue (Sequoia's without-replacement rule applied to the pruned tree,
  with each node's parent q) must fail the same check (same draws, prompts and threshold); the
  decoder itself refuses draft probs for a dynamic tree.
* The head's tree pass gives every candidate the score a sequential pass along its path gives
  (slots, positions, ancestor masks), up to the smallest cache `generate` accepts, including a
  budget whose head writes more slots than the tree has nodes.
* t = 0: token-for-token equal to the autoregressive decoder, with acceptances past the first
  rank and past the first depth (the tree is used); the features gathered along the dynamic paths
  equal the target's hidden states; the step compiles once for every tree the rows draw, and rows
  draw different trees in one call.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from decoding_setup import DRAFT_NAN, nan_params

from specjax import testing
from specjax.decoding import AutoregressiveDecoder, TreeSpeculativeDecoder, make_warper
from specjax.decoding.loop import init_jit, step_jit
from specjax.decoding.prompts import pad_prompts
from specjax.decoding.trees.dynamic import DynamicTree, select_nodes
from specjax.decoding.trees.eagle_dynamic import EagleDynamicTreeDrafter
from specjax.models import EagleHead
from specjax.models.kv_cache import rollback
from specjax.testing import tiny_llama

T1 = make_warper(1.0)
T0 = make_warper(0.0)
TREE = DynamicTree(depth=3, top_k=3, num_nodes=8)  # 21 candidates, 7 kept


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
    wide = DynamicTree(depth=2, top_k=6, num_nodes=8)  # vocab 5: a raw top_k error before
    with pytest.raises(ValueError, match=r"tree.top_k=6 exceeds the vocabulary \(5 tokens\)"):
        TreeSpeculativeDecoder(target, EagleHead(target), wide, T1, replacement=False)


@pytest.mark.runtime_bound  # tests/conftest.py: 21 s at level 1 vs 25 s at level 0 (t0.8)
@pytest.mark.parametrize("warper", [T1, make_warper(0.8, top_k=3)], ids=["t1", "t0.8-top3"])
def test_dynamic_tree_is_lossless(warper):
    dec, tp, hp, _ = _decoder(warper=warper)
    report = testing.check_decoder(
        dec, tp, hp, draws=1 << 14, prompts=((2,), (1, 4, 3)), mixed=True
    )
    print(report)
    assert report.passed


@pytest.mark.runtime_bound  # as above; the t = 1 decoder's program, reused
def test_a_dynamic_tree_stops_at_eos_as_the_target_does():
    """Rows end at EOS (`eos_id=0`): the stopped stream must follow the target's stream cut
    after its first EOS (the kit's `stop_law`), with the rows of both prompts side by side.
    10 checks at 1e-6: false failure <= 1e-5."""
    dec, tp, hp, _ = _decoder()
    report = testing.check_decoder(
        dec, tp, hp, draws=1 << 14, prompts=((2,), (1, 4, 3)), mixed=True, eos_id=0,
        greedy=False,
    )  # fmt: skip
    print(report)
    assert report.passed


class _SequoiaOnPrunedTree(EagleDynamicTreeDrafter):
    """Planted bug, drafter half: reports each node's parent q."""

    parent_q = True


class _SequoiaVerifier(TreeSpeculativeDecoder):
    """Planted bug, decoder half: verifies the pruned tree with Sequoia's rule for children
    sampled without replacement (the decoder itself refuses probs for a DynamicTree)."""

    def verify(self, key, proposal, p):
        return self.verify_tree(key, proposal, p)


def test_sequoias_rule_on_a_pruned_tree_is_caught():
    """Negative control for the test above (same draws, prompts and threshold)."""
    dec, tp, hp, _ = _decoder(draft=_SequoiaOnPrunedTree)
    with pytest.raises(ValueError, match="reported draft probs for a DynamicTree"):
        dec.generate(tp, hp, prompts=[[2]], key=jax.random.PRNGKey(0), max_new_tokens=2)
    dec = _SequoiaVerifier(**{f.name: getattr(dec, f.name) for f in dataclasses.fields(dec)})
    report = testing.check_decoder(dec, tp, hp, draws=1 << 14, prompts=((2,), (1, 4, 3)))
    print(report)
    assert not report.passed


PROMPTS = [np.array([1, 2, 3, 4, 0]), np.array([3]), np.array([3, 3, 4, 1])]


def _greedy_as_ar(dec, target, tp, hp, prompts, max_new_tokens):
    """Asserts `dec` (greedy) emits the autoregressive decoder's tokens; returns its result."""
    key = jax.random.PRNGKey(0)
    ar = AutoregressiveDecoder(target, T0, cache_len=32).generate(
        tp, prompts=prompts, key=key, max_new_tokens=max_new_tokens
    )
    sp = dec.generate(tp, hp, prompts=prompts, key=key, max_new_tokens=max_new_tokens)
    for a, b in zip(ar.new_tokens(), sp.new_tokens(), strict=True):
        np.testing.assert_array_equal(a, b)
    # A NaN head is named (its scores go NaN), though verification would keep the text right.
    with pytest.raises(ValueError, match=DRAFT_NAN):
        dec.generate(tp, nan_params(hp), prompts=prompts, key=key, max_new_tokens=max_new_tokens)
    return sp


def test_greedy_equals_autoregressive():
    dec, tp, hp, target = _decoder(vocab=5, warper=T0, seed=3)
    sp = _greedy_as_ar(dec, target, tp, hp, PROMPTS * 4, 16)
    assert int(np.asarray(sp.stats.accepted_rank).sum()) > 0  # drafts were accepted


def test_features_follow_the_dynamic_paths_in_one_program():
    """At t = 1 (point masses accepted with probability p): paths go deeper than one node and
    through later ranks; the features the head holds equal the target's hidden states."""
    dec, tp, hp, target = _decoder(vocab=5, warper=T1, seed=3)
    tokens, lengths = pad_prompts(PROMPTS * 4, 5)
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
    _greedy_as_ar(dec, target, tp, hp, PROMPTS, 12)


def _sequential_scores(head, tp, hp, cache, f_root, root, pool):
    """Each candidate's cumulative log q recomputed one pair at a time along its path, with the
    head's ordinary causal mask (an independent check of the tree pass's slots, positions and
    masks): [batch, P]."""
    tokens, parents = np.asarray(pool["tokens"]), np.asarray(pool["parents"])
    batch, size = tokens.shape
    paths = [[[] for _ in range(size)] for _ in range(batch)]
    for b in range(batch):
        for c in range(size):
            x, path = c, []
            while x >= 0:
                path.append(int(tokens[b, x]))
                x = int(parents[b, x])
            paths[b][c] = path[::-1]
    out = np.zeros((batch, size), np.float32)
    for depth in sorted({len(p) for p in paths[0]}):
        cols = [c for c in range(size) if len(paths[0][c]) == depth]
        seq = jnp.asarray([[paths[b][c] for c in cols] for b in range(batch)], jnp.int32)
        rows = len(cols)
        flat = seq.reshape(batch * rows, depth)  # one row per (row, candidate)
        cch = jax.tree.map(lambda x, n=rows: jnp.repeat(x, n, axis=0), cache)
        feat = jnp.repeat(f_root, rows, axis=0)
        at = jnp.repeat(root, rows, axis=0)
        log_q = jax.nn.log_softmax(head.logits(tp, hp, feat), -1)
        score = jnp.take_along_axis(log_q, flat[:, :1], 1)[:, 0]
        for i in range(depth - 1):
            embed = head.target.embed(tp, flat[:, i : i + 1])
            pred, cch = head.forward_features(
                hp, rollback(cch, at + 1 + i), feat[:, None], embed, jnp.ones_like(at)
            )
            feat = pred[:, 0]
            log_q = jax.nn.log_softmax(head.logits(tp, hp, feat), -1)
            score = score + jnp.take_along_axis(log_q, flat[:, i + 1 : i + 2], 1)[:, 0]
        out[:, cols] = np.asarray(score).reshape(batch, rows)
    return out


@pytest.mark.parametrize("tree", [TREE, DynamicTree(5, 4, 8)], ids=["3-3-8", "5-4-8-tight"])
def test_the_tree_pass_scores_every_candidate_as_a_chain_would(tree):
    """The head's one-call-per-level pass (slots, positions, ancestor masks) gives each
    candidate the score a sequential pass along its path gives, at every step up to a full
    cache: 5-4-8 writes (D - 1) k = 16 slots past the root, more than its 7 nodes, at the
    smallest cache_len `generate` accepts (the decoder's `cache_headroom`)."""
    target, tp = tiny_llama(13, 3)
    head = EagleHead(target)
    hp = head.init_params(jax.random.PRNGKey(10))
    hp = jax.tree.map(lambda x: x * 4.0 if x.ndim == 2 else x, hp)
    prompts = [np.array([1, 2, 3, 4, 0]), np.array([3]), np.array([5, 6, 7, 8, 9, 10, 11])]
    new = 12
    headroom = max(tree.num_nodes - 1, (tree.depth - 1) * tree.top_k)
    cache_len = 7 + new + headroom
    dec = TreeSpeculativeDecoder(target, head, tree, T1, cache_len=cache_len)
    assert dec.cache_headroom == headroom
    with pytest.raises(ValueError, match="exceeds cache_len"):
        TreeSpeculativeDecoder(target, head, tree, T1, cache_len=cache_len - 1).generate(
            tp, hp, prompts=prompts, key=jax.random.PRNGKey(0), max_new_tokens=new
        )
    tokens, lengths = pad_prompts(prompts, 13)
    s = init_jit(dec, (tp, hp), jnp.asarray(tokens), jnp.asarray(lengths),
                 jax.random.PRNGKey(0), new, -1)  # fmt: skip
    drafter, worst, steps = dec.drafter, 0.0, 0
    while not bool(np.asarray(s.seq.done).all()):
        _, d_state = s.model_states
        pool, _ = drafter.candidates((tp, hp), d_state, s.seq)
        cache, f_root, root = drafter.catch_up((tp, hp), d_state, s.seq, tree.depth + 1)
        want = _sequential_scores(head, tp, hp, cache, f_root, root, pool)
        got = np.asarray(pool["scores"])
        live = ~np.asarray(s.seq.done)[:, None] & np.isfinite(want)
        worst = max(worst, float(np.abs(np.where(live, got - want, 0.0)).max()))
        s, steps = step_jit(dec, (tp, hp), s), steps + 1
    print("steps", steps, "worst", worst)
    assert steps >= 4 and worst < 2e-5  # measured: below 1e-6


def test_a_node_whose_parent_was_dropped_is_not_proposed():
    """`select_nodes` reports closure per node: a pool breaking the score invariant (a child
    above its parent) yields a node whose parent was not kept, marked not closed; the drafter
    proposes it as invalid (never tried)."""
    tree = DynamicTree(2, 2, 3)
    tokens = jnp.asarray([[5, 6, 7, 8, 9, 10]], jnp.int32)
    scores = jnp.asarray([[-1.0, -2.0, -0.5, -3.0, -4.0, -5.0]])  # candidate 2 beats its parent
    parents = jnp.asarray([[-1, -1, 0, 0, 1, 1]], jnp.int32)
    ranks = jnp.asarray([[0, 1, 0, 1, 0, 1]], jnp.int32)
    depths = jnp.asarray([[1, 1, 2, 2, 2, 2]], jnp.int32)
    node_tokens, _, closed, _ = select_nodes(tokens, scores, parents, ranks, depths, tree)
    np.testing.assert_array_equal(np.asarray(closed), [[True, True]])  # kept: 2 and 0
    tree = DynamicTree(2, 2, 2)  # keeps one node: candidate 2, whose parent 0 was dropped
    node_tokens, parents_out, closed, _ = select_nodes(tokens, scores, parents, ranks, depths, tree)
    np.testing.assert_array_equal(np.asarray(node_tokens), [[7]])
    np.testing.assert_array_equal(np.asarray(closed), [[False]])
