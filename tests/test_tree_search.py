"""Sequoia's dynamic program (`optimal_tree`) and the tree value it maximises (`expected_accepted`).

* The DP's optimum equals brute force over every ordered tree of n <= 8 nodes (depth-bounded and
  not), for random positional vectors; the tree it returns attains that optimum exactly.
* `expected_accepted` of a chain is the paper's (1 - alpha^(gamma+1)) / (1 - alpha) - 1.
* `expected_accepted` predicts what `tree_accept` accepts: on synthetic p, q that are the same at
  every node, the positional assumption holds exactly, and P is computed exactly for both rules
  (with replacement: the residual chain; without: enumeration of the draws). The Monte-Carlo mean
  of num_accepted over 2^16 rows must lie within 5 standard errors of the prediction: a false
  failure has probability 5.7e-7 per comparison (normal approximation; 6 comparisons, 3.4e-6 in
  all). Measured |z| <= 1.21. Power: the same means against the other rule's vector give
  |z| > 10 for the branching trees (measured 34.6 to 55.7).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from positional_reference import exact_positional

from specjax.decoding import (
    TokenTree,
    expected_accepted,
    hardware_aware_tree,
    optimal_tree,
    positional_from_conditional,
    tree_accept,
)
from specjax.decoding.trees.search import (
    conditional_from_positional,
    draft_call_widths,
    tree_from_nested,
)
from specjax.decoding.trees.topology import draw_children


def _ordered_trees(n):
    """Every ordered (plane) tree of n nodes, as nested child lists."""
    if n == 1:
        yield []
        return
    yield from _forests(n - 1)


def _forests(n):
    if n == 0:
        yield []
        return
    for m in range(1, n + 1):
        for first in _ordered_trees(m):
            for rest in _forests(n - m):
                yield [first, *rest]


def _depth(nested):
    return 0 if not nested else 1 + max(_depth(c) for c in nested)


def test_dp_equals_brute_force_over_all_ordered_trees():
    rng = np.random.default_rng(0)
    trees = {n: list(_ordered_trees(n)) for n in range(1, 9)}
    assert [len(trees[n]) for n in range(1, 9)] == [1, 1, 2, 5, 14, 42, 132, 429]  # Catalan
    for _ in range(12):
        k = int(rng.integers(1, 6))
        acceptance = rng.dirichlet(np.ones(k + 1))[:k]  # sums to < 1, as a positional vector
        for n in range(1, 9):
            for max_depth in (None, 1, 2, 3):
                bound = n - 1 if max_depth is None else max_depth
                brute = max(
                    expected_accepted(tree_from_nested(t), acceptance)
                    for t in trees[n]
                    if _depth(t) <= bound
                )
                got = optimal_tree(acceptance, n, max_depth)
                assert got.num_nodes == n and got.max_depth <= bound
                assert expected_accepted(got, acceptance) == pytest.approx(brute, abs=1e-12)


def _brute_value_by_hand(nested, rows):
    """The per-depth value written out independently of `expected_accepted`: each node's
    reach is its parent's times the row of its own depth at its rank."""

    def walk(kids, depth, reach):
        total = 0.0
        p = rows[min(depth, len(rows) - 1)]
        for rank, kid in enumerate(kids):
            r = reach * (p[rank] if rank < len(p) else 0.0)
            total += r + walk(kid, depth + 1, r)
        return total

    return walk(nested, 0, 1.0)


def test_dp_by_depth_equals_brute_force_over_all_ordered_trees():
    # Per-depth acceptance (an EAGLE head drafting on its own features accepts less deeper):
    # the DP's optimum equals brute force over every ordered tree, with the value computed by
    # an independent walk, for random matrices of 1 to 4 rows (rows past the last repeat it).
    rng = np.random.default_rng(1)
    trees = {n: list(_ordered_trees(n)) for n in range(1, 9)}
    for _ in range(10):
        k, d = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        rows = np.stack([rng.dirichlet(np.ones(k + 1))[:k] for _ in range(d)])
        for n in range(1, 9):
            for max_depth in (None, 1, 2, 3):
                bound = n - 1 if max_depth is None else max_depth
                values = [
                    (_brute_value_by_hand(t, rows), t) for t in trees[n] if _depth(t) <= bound
                ]
                brute = max(v for v, _ in values)
                got = optimal_tree(rows, n, max_depth)
                assert got.num_nodes == n and got.max_depth <= bound
                assert expected_accepted(got, rows) == pytest.approx(brute, abs=1e-12)
        for v, t in values:  # expected_accepted agrees with the walk on every tree
            assert expected_accepted(tree_from_nested(t), rows) == pytest.approx(v, abs=1e-12)


def test_dp_by_depth_with_equal_rows_is_the_vectors_dp():
    rng = np.random.default_rng(2)
    for _ in range(8):
        p = rng.dirichlet(np.ones(5))[:4]
        for n in (1, 2, 5, 9, 16):
            for max_depth in (None, 2, 4):
                if n > 1 and max_depth is not None and max_depth < 1:
                    continue
                want = optimal_tree(p, n, max_depth)
                assert optimal_tree(np.stack([p] * 3), n, max_depth) == want
                assert optimal_tree(p[None], n, max_depth) == want


def test_dp_by_depth_spends_nodes_where_acceptance_lasts():
    # The same first-depth vector; at depth 2 and below the first child is rarely right and
    # the second never. The vector's DP deepens the spine (0.8^k beats 0.1), the per-depth DP
    # widens the root instead: a grandchild is worth 0.8 * 0.1 = 0.08, a root sibling 0.15.
    first = [0.8, 0.15]
    vector_tree = optimal_tree(first, 4)
    assert vector_tree == TokenTree.chain(3)
    rows = [first, [0.1, 0.0]]
    tree = optimal_tree(rows, 4)
    assert tree.parents == (-1, 0, 0, 1)  # two root children, the first with one child
    assert expected_accepted(tree, rows) == pytest.approx(0.8 + 0.15 + 0.8 * 0.1)
    assert expected_accepted(vector_tree, rows) == pytest.approx(0.8 + 0.08 + 0.008)


def test_dp_prefers_depth_when_the_first_child_dominates_and_width_when_it_does_not():
    # P_1 = 0.9: every extra node is best spent deepening the spine (0.9^k > 0.05 * ...).
    assert optimal_tree([0.9, 0.05], 5) == TokenTree.chain(4)
    # P_1 = 0.3, P_2 = 0.3: the root's second child is worth 0.3, a grandchild only 0.09.
    assert optimal_tree([0.3, 0.3, 0.3], 4).parents == (-1, 0, 0, 0)
    # The depth bound binds: at most 1 level, so all nodes are root children.
    assert optimal_tree([0.9, 0.05], 4, max_depth=1).parents == (-1, 0, 0, 0)


def test_chain_value_is_the_papers_formula():
    for alpha in (0.1, 0.5, 0.8, 0.95):
        for gamma in range(1, 9):
            want = (1 - alpha ** (gamma + 1)) / (1 - alpha) - 1
            assert expected_accepted(TokenTree.chain(gamma), [alpha]) == pytest.approx(want)
            # Later ranks do not matter to a chain.
            assert expected_accepted(TokenTree.chain(gamma), [alpha, 0.1]) == pytest.approx(want)


def test_positional_and_conditional_round_trip():
    a = np.array([0.6, 0.5, 0.25, 1.0])
    p = positional_from_conditional(a)
    np.testing.assert_allclose(p, [0.6, 0.2, 0.05, 0.15])
    np.testing.assert_allclose(conditional_from_positional(p), a)
    assert p.sum() <= 1.0


def test_bad_arguments_raise_naming_them():
    with pytest.raises(ValueError, match="acceptance"):
        optimal_tree([0.7, 0.5], 4)  # sums past 1: conditional rates passed by mistake
    with pytest.raises(ValueError, match="acceptance"):
        optimal_tree([], 4)
    with pytest.raises(ValueError, match="acceptance"):
        optimal_tree([float("nan")], 4)
    with pytest.raises(ValueError, match="num_nodes"):
        optimal_tree([0.5], 0)
    with pytest.raises(ValueError, match="max_depth"):
        optimal_tree([0.5], 4, max_depth=0)
    with pytest.raises(ValueError, match="rates"):
        positional_from_conditional([1.5])
    # A per-depth matrix: each row is checked, and the error names it.
    with pytest.raises(ValueError, match=r"row 1 sum"):
        optimal_tree([[0.5, 0.2], [0.7, 0.5]], 4)
    with pytest.raises(ValueError, match=r"acceptance\[1\]"):
        expected_accepted(TokenTree.chain(2), [[0.5], [float("nan")]])
    with pytest.raises(ValueError, match="acceptance"):
        optimal_tree(np.zeros((0, 2)), 4)
    # Rows of different lengths: ranks past a row's end count as 0, as in a vector.
    assert expected_accepted(TokenTree.from_branching((2, 2)), [[0.5, 0.3], [0.4]]) == (
        pytest.approx(0.5 + 0.3 + (0.5 + 0.3) * 0.4)
    )


def test_hardware_aware_choice_follows_the_verification_curve():
    acceptance = [0.77, 0.10, 0.04, 0.02, 0.013, 0.008]  # Sequoia App. E's example vector
    sizes = (1, 2, 4, 8, 16, 32, 64)
    flat = {n: 1.0 for n in sizes}  # an accelerator: scoring 64 tokens costs one token's time
    steep = {n: float(n) for n in sizes}  # scoring n tokens costs n tokens' time
    tree, candidates = hardware_aware_tree(acceptance, flat, 0.0)
    assert tree.num_nodes == 64  # free verification, free drafting: the biggest tree wins
    assert candidates[0]["speedup"] == pytest.approx(1 + expected_accepted(tree, acceptance))
    tree, _ = hardware_aware_tree(acceptance, steep, 0.0)
    assert tree.num_nodes <= 2  # the gain is at most 1 + 0.77 per extra token scored
    # A draft level costing 0.3 of a target call makes deep trees pay per level: shallower.
    deep, _ = hardware_aware_tree(acceptance, flat, 0.0)
    shallow, _ = hardware_aware_tree(acceptance, flat, 0.3)
    assert shallow.max_depth < deep.max_depth
    for c in hardware_aware_tree(acceptance, {1: 1.0, 4: 1.5, 8: 2.5}, lambda w: 0.1 * w)[1]:
        # TreeDrafter's calls: the root, then every level above the leaves.
        levels = c["tree"].levels
        widths = [1] + [end - first for first, end in levels[1:-1]] if len(levels) > 1 else []
        cost = {1: 1.0, 4: 1.5, 8: 2.5}[c["nodes"]] + 0.1 * sum(widths)
        assert c["speedup"] == pytest.approx((1 + c["expected_accepted"]) / cost)
    with pytest.raises(ValueError, match="verify_cost"):
        hardware_aware_tree(acceptance, {2: 1.0, 4: 1.0}, 0.1)
    assert draft_call_widths(TokenTree.chain(3)) == [1, 1, 1]
    assert draft_call_widths(TokenTree.from_branching((3, 2))) == [1, 3]  # leaves never fed
    assert draft_call_widths(TokenTree((-1,))) == []
    with pytest.raises(ValueError, match="max_depths"):
        hardware_aware_tree(acceptance, flat, 0.1, max_depths=[0])


def test_hardware_aware_by_depth_solves_each_depth_bound_on_its_own():
    # With a per-depth matrix the best tree of a depth bound is not a subtree of a looser
    # bound's table: every candidate must be `optimal_tree` of its own (n, bound).
    rows = [[0.6, 0.2, 0.1], [0.4, 0.1], [0.2]]
    costs = {1: 1.0, 2: 1.0, 4: 1.05, 8: 1.2, 16: 1.8}
    tree, candidates = hardware_aware_tree(rows, costs, 0.05, max_depths=(1, 2, 3, 4))
    assert tree == candidates[0]["tree"]
    for c in candidates:
        if c["nodes"] > 1:
            want = optimal_tree(rows, c["nodes"], min(c["max_depth"], c["nodes"] - 1))
            assert c["tree"] == want
        assert c["expected_accepted"] == pytest.approx(expected_accepted(c["tree"], rows))
    # Equal rows give the vector's candidates.
    _, by_vector = hardware_aware_tree(rows[0], costs, 0.05, max_depths=(1, 2, 3, 4))
    _, by_rows = hardware_aware_tree([rows[0]] * 2, costs, 0.05, max_depths=(1, 2, 3, 4))
    assert [c["tree"] for c in by_rows] == [c["tree"] for c in by_vector]


# -- the value against tree_accept ------------------------------------------------------------


@functools.partial(jax.jit, static_argnums=(1, 4, 5))
def _accepted(key, tree, p, q, batch, replacement):
    """num_accepted of tree_accept over `batch` rows; every node has target p and draft q."""
    draw_key, accept_key = jax.random.split(key)
    tokens = jnp.zeros((batch, tree.num_nodes), jnp.int32)
    keys = jax.random.split(draw_key, tree.num_nodes)
    for node in range(tree.num_nodes):  # children of every node: i.i.d. or a Gumbel race on q
        kids = tree.children[node]
        if kids:
            drawn = draw_children(
                keys[node],
                jnp.broadcast_to(q, (batch, q.shape[0])),
                len(kids),
                replacement=replacement,
            )
            tokens = tokens.at[:, jnp.asarray(kids)].set(drawn)
    shape = (batch, tree.num_nodes, p.shape[0])
    _, n, _ = tree_accept(
        accept_key,
        tree,
        tokens,
        jnp.broadcast_to(q, shape),
        jnp.broadcast_to(p, shape),
        replacement=replacement,
    )
    return n


@pytest.mark.parametrize("replacement", [True, False], ids=["with", "without"])
def test_expected_accepted_predicts_tree_accept(replacement):
    p = np.array([0.45, 0.25, 0.2, 0.1])
    q = np.array([0.1, 0.4, 0.3, 0.2])
    acceptance = exact_positional(p, q, 4, replacement)
    batch = 2**16
    trees = [optimal_tree(acceptance, 8), TokenTree.from_branching((3, 1)), TokenTree.chain(3)]
    for i, tree in enumerate(trees):
        n = np.asarray(
            _accepted(
                jax.random.key(10 + i),
                tree,
                jnp.asarray(p, jnp.float32),
                jnp.asarray(q, jnp.float32),
                batch,
                replacement,
            )
        )
        want = expected_accepted(tree, acceptance)
        z = (n.mean() - want) / (n.std() / np.sqrt(batch))
        assert abs(z) < 5.0, (tree, n.mean(), want, z)
        if tree.max_branch > 1:  # power: the other rule's vector must be told apart
            other = expected_accepted(tree, exact_positional(p, q, 4, not replacement))
            z_other = (n.mean() - other) / (n.std() / np.sqrt(batch))
            assert abs(z_other) > 10.0, (tree, n.mean(), other, z_other)
