"""EAGLE-2's dynamic trees: the traced topology and the node selection (decoding with them:
tests/test_dynamic_tree_decoding.py).

* A static `TokenTree` passed through the traced path (`TracedTree.from_tree`) gives bit-identical
  `tree_accept` outputs and `tree_inputs`, with and without replacement and for point masses.
* Exact outputs from hand-written distributions: two rows with different trees in one call,
  every p one-hot, so the path and the emitted tokens are certain.
* The issue's counterexample, Q = (.9, .1), p = (.5, .5), one child (the high-q token, the other
  pruned): the point-mass rule emits it with probability p = .5, Sequoia's sampled rule with .5/.9
  = .556. 2^16 draws each; a binomial proportion's sd is at most sqrt(.25 / 2^16) = .00195, the
  bound is 5 sd (two-sided false-failure rate 5.7e-7 per check), the two laws are 28 sd apart.
* `select_nodes` against an independent reference (Python sorting by (-score, depth, index),
  then breadth-first by the tuple of ranks along the path) on pools full of ties: scores drawn
  from {0, -0.5, -1, -inf} and made cumulative, so parents and children tie (log q = 0) and
  -inf runs deep; every row's parents pass `TracedTree.check` (breadth-first, siblings
  contiguous) and every kept node's parent is kept.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decoding import TokenTree, tree_accept
from specjax.decoding.trees.dynamic import DynamicTree, select_nodes
from specjax.decoding.trees.topology import tree_inputs
from specjax.decoding.trees.traced import TracedTree, traced_tree_inputs

TREE = DynamicTree(depth=3, top_k=3, num_nodes=8)  # 21 candidates, 7 kept

STATIC = [
    TokenTree.from_branching((2, 2, 1)),
    TokenTree((-1, 0, 0, 0, 1, 1, 3, 4, 4, 6)),
    TokenTree.chain(3),
]


# -- the traced topology -------------------------------------------------------------------------


@pytest.mark.parametrize("tree", STATIC, ids=["2-2-1", "unbalanced", "chain"])
def test_a_static_tree_through_the_traced_path_is_bit_identical(tree):
    rng = np.random.default_rng(tree.num_nodes)
    batch, n, vocab = 64, tree.num_nodes, 6
    tokens = jnp.asarray(rng.integers(0, vocab, (batch, n)))
    p = jnp.asarray(rng.dirichlet(np.ones(vocab), (batch, n)), jnp.float32)
    q = jnp.asarray(rng.dirichlet(np.ones(vocab), (batch, n)), jnp.float32)
    traced = TracedTree.from_tree(tree, batch)
    for probs, replacement in [(None, True), (q, True), (q, False)]:
        key = jax.random.PRNGKey(1)
        a = tree_accept(key, tree, tokens, probs, p, replacement=replacement)
        b = tree_accept(key, traced, tokens, probs, p, replacement=replacement)
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    starts = jnp.arange(batch, dtype=jnp.int32) % 7
    for x, y in zip(tree_inputs(tree, starts, 24), traced_tree_inputs(traced, starts, 24),
                    strict=True):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    np.testing.assert_array_equal(np.asarray(traced.ranks())[0], tree.ranks)
    np.testing.assert_array_equal(np.asarray(traced.child_slots())[3], tree.child_slots())


def test_traced_tree_check_names_the_broken_row():
    parents = jnp.asarray([[-1, 0, 0, 1], [-1, 0, 1, 0]], jnp.int32)  # row 1: not breadth-first
    with pytest.raises(ValueError, match="row 1"):
        TracedTree(parents, 2, 2).check()
    with pytest.raises(ValueError, match="past the bounds"):
        TracedTree(parents[:1], 2, 1).check()


def test_exact_outputs_of_two_rows_with_different_trees():
    """Hand-written: every p one-hot, so each trial's outcome is certain."""
    vocab = 5
    parents = jnp.asarray([[-1, 0, 0, 1], [-1, 0, 1, 2]], jnp.int32)  # a fork; a chain
    tokens = jnp.asarray([[0, 2, 3, 4], [0, 1, 2, 3]], jnp.int32)
    onehot = lambda *xs: np.eye(vocab, dtype=np.float32)[list(xs)]  # noqa: E731
    # Row 0: the root's p wants 3, so child 1 (token 2) is rejected and child 2 (token 3)
    # accepted; node 2 is a leaf, whose p gives the bonus token 1.
    # Row 1: the chain 1, 2 is accepted, then p at node 2 wants 4, not 3: the correction is 4.
    p = jnp.asarray(np.stack([onehot(3, 0, 1, 0), onehot(1, 2, 4, 0)]))
    out, n, path = tree_accept(jax.random.PRNGKey(0), TracedTree(parents, 3, 2), tokens, None, p)
    np.testing.assert_array_equal(np.asarray(n), [1, 2])
    np.testing.assert_array_equal(np.asarray(out), [[3, 1, -1, -1], [1, 2, 4, -1]])
    np.testing.assert_array_equal(np.asarray(path), [[0, 2, -1, -1], [0, 1, 2, -1]])


def test_the_issues_counterexample_point_mass_vs_sequoia_on_a_pruned_tree():
    draws = 1 << 16
    tree = TokenTree((-1, 0))  # one child: the high-q token 0; token 1 pruned
    tokens = jnp.zeros((draws, 2), jnp.int32)
    p = jnp.broadcast_to(jnp.asarray([0.5, 0.5], jnp.float32), (draws, 2, 2))
    q = jnp.broadcast_to(jnp.asarray([0.9, 0.1], jnp.float32), (draws, 2, 2))
    bound = 5 * np.sqrt(0.25 / draws)
    key = jax.random.PRNGKey(5)
    point = tree_accept(key, TracedTree.from_tree(tree, draws), tokens, None, p)[0][:, 0]
    sequoia = tree_accept(key, tree, tokens, q, p, replacement=False)[0][:, 0]
    assert abs(float(jnp.mean(point == 0)) - 0.5) < bound
    assert abs(float(jnp.mean(sequoia == 0)) - 0.5 / 0.9) < bound


# -- node selection -------------------------------------------------------------------------------


def _random_pools(rng, tree: DynamicTree, batch: int):
    """Candidate pools shaped as the drafter builds them, with scores full of ties."""
    k, depth = tree.top_k, tree.depth
    values = np.array([0.0, -0.5, -1.0, -np.inf])  # log q: 0 (q rounds to 1), -inf (underflow)

    def top_k_scores(shape):  # each parent's children come sorted, as lax.top_k returns them
        return -np.sort(-rng.choice(values, shape), axis=-1)

    scores = [top_k_scores((batch, k))]
    parents = [np.full((batch, k), -1)]
    ranks = [np.tile(np.arange(k), (batch, 1))]
    depths = [np.ones((batch, k), int)]
    expanded, expanded_score = np.tile(np.arange(k), (batch, 1)), scores[0]
    for d in range(1, depth):
        level = (expanded_score[:, :, None] + top_k_scores((batch, k, k))).reshape(batch, k * k)
        scores.append(level)
        parents.append(np.repeat(expanded, k, axis=1))
        ranks.append(np.tile(np.arange(k), (batch, k)))
        depths.append(np.full((batch, k * k), d + 1))
        best = np.argsort(-level, axis=1, kind="stable")[:, :k]  # lax.top_k's order on ties
        expanded_score = np.take_along_axis(level, best, axis=1)
        expanded = k + (d - 1) * k * k + best
    tokens = rng.integers(0, 1000, (batch, tree.pool_size))
    cat = lambda xs: np.concatenate(xs, axis=1)  # noqa: E731
    return tokens, cat(scores).astype(np.float32), cat(parents), cat(ranks), cat(depths)


def _reference_select(tokens, scores, parents, ranks, depths, num_nodes):
    """One row, written independently: sort, keep, then breadth-first by the rank path."""
    pool = len(tokens)
    kept = sorted(range(pool), key=lambda i: (-scores[i], depths[i], i))[: num_nodes - 1]

    def path(i):
        return () if i < 0 else path(parents[i]) + (ranks[i],)

    order = sorted(kept, key=lambda i: (depths[i], path(i)))
    number = {c: j + 1 for j, c in enumerate(order)}
    tree_parents = [-1] + [0 if parents[c] < 0 else number.get(parents[c], -99) for c in order]
    return [tokens[c] for c in order], tree_parents


@pytest.mark.parametrize("tree", [TREE, DynamicTree(4, 2, 9), DynamicTree(2, 4, 20)],
                         ids=["3-3-8", "4-2-9", "2-4-20"])  # fmt: skip
def test_selection_matches_a_reference_and_is_a_connected_tree(tree):
    rng = np.random.default_rng(tree.num_nodes)
    batch = 256
    tokens, scores, parents, ranks, depths = _random_pools(rng, tree, batch)
    got_tokens, got_parents, closed, order = select_nodes(
        *(jnp.asarray(x, jnp.float32 if x is scores else jnp.int32)
          for x in (tokens, scores, parents, ranks, depths)), tree,
    )  # fmt: skip
    assert bool(jnp.all(closed))
    TracedTree(got_parents, tree.depth, tree.top_k).check()
    for b in range(batch):
        want_tokens, want_parents = _reference_select(
            tokens[b], scores[b], parents[b], ranks[b], depths[b], tree.num_nodes
        )
        np.testing.assert_array_equal(np.asarray(got_tokens[b]), want_tokens)
        np.testing.assert_array_equal(np.asarray(got_parents[b]), want_parents)
    # The case this test is for: a parent and its child tie in many rows (measured: 0.98 and
    # more of the rows for these seeds).
    parent_score = np.take_along_axis(scores, np.maximum(parents, 0), axis=1)
    tied = ((scores == parent_score) & (parents >= 0)).any(axis=1)
    assert tied.mean() > 0.45


def test_dynamic_tree_budget_is_checked():
    with pytest.raises(ValueError, match="num_nodes must lie in"):
        DynamicTree(2, 2, 8)  # 6 candidates
    with pytest.raises(ValueError, match="depth >= 1"):
        DynamicTree(0, 2, 2)
    with pytest.raises(TypeError, match="top_k must be an int"):
        DynamicTree(2, True, 3)
    with pytest.raises(ValueError, match="too large"):
        DynamicTree(12, 8, 20)
    assert DynamicTree.parse("5,4,16") == DynamicTree(5, 4, 16)
    with pytest.raises(ValueError, match="depth,top_k,num_nodes"):
        DynamicTree.parse("5/4")
