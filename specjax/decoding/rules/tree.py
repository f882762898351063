"""The lossless verification of a token tree (SpecInfer's and Sequoia's multi-draft rules).

A chain proposes one future; a token tree proposes several at each position, and the target
scores every node in the one call it makes anyway (each node attends to the committed prefix
and its own ancestors: SpecInfer's topology-aware causal mask, `tree_inputs`). `tree_accept`
then walks down from the root, at each node trying its children in rank order:

    r <- p(node)                                   # the residual, initially the target's p
    for each child x (rank order), drawn from Q:
        accept with probability min(1, r(x) / Q(x))  -> descend into x, repeat there
        else r <- norm(max(0, r - Q))                 (kept as it is if that has no mass)
    no child accepted: emit one token from r; reached a leaf: emit a bonus token from its p.

Q is the true law of the child given everything before its trial (ALGORITHMS.md §0: under that
condition every trial keeps the emitted token distributed as r, so the node emits exactly p, and
descending repeats the argument one level down):
  * `replacement=True` (SpecInfer's multi-step speculative sampling): siblings are independent
    draws, each from its own q (`draft_probs` of that child); duplicates are separate trials.
  * `replacement=False` (Sequoia): siblings are drawn without replacement from the parent's one
    q; after a rejected x the proposal becomes Q <- norm(Q with Q(x) = 0), *after* the residual
    update (the other order is biased). Once every token of supp q has been tried, Q is uniform
    over the untried tokens: `TreeDrafter` draws such children that way (a Gumbel race in which
    tokens outside the support lose to every token inside it), so the rule stays exact.
  * `draft_probs=None`: deterministic proposals (a draft's top-k, prompt-lookup matches): Q is a
    point mass, so x is accepted with probability r(x) and rejected x is removed from r.

Node 0 is the root (the last committed token); the topology (`TokenTree`, `tree_inputs`,
`draw_children`) is `specjax/decoding/trees/topology.py`. The topology may also be data: a
`TracedTree` (`trees/traced.py`) holds per-row parents, walked by the same code (a static tree
lifted into it gives bit-identical outputs). EAGLE-2's dynamic trees use it: such a tree keeps
or drops each node by the draft's own scores, so its children are verified as point masses
(`draft_probs=None`); Sequoia's sampled rule on a tree pruned by its own draws is biased.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from specjax import checks
from specjax.decoding.rules._common import (
    check_drafted_mass,
    normalise,
    residual_distribution,
)
from specjax.decoding.sampling import sample_from_probs
from specjax.decoding.trees.topology import TokenTree
from specjax.decoding.trees.traced import TracedTree

# Up to this many rows the walk stops at its first accepted child and its last level (`_loop`);
# past it every row runs every trial, as a batched while_loop would run them all anyway. On the
# backends named only: a CPU reads the loop's condition where it computes it, while an
# accelerator's while_loop of unknown trip count waits on the host each step (not measured).
EARLY_EXIT_MAX_BATCH = 8
EARLY_EXIT_BACKENDS = ("cpu",)


def _early_exit(batch: int) -> bool:
    return batch <= EARLY_EXIT_MAX_BATCH and jax.default_backend() in EARLY_EXIT_BACKENDS


def _check_args(tree, node_tokens, draft_probs, target_probs, valid, replacement) -> None:
    if not isinstance(tree, (TokenTree, TracedTree)):
        raise TypeError(f"tree must be a TokenTree or a TracedTree; got {tree!r}")
    n = tree.num_nodes
    checks.check_rank("node_tokens", node_tokens, 2, "[batch, num_nodes]")
    checks.check_int("node_tokens", node_tokens)
    batch = node_tokens.shape[0]
    if isinstance(tree, TracedTree) and tree.parents.shape != (batch, n):
        raise ValueError(
            f"tree.parents must have shape [batch, num_nodes] = [{batch}, {n}]; got "
            f"{tuple(tree.parents.shape)}"
        )
    if node_tokens.shape[1] != n:
        raise ValueError(
            f"node_tokens must have shape [batch, num_nodes] = [{batch}, {n}] for a tree of {n} "
            f"nodes; got {tuple(node_tokens.shape)}"
        )
    layout = "[batch, num_nodes, vocab]"
    checks.check_distributions("target_probs", target_probs, (batch, n), layout, require_mass=True)
    vocab = target_probs.shape[-1]
    if draft_probs is not None:
        checks.check_distributions("draft_probs", draft_probs, (batch, n), layout, vocab)
    if valid is not None:
        checks.check_shape("valid", valid, (batch, n), "[batch, num_nodes]")
    if checks.is_concrete(node_tokens) and n > 1:
        lo, hi = checks.value_range(np.asarray(node_tokens)[:, 1:])  # sliced on the host
        if lo < 0 or hi >= vocab:
            raise ValueError(f"node_tokens must lie in [0, {vocab}); got values in [{lo}, {hi}]")
        # With replacement each child was drawn from its own row. (Without, a later sibling may
        # lie outside the parent's q once its support is exhausted: the uniform fallback.)
        if draft_probs is not None and replacement:
            known = valid is not None and checks.is_concrete(valid)
            drafted = np.asarray(valid).astype(bool) if known else np.ones((batch, n), bool)
            drafted[:, 0] = False  # the root is not drafted
            check_drafted_mass("draft_probs", draft_probs, node_tokens, drafted)


def _loop(body, init, length: int, more, early_exit: bool):
    """The carry after body(carry, i) for i = 0 .. length - 1 (body: carry -> carry).

    early_exit: a `lax.while_loop` that stops at the first i where more(carry, i) is False,
    where every later step must leave the carry as it is, so both loops end on the same carry.
    A scan runs every step; at batch 1 (vmapped, the while_loop runs while any row goes on) the
    early exit skips the untried siblings and the levels below the stop.
    """
    if not early_exit:
        step = lambda c, i: (body(c, i), None)  # noqa: E731
        return jax.lax.scan(step, init, jnp.arange(length))[0]

    def cond(state):
        i, carry = state
        return (i < length) & more(carry, i)

    def advance(state):
        i, carry = state
        return i + 1, body(carry, i)

    return jax.lax.while_loop(cond, advance, (jnp.int32(0), init))[1]


def _accept_row(key, slots, depth_max, replacement, early_exit, tokens, q, p, valid):
    """tree_accept for one row: slots [N, B] (children by rank, -1 padded), tokens [N],
    q [N, V] | None, p [N, V] (float32, each row normalised where the walk reads it), valid [N];
    depth_max and early_exit static (`_loop`)."""
    n, vocab = p.shape
    k_coin, k_final = jax.random.split(key)
    coins = jax.random.uniform(k_coin, (n,), jnp.float32)  # one per node: each is tried once

    def try_child(carry, slot):
        node, r, dq, tried, chosen = carry
        child = slots[node, slot]
        safe = jnp.maximum(child, 0)
        x = tokens[safe]
        live = (child >= 0) & valid[safe] & (chosen < 0)
        if q is None:
            trial = jax.nn.one_hot(x, vocab, dtype=jnp.float32)
        elif replacement:
            trial = normalise(q[safe])
        else:
            trial = dq
        ok = live & (coins[safe] * trial[x] < r[x])
        rejected = live & ~ok
        # The residual first, with the proposal the child was drawn from (before removing x).
        r = jnp.where(rejected, residual_distribution(r, trial), r)  # empty: r itself
        if q is not None and not replacement:
            tried = tried | (rejected & (jnp.arange(vocab) == x))
            reduced = jnp.where(tried, 0.0, dq)
            untried = (~tried).astype(jnp.float32)
            reduced = jnp.where(reduced.sum() > 0, reduced, untried)
            dq = jnp.where(rejected, normalise(reduced), dq)
        chosen = jnp.where(ok, child, chosen)
        return node, r, dq, tried, chosen

    def level(carry, _):
        node, done, path, count, r_out = carry
        r = normalise(p[node])
        first = jnp.maximum(slots[node, 0], 0)
        # The sequential proposal: read only without replacement (with it, each trial is q[child]).
        if q is not None and not replacement:
            dq = normalise(q[first])
        else:
            dq = jnp.zeros((vocab,), jnp.float32)
        start = (node, r, dq, jnp.zeros((vocab,), bool), jnp.int32(-1))
        width = slots.shape[1]

        def more(c, slot):  # past the accepted child or the last proposed one: no-op trials
            return (c[4] < 0) & (slots[c[0], jnp.minimum(slot, width - 1)] >= 0)

        _, r, _, _, chosen = _loop(try_child, start, width, more, early_exit)
        chosen = jnp.where(done, -1, chosen)
        stop = ~done & (chosen < 0)
        r_out = jnp.where(stop, r, r_out)
        path = jnp.where(chosen >= 0, path.at[count + 1].set(chosen), path)
        count = jnp.where(chosen >= 0, count + 1, count)
        node = jnp.where(chosen >= 0, chosen, node)
        return node, done | stop, path, count, r_out

    path0 = jnp.full((depth_max + 1,), -1, jnp.int32).at[0].set(0)
    init = (jnp.int32(0), jnp.zeros((), bool), path0, jnp.int32(0), jnp.zeros((vocab,)))
    # Once the walk has stopped (carry[1]) every level is a no-op.
    node, done, path, count, r_out = _loop(level, init, depth_max, lambda c, _: ~c[1], early_exit)
    final = jnp.where(done, r_out, normalise(p[node]))  # a leaf reached: its bonus distribution
    token = sample_from_probs(k_final, final)
    emitted = jnp.take(tokens, jnp.maximum(path, 0))  # [depth_max + 1] node tokens on the path
    return jnp.roll(emitted, -1), count, path, token


def tree_accept(
    key: jax.Array,
    tree: TokenTree,
    node_tokens: jax.Array,
    draft_probs: jax.Array | None,
    target_probs: jax.Array,
    *,
    replacement: bool = True,
    fill_value: int = -1,
    valid: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Verifies a token tree so the emitted tokens are distributed exactly as the target's.

    Args:
      key: a PRNG key (rows draw independent randomness from it).
      tree: the topology: a static `TokenTree`, or a `TracedTree` (per-row parents [batch, N],
        e.g. a dynamic tree), verified by the same walk.
      node_tokens: int [batch, N] the token at each node (entry 0, the root, is ignored).
      draft_probs: float [batch, N, vocab]: for node i >= 1 the distribution its token was drawn
        from (with `replacement=False`: the parent's unreduced q, the same for all siblings);
        None for deterministic proposals (point masses).
      target_probs: float [batch, N, vocab] p of the token after the prefix ending at node i.
        float32 or bfloat16; rows are renormalised in float32.
      replacement: True: siblings were drawn independently (SpecInfer); False: without
        replacement from one q (Sequoia). Irrelevant when draft_probs is None.
      fill_value: written to tokens[b, n + 1:].
      valid: bool [batch, N] nodes that were proposed (None: all). An invalid node is never
        tried, so a drafter may propose fewer children (a prompt lookup with fewer matches).

    Returns:
      tokens: int32 [batch, max_depth + 1]; tokens[b, :n + 1] are emitted (the n accepted tokens
        along the path, then the residual or bonus token), the rest `fill_value`.
      num_accepted: int32 [batch], n in [0, max_depth].
      path: int32 [batch, max_depth + 1]: path[b, 0] = 0, then the accepted nodes, the rest -1.
    """
    checks.check_key(key)
    checks.check_fill_value(fill_value)
    _check_args(tree, node_tokens, draft_probs, target_probs, valid, replacement)
    batch, n = node_tokens.shape
    tokens = node_tokens.astype(jnp.int32)
    # Rows are renormalised where the walk reads them: a few of the N rows, not all of them.
    p = target_probs.astype(jnp.float32)
    q = None if draft_probs is None else draft_probs.astype(jnp.float32)
    valid = jnp.ones((batch, n), bool) if valid is None else valid.astype(bool)
    if tree.max_depth == 0:  # the root alone: one plain sample from p
        token = sample_from_probs(key, normalise(p[:, 0]))
        return token[:, None], jnp.zeros((batch,), jnp.int32), jnp.zeros((batch, 1), jnp.int32)
    keys = jax.random.split(key, batch)
    row = functools.partial(
        _accept_row,
        depth_max=tree.max_depth,
        replacement=bool(replacement),
        early_exit=_early_exit(batch),
    )
    in_q = 0 if q is not None else None
    if isinstance(tree, TracedTree):
        slots, in_slots = tree.child_slots(), 0  # [batch, N, B]
    else:
        slots, in_slots = jnp.asarray(tree.child_slots()), None  # [N, B], a constant
    out, count, path, token = jax.vmap(
        lambda k, s, t, qq, pp, v: row(k, slots=s, tokens=t, q=qq, p=pp, valid=v),
        in_axes=(0, in_slots, 0, in_q, 0, 0),
    )(keys, slots, tokens, q, p, valid)
    c = count[:, None]
    index = jnp.arange(tree.max_depth + 1)[None, :]
    out = jnp.where(index < c, out, jnp.where(index == c, token[:, None], fill_value))
    return out.astype(jnp.int32), count.astype(jnp.int32), path.astype(jnp.int32)
