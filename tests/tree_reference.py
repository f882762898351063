"""An independent reference of the token-tree verification rule, with switches that plant bugs.

Written from ALGORITHMS.md §0-§1 (the lemma, SpecInfer's and Sequoia's loops), not from
`specjax.decoding.rules.tree`: it uses only `tree.parents`, and it walks the tree differently. Nodes
are visited once, in index (breadth-first) order, batched over rows; each row keeps `cur`, the
node whose children it is trying. A node is tried in a row when its parent is that row's `cur`:
breadth-first numbering puts every node of depth d + 1 after every node of depth d and keeps
siblings in rank order, so an accepted child's remaining siblings are skipped (their parent is
no longer `cur`) and its own children all come later. At the end every row emits one token from
its residual r, which is p(cur) itself when cur is a leaf (nothing was tried there), so the bonus
and the residual draw are one line.

tests/test_tree_accept_stats.py checks that this reference, no bug switched on, follows the exact
target law, and that each bug is detected by the same statistic.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

BUGS = (
    # (a) after a rejected sibling the residual is not updated: r stays p.
    "no_residual_update",
    # (b) without replacement: rejected tokens are not removed from the proposal Q.
    "keep_rejected_in_q",
    # (c) every sibling's acceptance ratio uses the node's original p instead of the residual r
    #     (the residual is still updated for the final draw).
    "test_against_p",
    # (d) duplicate siblings (same token as an earlier sibling) are merged: tried once.
    "merge_duplicates",
    # (f) without replacement: x is removed from Q before the residual r <- norm((r - Q)+).
    "remove_before_residual",
    # (g) an empty residual falls back to the node's p instead of the current r.
    "empty_residual_to_p",
)
# (e), deterministic top-k children verified with q instead of as point masses, is the correct
# verifier given the wrong law: the switch `point_mass` off for top-k children.


def make_switches(bug=None, point_mass=False) -> np.ndarray:
    """bool [len(BUGS) + 1]: the bug's switch on (None: none), then `point_mass`.

    The switches are traced arguments, so one compilation serves every bug.
    """
    assert bug is None or bug in BUGS, bug
    return np.array([b == bug for b in BUGS] + [bool(point_mass)])


def _normalise(x):
    mass = x.sum(-1, keepdims=True)
    return x / jnp.where(mass > 0, mass, 1.0)


def reference_accept(
    key, parents, node_tokens, draft_probs, target_probs, *, replacement=True, switches=None
):
    """The tree rule, batched over rows, with an optional planted bug.

    Args:
      key: PRNG key.
      parents: the tree's parents tuple (breadth-first, siblings contiguous and in rank order).
      node_tokens: int [batch, N]; entry 0 (the root) is ignored.
      draft_probs: float [batch, N, vocab] the law node i was drawn from (without replacement: the
        parent's unreduced q), or None for deterministic children (point masses).
      target_probs: float [batch, N, vocab] p after the prefix ending at node i.
      replacement: siblings drawn independently (True) or without replacement from one q.
      switches: bool [len(BUGS) + 1] from `make_switches()` (may be traced); None: no bug, and
        point masses exactly when draft_probs is None. With `point_mass` on, every child is
        verified as a point mass whatever draft_probs says.

    Returns:
      tokens int32 [batch, D + 1] (the accepted path's tokens, then one drawn token, then -1) and
      num_accepted int32 [batch].
    """
    if switches is None:
        switches = make_switches(None, point_mass=draft_probs is None)
    on = {name: jnp.asarray(switches)[k] for k, name in enumerate(BUGS + ("point_mass",))}
    parents = [int(x) for x in parents]
    n = len(parents)
    depth = [0] * n
    for i in range(1, n):
        depth[i] = depth[parents[i]] + 1
    max_depth = max(depth)
    # ancestors[i, j]: j is i or one of its ancestors (own construction, not TokenTree's).
    ancestors = np.zeros((n, n), bool)
    for i in range(n):
        j = i
        while j >= 0:
            ancestors[i, j] = True
            j = parents[j]

    batch = node_tokens.shape[0]
    vocab = target_probs.shape[-1]
    tokens = node_tokens.astype(jnp.int32)
    p = _normalise(target_probs.astype(jnp.float32))  # [batch, N, vocab]
    q = None if draft_probs is None else _normalise(draft_probs.astype(jnp.float32))
    k_coin, k_draw = jax.random.split(key)
    coins = jax.random.uniform(k_coin, (batch, n))  # [batch, N]
    rows = jnp.arange(batch)

    cur = jnp.zeros((batch,), jnp.int32)  # the node whose children are being tried
    r = p[:, 0]  # [batch, vocab] the residual at cur
    big_q = jnp.zeros((batch, vocab))  # without replacement: the current proposal at cur
    tried = jnp.zeros((batch, vocab), bool)  # tokens rejected at cur
    fresh = jnp.ones((batch,), bool)  # no child of cur tried yet
    for i in range(1, n):
        par = parents[i]
        active = cur == par  # [batch]
        x = tokens[:, i]  # [batch]
        for j in range(1, i):  # (d): skip a token an earlier sibling had
            if parents[j] == par:
                active = active & ~(on["merge_duplicates"] & (tokens[:, j] == x))
        point = jax.nn.one_hot(x, vocab)  # a point mass on x
        if q is None:
            trial = point
        elif replacement:
            trial = q[:, i]
        else:
            big_q = jnp.where((active & fresh)[:, None], q[:, i], big_q)
            tried = jnp.where((active & fresh)[:, None], False, tried)
            trial = big_q
        if q is not None:
            trial = jnp.where(on["point_mass"], point, trial)
        fresh = jnp.where(active, False, fresh)
        test_r = jnp.where(on["test_against_p"], p[:, par], r)
        accept = active & (coins[:, i] * trial[rows, x] < test_r[rows, x])
        reject = active & ~accept

        # Without replacement: the next proposal, Q with x removed (uniform over untried tokens
        # once Q has no mass left).
        reduced, tried_next = trial, tried
        if q is not None and not replacement:
            tried_next = tried | (jax.nn.one_hot(x, vocab) > 0)
            reduced = jnp.where(tried_next, 0.0, big_q)
            untried = (~tried_next).astype(jnp.float32)
            reduced = _normalise(jnp.where(reduced.sum(-1, keepdims=True) > 0, reduced, untried))
        # The residual r <- norm((r - Q)+), Q the law x was drawn from.
        subtract = jnp.where(on["remove_before_residual"], reduced, trial)
        residual = jnp.maximum(r - subtract, 0.0)
        mass = residual.sum(-1, keepdims=True)
        fallback = jnp.where(on["empty_residual_to_p"], p[:, par], r)
        new_r = jnp.where(mass > 0, residual / jnp.where(mass > 0, mass, 1.0), fallback)
        new_r = jnp.where(on["no_residual_update"], r, new_r)
        r = jnp.where(reject[:, None], new_r, r)
        if q is not None and not replacement:
            keep = on["keep_rejected_in_q"]
            big_q = jnp.where(reject[:, None] & ~keep, reduced, big_q)
            tried = jnp.where(reject[:, None], tried_next, tried)

        # Descend: the accepted child becomes cur, its p the new residual.
        cur = jnp.where(accept, i, cur)
        r = jnp.where(accept[:, None], p[:, i], r)
        fresh = fresh | accept

    final = jax.random.categorical(k_draw, jnp.log(r), axis=-1).astype(jnp.int32)  # [batch]
    count = jnp.asarray(depth, jnp.int32)[cur]  # [batch]
    out = jnp.full((batch, max_depth + 1), -1, jnp.int32)
    on_path = jnp.asarray(ancestors)[cur]  # [batch, N]
    for j in range(1, n):  # the path's tokens at their depths
        out = out.at[:, depth[j] - 1].set(
            jnp.where(on_path[:, j], tokens[:, j], out[:, depth[j] - 1])
        )
    out = out.at[rows, count].set(final)
    return out, count
