"""`tree_accept`'s two walks give the same bits: the early exit (a `while_loop` that stops at a
node's first accepted child and at the walk's last level, used up to `EARLY_EXIT_MAX_BATCH`
rows) and the full walk (a `scan` over every sibling slot and every level, used past it).

Every step the early exit skips is a no-op of the full walk (a child past the accepted one, a
padding slot, a level after the stop), so the outputs must be equal bit for bit, whatever the
inputs. Checked on random inputs built to reach every branch of the rule: sparse p and q (empty
residuals, a supp q exhausted without replacement), invalid nodes in the middle of a sibling
list, unnormalised and bfloat16 rows, a static tree and per-row traced trees, with and without
replacement and for deterministic children, 16 keys each. The statistical tests of the rule
(tests/test_tree_accept_stats.py) run their 2^20 rows through the full walk; the exact-output
tests (tests/test_tree_accept_exact.py, 8 rows) and batch-1 decoding through the early exit.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decoding import TokenTree, tree_accept
from specjax.decoding.rules import tree as tree_rule
from specjax.decoding.trees.traced import TracedTree

ROWS = tree_rule.EARLY_EXIT_MAX_BATCH
V = 6
KEYS = [jax.random.key(seed) for seed in range(16)]
UNBALANCED = TokenTree((-1, 0, 0, 0, 1, 1, 3, 4, 4, 6))
WIDE = TokenTree.from_branching((4, 2, 1, 1))
# Per-row trees of 10 nodes (breadth-first, siblings contiguous): a fork, a chain, a star.
TRACED_PARENTS = [
    (-1, 0, 0, 0, 1, 1, 3, 4, 4, 6),
    (-1, 0, 1, 2, 3, 4, 5, 6, 7, 8),
    (-1, 0, 0, 0, 0, 0, 0, 0, 0, 0),
    (-1, 0, 0, 1, 1, 2, 2, 3, 4, 5),
]
VARIANTS = {"q-with": (True, True), "q-without": (True, False), "point-masses": (False, True)}


def _inputs(n: int, seed: int, dtype):
    """Sparse, unnormalised rows; tokens drawn mostly from q (so children get accepted)."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(V, 0.4), (ROWS, n))
    p[p < 0.08] = 0.0
    p[..., 0] += 1e-3  # no all-zero row
    q = rng.dirichlet(np.full(V, 0.4), (ROWS, n))
    q[q < 0.08] = 0.0
    q[..., 1] += 1e-3
    drawn = (q.cumsum(-1) < rng.random((ROWS, n, 1)) * q.sum(-1, keepdims=True)).sum(-1)
    tokens = np.where(rng.random((ROWS, n)) < 0.7, drawn, rng.integers(0, V, (ROWS, n)))
    valid = rng.random((ROWS, n)) > 0.15
    scale = rng.uniform(0.5, 2.0, (ROWS, n, 1))  # rows the rule must renormalise
    return (
        jnp.asarray(np.minimum(tokens, V - 1), jnp.int32),
        jnp.asarray(q * scale, dtype),
        jnp.asarray(p * scale, dtype),
        jnp.asarray(valid),
    )


def _walks(tree, has_q, replacement, monkeypatch):
    """(early exit, full walk) as jitted functions of (key, tokens, q, p, valid)."""

    # Both walks on this backend too (the library takes the early exit on the CPU only).
    monkeypatch.setattr(tree_rule, "EARLY_EXIT_BACKENDS", (jax.default_backend(),))

    def build(max_batch):
        monkeypatch.setattr(tree_rule, "EARLY_EXIT_MAX_BATCH", max_batch)
        fn = jax.jit(
            lambda key, tokens, q, p, valid: tree_accept(
                key, tree, tokens, q if has_q else None, p, replacement=replacement, valid=valid
            )
        )
        args = _inputs(tree.num_nodes, 0, jnp.float32)
        jaxpr = str(jax.make_jaxpr(fn)(KEYS[0], *args))
        fn(KEYS[0], *args)  # compiled now, while the constant holds
        return fn, jaxpr

    early, early_jaxpr = build(ROWS)
    full, full_jaxpr = build(0)
    # The switch took: the early exit has no scan, the full walk no while_loop.
    assert " while[" in early_jaxpr and " scan[" not in early_jaxpr
    assert " scan[" in full_jaxpr and " while[" not in full_jaxpr
    return early, full


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("tree_name", ["unbalanced", "wide", "traced"])
def test_the_early_exit_is_the_full_walk_bit_for_bit(tree_name, variant, monkeypatch):
    has_q, replacement = VARIANTS[variant]
    if tree_name == "traced":
        parents = np.array([TRACED_PARENTS[i % len(TRACED_PARENTS)] for i in range(ROWS)])
        tree = TracedTree(jnp.asarray(parents, jnp.int32), 9, 9)
        tree.check()
    else:
        tree = {"unbalanced": UNBALANCED, "wide": WIDE}[tree_name]
    early, full = _walks(tree, has_q, replacement, monkeypatch)
    accepted = 0
    for seed, dtype in [(1, jnp.float32), (2, jnp.float32), (3, jnp.bfloat16)]:
        args = _inputs(tree.num_nodes, seed, dtype)
        for key in KEYS:
            a, b = early(key, *args), full(key, *args)
            for x, y in zip(a, b, strict=True):
                np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
            accepted += int(np.asarray(a[1]).sum())
    # The inputs reach below the root: the walks were compared past the first level.
    assert accepted > 0
