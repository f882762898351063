"""`TokenTree`: derived static structure on hand-written trees, constructors, and clear errors.

Deterministic and fast (no JAX computation): every derived field of a few trees is compared with
values written out by hand, the three `parse` syntaxes with the constructors they stand for, and
each invalid topology with the message that names its problem.

UNBALANCED, parents (-1, 0, 0, 0, 1, 1, 2, 4):

    0 ─┬─ 1 ─┬─ 4 ── 7
       │     └─ 5
       ├─ 2 ── 6
       └─ 3
"""

from __future__ import annotations

import numpy as np
import pytest

from specjax.decoding import TokenTree

UNBALANCED = TokenTree((-1, 0, 0, 0, 1, 1, 2, 4))


def _ancestor_mask_by_walking(parents) -> np.ndarray:
    """mask[i, j]: j is i or an ancestor of i, by walking up from each node."""
    n = len(parents)
    mask = np.zeros((n, n), bool)
    for i in range(n):
        j = i
        while j >= 0:
            mask[i, j] = True
            j = parents[j]
    return mask


def test_unbalanced_derived_fields():
    tree = UNBALANCED
    assert tree.num_nodes == 8
    assert tree.depths == (0, 1, 1, 1, 2, 2, 2, 3)
    assert tree.max_depth == 3
    assert tree.children == ((1, 2, 3), (4, 5), (6,), (), (7,), (), (), ())
    assert tree.max_branch == 3
    assert tree.ranks == (0, 0, 1, 2, 0, 1, 0, 0)
    assert tree.levels == ((0, 1), (1, 4), (4, 7), (7, 8))
    slots = tree.child_slots()
    assert slots.dtype == np.int32
    np.testing.assert_array_equal(
        slots,
        [[1, 2, 3], [4, 5, -1], [6, -1, -1], [-1, -1, -1], [7, -1, -1]] + [[-1, -1, -1]] * 3,
    )


def test_unbalanced_ancestor_mask():
    mask = UNBALANCED.ancestor_mask()
    assert mask.dtype == bool and mask.shape == (8, 8)
    # Node 7's ancestors are 4, 1, 0; node 6's are 2, 0; node 3's only 0.
    np.testing.assert_array_equal(np.flatnonzero(mask[7]), [0, 1, 4, 7])
    np.testing.assert_array_equal(np.flatnonzero(mask[6]), [0, 2, 6])
    np.testing.assert_array_equal(np.flatnonzero(mask[3]), [0, 3])
    np.testing.assert_array_equal(np.flatnonzero(mask[0]), [0])
    np.testing.assert_array_equal(mask, _ancestor_mask_by_walking(UNBALANCED.parents))
    assert not mask[4, 5] and not mask[5, 4]  # siblings never see each other


def test_from_branching():
    tree = TokenTree.from_branching((3, 2, 1))
    level2 = (1, 1, 2, 2, 3, 3)
    level3 = (4, 5, 6, 7, 8, 9)
    assert tree.parents == (-1, 0, 0, 0) + level2 + level3
    assert tree.num_nodes == 1 + 3 + 6 + 6
    assert tree.levels == ((0, 1), (1, 4), (4, 10), (10, 16))
    assert tree.max_branch == 3 and tree.max_depth == 3
    assert tree.ranks[4:10] == (0, 1, 0, 1, 0, 1)
    np.testing.assert_array_equal(tree.ancestor_mask(), _ancestor_mask_by_walking(tree.parents))


def test_chain_and_root_only():
    chain = TokenTree.chain(3)
    assert chain.parents == (-1, 0, 1, 2)
    assert chain == TokenTree.from_branching((1, 1, 1))
    assert chain.max_branch == 1 and chain.depths == (0, 1, 2, 3)
    np.testing.assert_array_equal(chain.ancestor_mask(), np.tril(np.ones((4, 4), bool)))
    root = TokenTree((-1,))
    assert root.max_depth == 0 and root.max_branch == 1 and root.children == ((),)
    np.testing.assert_array_equal(root.child_slots(), [[-1]])
    assert root.levels == ((0, 1),)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("3,2,1", TokenTree.from_branching((3, 2, 1))),
        ("3/2/1", TokenTree.from_branching((3, 2, 1))),
        (" 3 / 2 / 1 ", TokenTree.from_branching((3, 2, 1))),
        ("4", TokenTree.from_branching((4,))),
        ("1,1,1", TokenTree.chain(3)),
        ("-1,0,0,0,1,1,2,4", UNBALANCED),
        ("-1, 0, 0, 1", TokenTree((-1, 0, 0, 1))),
        ("-1", TokenTree((-1,))),
    ],
)
def test_parse(text, expected):
    assert TokenTree.parse(text) == expected


def test_equal_trees_are_one_static_argument():
    # Hashable and compared by value, whatever the parents' container or int type.
    a = TokenTree([-1, 0, 0, 1])
    b = TokenTree(tuple(np.array([-1, 0, 0, 1])))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert all(type(x) is int for x in b.parents)
    assert repr(UNBALANCED) == ("TokenTree(nodes=8, depth=3, parents=(-1, 0, 0, 0, 1, 1, 2, 4))")


@pytest.mark.parametrize(
    "parents, match",
    [
        ((), "non-empty sequence of ints"),
        ((-1, 0.0), "non-empty sequence of ints"),
        ((-1, True), "non-empty sequence of ints"),
        ((0, 0), r"parents\[0\] must be -1"),
        ((-1, 1), r"parents\[1\] = 1: every non-root parent must be an earlier node"),
        ((-1, 0, 2), r"parents\[2\] = 2: every non-root parent must be an earlier node"),
        ((-1, 0, 5), r"parents\[2\] = 5"),
        ((-1, 0, -1), r"parents\[2\] = -1"),
        ((-1, 0, 1, 0), "breadth-first.*node 3 has depth 1 after node 2 at depth 2"),
        ((-1, 0, 0, 1, 2, 1), "siblings must be contiguous.*node 5 \\(parent 1\\)"),
        ((-1, 0, 0, 2, 1), "siblings must be contiguous.*node 4 \\(parent 1\\)"),
    ],
)
def test_invalid_topology_raises_naming_the_problem(parents, match):
    with pytest.raises(ValueError, match=match):
        TokenTree(parents)


@pytest.mark.parametrize("branching", [(), (2, 0), (2, -1), (True,), (1.5,)])
def test_invalid_branching_raises(branching):
    with pytest.raises(ValueError, match="branching must be a non-empty sequence of ints >= 1"):
        TokenTree.from_branching(branching)


def test_chain_needs_one_draft():
    with pytest.raises(ValueError, match="branching must be a non-empty"):
        TokenTree.chain(0)


@pytest.mark.parametrize(
    "text, match",
    [
        ("a,b", r"tree='a,b': expected integers separated by ',' or '/'"),
        ("3.5", "expected integers separated by"),
        ("3;2", "expected integers separated by"),
        ("", "branching must be a non-empty"),
        ("3,0", "branching must be a non-empty sequence of ints >= 1"),
        ("-1,0,2", r"parents\[2\] = 2"),
        ("-1,0,1,0", "breadth-first"),
    ],
)
def test_bad_parse_strings(text, match):
    with pytest.raises(ValueError, match=match):
        TokenTree.parse(text)
