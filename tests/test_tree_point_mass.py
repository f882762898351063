"""`tree_point_mass_accept` is `tree_accept`'s outcome for a greedy target, from tokens alone.

Exact checks, no statistics: for a point-mass p the tree rule decides without chance (proof in
specjax/decoding/rules/point_mass.py), so `tree_accept` on the one-hot p must return exactly its
tokens, counts and paths for every key and every q: on random cases of four topologies, per-row
(traced) trees among them, for the three kinds of children (independent draws from their own q,
draws without replacement from the parent's q, deterministic proposals), with invalid nodes and
children that hold the parent's target token half the time. Two planted bugs (invalid nodes
tried; every level compared with the root's target token) must fail the same comparison, and
greedy tree decoders with and without the shortcut emit the same streams and statistics.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decoding import LookupTreeDrafter, TokenTree, TreeSpeculativeDecoder, tree_accept
from specjax.decoding.decoders import tree as tree_module
from specjax.decoding.rules.point_mass import tree_point_mass_accept
from specjax.decoding.trees.traced import TracedTree

BATCH, VOCAB = 256, 6
TREES = {
    "unbalanced": TokenTree((-1, 0, 0, 0, 1, 1, 2, 4)),
    "wide": TokenTree.from_branching((3, 2)),
    "deep": TokenTree.from_branching((2, 1, 1)),
    "chain": TokenTree.chain(3),
}
MODES = ("with", "without", "deterministic")


def test_hand_written_rows():
    tree = TREES["unbalanced"]  # root 0: children 1, 2, 3; 1: 4, 5; 2: 6; 4: 7
    nodes = jnp.asarray([[0, 5, 6, 5, 8, 9, 7, 3]] * 4)
    target = jnp.asarray(
        [
            [5, 9, 1, 1, 1, 1, 1, 1],  # 1 (first 5, not 3), then 5 (9), then leaf 5: its token 1
            [6, 1, 7, 1, 1, 1, 2, 1],  # 2, then 6, a leaf: bonus 2
            [4, 1, 1, 1, 1, 1, 1, 1],  # no child holds 4: emit it
            [5, 8, 1, 1, 3, 1, 1, 0],  # 1, 4, 7 down to depth 3, then leaf 7's token 0
        ]
    )
    valid = jnp.ones((4, 8), bool).at[0, 1].set(False)  # row 0: node 1 not proposed -> node 3
    tokens, n, path = tree_point_mass_accept(tree, nodes, target, fill_value=-1, valid=valid)
    assert n.tolist() == [1, 2, 0, 3]
    assert path.tolist() == [[0, 3, -1, -1], [0, 2, 6, -1], [0, -1, -1, -1], [0, 1, 4, 7]]
    assert tokens.tolist() == [[5, 1, -1, -1], [6, 7, 2, -1], [4, -1, -1, -1], [5, 8, 3, 0]]
    no_mass = target.at[2, 0].set(-1)  # p without mass at row 2's root: nothing, then token 0
    tokens, n, _ = tree_point_mass_accept(tree, nodes, no_mass, fill_value=-1, valid=valid)
    assert tokens[2].tolist() == [0, -1, -1, -1] and int(n[2]) == 0


def _random_traced(rng, n: int) -> TracedTree:
    """Per-row trees of n nodes: parents non-decreasing and below their node (breadth-first,
    siblings contiguous)."""
    rows = []
    for _ in range(BATCH):
        parents = [-1, 0]
        for i in range(2, n):
            parents.append(int(rng.integers(parents[-1], i)))
        rows.append(parents)
    trees = [TokenTree(tuple(r)) for r in rows]
    depth, branch = max(t.max_depth for t in trees), max(t.max_branch for t in trees)
    return TracedTree(jnp.asarray(rows, jnp.int32), depth, branch)


def _case(seed: int, name: str, mode: str):
    """(tree, node_tokens, draft_probs or None, one-hot target_probs, target tokens, valid)."""
    rng = np.random.default_rng(seed)
    if name == "traced":
        tree = _random_traced(rng, 9)
        parents = np.asarray(tree.parents)  # [batch, N]
    else:
        tree = TREES[name]
        parents = np.broadcast_to(np.asarray(tree.parents), (BATCH, tree.num_nodes))
    n = tree.num_nodes
    target = rng.integers(0, VOCAB, (BATCH, n))
    up = np.maximum(parents, 0)
    at_parent = np.take_along_axis(target, up, axis=1)
    nodes = np.where(rng.random((BATCH, n)) < 0.5, at_parent, rng.integers(0, VOCAB, (BATCH, n)))
    nodes[:, 0] = 0
    valid = rng.random((BATCH, n)) < 0.8
    valid[:, 0] = True
    q = None
    if mode != "deterministic":
        q = rng.dirichlet(np.full(VOCAB, 0.5), (BATCH, n))
        q[rng.random(q.shape) < 0.4] = 0.0  # sparse supports
        if mode == "without":  # siblings share their parent's q
            q = np.take_along_axis(q, up[:, :, None], axis=1)
        q[np.arange(BATCH)[:, None], np.arange(n)[None, :], nodes] += 0.05  # q(x) > 0
        q = (q / q.sum(-1, keepdims=True)).astype(np.float32)
    p = np.eye(VOCAB, dtype=np.float32)[target]  # one-hot [batch, N, vocab]
    as_j = lambda x: None if x is None else jnp.asarray(x)  # noqa: E731
    return tree, as_j(nodes.astype(np.int32)), as_j(q), as_j(p), as_j(target), as_j(valid)


@functools.cache
def _rule(name: str, mode: str):
    """One jitted tree_accept per topology and kind of children (keys and cases are data)."""
    replacement = mode != "without"

    def run(key, tree, nodes, q, p, valid):
        return tree_accept(key, tree, nodes, q, p, replacement=replacement, valid=valid)

    static = None if name == "traced" else (1,)
    return jax.jit(run, static_argnums=static)


@functools.cache
def _jitted(shortcut, name: str):
    """`shortcut` as one program per topology (called eagerly, it compiles op by op)."""
    static = None if name == "traced" else (0,)
    return jax.jit(shortcut, static_argnums=static, static_argnames="fill_value")


def _compare(name: str, mode: str, shortcut=tree_point_mass_accept, seeds=range(3)) -> int:
    """Rows where `shortcut` and tree_accept disagree, over `seeds` (each with its own key)."""
    mismatched = 0
    for seed in seeds:
        tree, nodes, q, p, target, valid = _case(seed, name, mode)
        want = _rule(name, mode)(jax.random.key(seed), tree, nodes, q, p, valid)
        got = _jitted(shortcut, name)(tree, nodes, target, fill_value=-1, valid=valid)
        rows = np.zeros(BATCH, bool)
        for a, b in zip(got, want, strict=True):
            a, b = np.asarray(a), np.asarray(b)
            rows |= (a != b).reshape(BATCH, -1).any(axis=1)
        mismatched += int(rows.sum())
    return mismatched


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", [*TREES, "traced"])
def test_tree_accept_equals_it_on_one_hot_targets(name, mode):
    assert _compare(name, mode) == 0
    # The cases reach every depth (up to 3): a comparison of empty paths would prove little.
    tree, nodes, _, _, target, valid = _case(0, name, mode)
    _, n, _ = _jitted(tree_point_mass_accept, name)(tree, nodes, target, valid=valid)
    reach = min(tree.max_depth, 3)
    assert np.bincount(np.asarray(n), minlength=reach + 1)[: reach + 1].min() > 0


def _tries_invalid_nodes(tree, nodes, target, fill_value, valid):
    del valid
    return tree_point_mass_accept(tree, nodes, target, fill_value=fill_value)


def _root_token_everywhere(tree, nodes, target, fill_value, valid):
    root = jnp.broadcast_to(target[:, :1], target.shape)
    return tree_point_mass_accept(tree, nodes, root, fill_value=fill_value, valid=valid)


@pytest.mark.parametrize("planted", [_tries_invalid_nodes, _root_token_everywhere])
def test_planted_bugs_are_caught(planted):
    # Measured: 258 and 565 of the 768 rows disagree (the unbalanced tree, sampled children).
    assert _compare("unbalanced", "with", shortcut=planted) > 100


def test_wrong_shapes_name_the_argument():
    tree = TREES["wide"]
    nodes = jnp.zeros((2, tree.num_nodes), jnp.int32)
    with pytest.raises(ValueError, match="target_tokens must have shape"):
        tree_point_mass_accept(tree, nodes, nodes[:, :-1])
    with pytest.raises(ValueError, match="valid must have shape"):
        tree_point_mass_accept(tree, nodes, nodes, valid=jnp.ones((2, 3), bool))
    with pytest.raises(ValueError, match="node_tokens must have shape"):
        tree_point_mass_accept(TREES["chain"], nodes, nodes)
    with pytest.raises(TypeError, match="tree must be a TokenTree"):
        tree_point_mass_accept((-1, 0), nodes, nodes)


@dataclasses.dataclass(frozen=True)
class _WithoutShortcut(TreeSpeculativeDecoder):
    """The same decoder verifying with `tree_accept` on the one-hot p at temperature 0."""

    def verify_point_mass(self, proposal, logits):
        return None


def _as(cls, decoder):
    """`decoder`'s fields in a subclass `cls` of its class."""
    return cls(**{f.name: getattr(decoder, f.name) for f in dataclasses.fields(decoder)})


def _generate(decoder, params, ds):
    return decoder.generate(
        *params, prompts=ds.PROMPTS, key=jax.random.key(0), max_new_tokens=ds.MAX_NEW
    )


def test_greedy_tree_decoders_emit_the_same_with_and_without_the_shortcut(monkeypatch):
    import decoding_setup as ds  # tests/decoding_setup.py

    taken = []
    monkeypatch.setattr(
        tree_module,
        "tree_point_mass_accept",
        lambda *a, **k: taken.append(1) or tree_point_mass_accept(*a, **k),
    )
    drafts = ds.drafts()
    wide = TokenTree.from_branching((3, 2, 1))
    cases = {  # a model draft's top-k children, and a lookup's (invalid nodes where it misses)
        "noisy_self": (drafts["noisy_self"][0], wide, drafts["noisy_self"][1]),
        "lookup": (LookupTreeDrafter(ds.V, wide, max_ngram=2), wide, {}),
    }
    for name, (draft, tree, d_params) in cases.items():
        fast = TreeSpeculativeDecoder(ds.TARGET, draft, tree, ds.GREEDY, cache_len=ds.CACHE_LEN)
        slow = _as(_WithoutShortcut, fast)
        runs = [_generate(d, (ds.target_params(), d_params), ds) for d in (fast, slow)]
        np.testing.assert_array_equal(runs[0].tokens, runs[1].tokens, err_msg=name)
        np.testing.assert_array_equal(runs[0].lengths, runs[1].lengths, err_msg=name)
        for a, b in zip(
            jax.tree.leaves(runs[0].stats), jax.tree.leaves(runs[1].stats), strict=True
        ):
            np.testing.assert_array_equal(a, b, err_msg=name)
        assert int(np.asarray(runs[0].stats.accepted_at).sum()) > 0, name  # drafts were kept
    assert taken  # the fast decoders took the shortcut


def test_the_shortcut_is_greedy_only_and_a_replaced_verify_keeps_its_rule():
    import decoding_setup as ds

    draft = ds.drafts()["bigram"][0]
    tree = TokenTree.from_branching((2, 1))
    greedy = TreeSpeculativeDecoder(ds.TARGET, draft, tree, ds.GREEDY, cache_len=ds.CACHE_LEN)
    sampled = dataclasses.replace(greedy, warper=ds.SAMPLING)
    batch = 2
    proposal = type("P", (), {})()
    proposal.tokens = jnp.zeros((batch, tree.num_nodes - 1), jnp.int32)
    proposal.probs, proposal.valid, proposal.parents = None, None, None
    logits = jnp.zeros((batch, tree.num_nodes, ds.V)).at[:, :, 3].set(1.0)
    tokens, n, _ = greedy.verify_point_mass(proposal, logits)
    assert tokens.tolist() == [[3, 0, 0]] * batch and n.tolist() == [0] * batch
    assert sampled.verify_point_mass(proposal, logits) is None
    replaced = _as(_WithoutShortcut, greedy)
    assert replaced.verify_point_mass(proposal, logits) is None

    @dataclasses.dataclass(frozen=True)
    class OwnVerifyTree(TreeSpeculativeDecoder):
        def verify_tree(self, key, proposal, p):
            return super().verify_tree(key, proposal, p)

    own = _as(OwnVerifyTree, greedy)
    assert own.verify_point_mass(proposal, logits) is None
