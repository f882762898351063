"""Token trees and their lossless verification (SpecInfer's and Sequoia's multi-draft rules).

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

Node 0 is the root: the last committed token, whose successor is being guessed. Under specjax's
pending-token invariant it is not yet in the target's cache, so a tree over a row of L tokens is
written at cache slots L - 1 + i (node i) with positions L - 1 + depth(i).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from specjax import checks
from specjax.decoding.acceptance import _normalise, residual_distribution
from specjax.decoding.categorical import GUMBEL_MODE
from specjax.decoding.sampling import sample_from_probs

# A key below every key of a token inside supp q (log q >= -104 in float32, Gumbel noise in
# [-5, 17]): tokens outside the support are drawn only after every token inside it.
_OUTSIDE_SUPPORT = -1.0e4


@dataclasses.dataclass(frozen=True)
class TokenTree:
    """A static token-tree topology (hashable: usable as a static jit argument).

    Nodes are numbered breadth-first: node 0 is the root, parents[i] < i, depths never decrease,
    and the children of a node are contiguous and ordered by rank (the order they were drawn and
    are tried).

    Attributes:
      parents: parents[i] is node i's parent; parents[0] == -1.
    """

    parents: tuple

    def __post_init__(self):
        parents = tuple(self.parents)
        if not parents or any(
            isinstance(x, bool) or not isinstance(x, (int, np.integer)) for x in parents
        ):
            raise ValueError(
                f"TokenTree.parents must be a non-empty sequence of ints; got {self.parents!r}"
            )
        parents = tuple(int(x) for x in parents)
        if parents[0] != -1:
            raise ValueError(
                f"TokenTree.parents[0] must be -1 (node 0 is the root); got {parents[0]}"
            )
        depths = [0]
        for i in range(1, len(parents)):
            if not 0 <= parents[i] < i:
                raise ValueError(
                    f"TokenTree.parents[{i}] = {parents[i]}: every non-root parent must be an "
                    f"earlier node (0 <= parent < {i})"
                )
            depths.append(depths[parents[i]] + 1)
            if depths[i] < depths[i - 1]:
                raise ValueError(
                    f"TokenTree nodes must be numbered breadth-first (depths never decrease); node "
                    f"{i} has depth {depths[i]} after node {i - 1} at depth {depths[i - 1]}"
                )
            if parents[i] < parents[i - 1]:
                raise ValueError(
                    f"TokenTree siblings must be contiguous, in their parents' order; node {i} "
                    f"(parent {parents[i]}) follows node {i - 1} (parent {parents[i - 1]})"
                )
        object.__setattr__(self, "parents", parents)

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def from_branching(cls, branching) -> TokenTree:
        """A full tree: every node at depth d has branching[d] children (chain: (1,) * gamma)."""
        branching = tuple(branching)
        if not branching or any(
            isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1 for b in branching
        ):
            raise ValueError(
                f"branching must be a non-empty sequence of ints >= 1; got {branching!r}"
            )
        parents, level = [-1], [0]
        for width in branching:
            nxt = []
            for node in level:
                for _ in range(int(width)):
                    nxt.append(len(parents))
                    parents.append(node)
            level = nxt
        return cls(tuple(parents))

    @classmethod
    def chain(cls, gamma: int) -> TokenTree:
        """The chain of gamma drafts, a tree with one child per node."""
        return cls.from_branching((1,) * gamma)

    @classmethod
    def parse(cls, text: str) -> TokenTree:
        """From a config string: "3,2,1" or "3/2/1" (branching per depth), or "-1,0,0,1" (parents).

        Raises:
          ValueError: naming the text when it is not a list of integers or not a valid tree.
        """
        try:
            items = [int(x) for x in str(text).replace(" ", "").replace("/", ",").split(",") if x]
        except ValueError:
            raise ValueError(
                f"tree={text!r}: expected integers separated by ',' or '/', e.g. '3,2,1' "
                "(children per depth) or '-1,0,0,1' (parents of nodes 0..N-1)"
            ) from None
        if items and items[0] == -1:
            return cls(tuple(items))
        return cls.from_branching(tuple(items))

    # -- derived static structure (numpy / tuples, computed on demand) ---------------------

    @property
    def num_nodes(self) -> int:
        return len(self.parents)

    @functools.cached_property
    def depths(self) -> tuple:
        depths = [0]
        for i in range(1, self.num_nodes):
            depths.append(depths[self.parents[i]] + 1)
        return tuple(depths)

    @property
    def max_depth(self) -> int:
        return max(self.depths)

    @functools.cached_property
    def children(self) -> tuple:
        """children[i]: node i's children in rank order."""
        kids = [[] for _ in range(self.num_nodes)]
        for i in range(1, self.num_nodes):
            kids[self.parents[i]].append(i)
        return tuple(tuple(k) for k in kids)

    @property
    def max_branch(self) -> int:
        """The most children any node has (>= 1)."""
        return max(1, max(len(k) for k in self.children))

    @functools.cached_property
    def ranks(self) -> tuple:
        """ranks[i]: node i's 0-based rank among its siblings (0 for the root)."""
        ranks = [0] * self.num_nodes
        for kids in self.children:
            for r, c in enumerate(kids):
                ranks[c] = r
        return tuple(ranks)

    @functools.cached_property
    def levels(self) -> tuple:
        """levels[d] = (first, end): the contiguous node range at depth d."""
        depths = np.asarray(self.depths)
        return tuple(
            (int(np.argmax(depths == d)), int(np.argmax(depths == d)) + int((depths == d).sum()))
            for d in range(self.max_depth + 1)
        )

    def child_slots(self) -> np.ndarray:
        """int32 [N, max_branch]: each node's children in rank order, padded with -1."""
        slots = np.full((self.num_nodes, self.max_branch), -1, np.int32)
        for i, kids in enumerate(self.children):
            slots[i, : len(kids)] = kids
        return slots

    def ancestor_mask(self) -> np.ndarray:
        """bool [N, N]: mask[i, j] is True when j is i itself or one of its ancestors."""
        mask = np.eye(self.num_nodes, dtype=bool)
        for i in range(1, self.num_nodes):
            mask[i] |= mask[self.parents[i]]
        return mask

    def __repr__(self) -> str:
        return f"TokenTree(nodes={self.num_nodes}, depth={self.max_depth}, parents={self.parents})"


def tree_inputs(tree: TokenTree, starts: jax.Array, max_len: int, nodes=None):
    """Positions and attention mask for scoring tree nodes written at slots starts[b] + node.

    Args:
      tree: the topology.
      starts: int32 [batch] slot (and position) of the root in each row.
      max_len: the cache's slots per row.
      nodes: static sequence of the node indices fed in this call (default: all, in order).

    Returns:
      positions int32 [batch, T]: starts + depth(node);
      mask bool [batch, T, max_len]: slots < starts (the committed prefix) and the slots of the
        node's ancestors and itself.
    """
    nodes = np.arange(tree.num_nodes) if nodes is None else np.asarray(nodes, np.int64)
    depths = np.asarray(tree.depths, np.int32)[nodes]
    positions = starts[:, None] + jnp.asarray(depths)[None, :]  # [batch, T]
    ancestors = jnp.asarray(tree.ancestor_mask()[nodes])  # [T, N]
    offset = jnp.arange(max_len)[None, :] - starts[:, None]  # [batch, max_len]
    in_tree = (offset >= 0) & (offset < tree.num_nodes)
    seen = jnp.take(ancestors, jnp.clip(offset, 0, tree.num_nodes - 1), axis=1)  # [T, b, max_len]
    seen = jnp.swapaxes(seen, 0, 1) & in_tree[:, None, :]  # [batch, T, max_len]
    return positions.astype(jnp.int32), seen | (offset < 0)[:, None, :]


def _check_args(tree, node_tokens, draft_probs, target_probs, valid) -> None:
    if not isinstance(tree, TokenTree):
        raise TypeError(f"tree must be a TokenTree; got {tree!r}")
    n = tree.num_nodes
    checks.check_rank("node_tokens", node_tokens, 2, "[batch, num_nodes]")
    checks.check_int("node_tokens", node_tokens)
    batch = node_tokens.shape[0]
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
        lo, hi = checks.value_range(node_tokens[:, 1:])
        if lo < 0 or hi >= vocab:
            raise ValueError(f"node_tokens must lie in [0, {vocab}); got values in [{lo}, {hi}]")


def _accept_row(key, tree, replacement, tokens, q, p, valid):
    """tree_accept for one row: tokens [N], q [N, V] | None, p [N, V], valid [N]."""
    n, vocab = p.shape
    depth_max = tree.max_depth
    slots = jnp.asarray(tree.child_slots())  # [N, B]
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
            trial = q[safe]
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
            dq = jnp.where(rejected, _normalise(reduced), dq)
        chosen = jnp.where(ok, child, chosen)
        return (node, r, dq, tried, chosen), None

    def level(carry, _):
        node, done, path, count, r_out = carry
        r = p[node]
        first = jnp.maximum(slots[node, 0], 0)
        dq = q[first] if q is not None else jnp.zeros((vocab,), jnp.float32)
        start = (node, r, dq, jnp.zeros((vocab,), bool), jnp.int32(-1))
        (_, r, _, _, chosen), _ = jax.lax.scan(try_child, start, jnp.arange(slots.shape[1]))
        chosen = jnp.where(done, -1, chosen)
        stop = ~done & (chosen < 0)
        r_out = jnp.where(stop, r, r_out)
        path = jnp.where(chosen >= 0, path.at[count + 1].set(chosen), path)
        count = jnp.where(chosen >= 0, count + 1, count)
        node = jnp.where(chosen >= 0, chosen, node)
        return (node, done | stop, path, count, r_out), None

    path0 = jnp.full((depth_max + 1,), -1, jnp.int32).at[0].set(0)
    init = (jnp.int32(0), jnp.zeros((), bool), path0, jnp.int32(0), jnp.zeros((vocab,)))
    (node, done, path, count, r_out), _ = jax.lax.scan(level, init, None, length=depth_max)
    final = jnp.where(done, r_out, p[node])  # a leaf reached: its bonus distribution
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
      tree: the static topology.
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
    _check_args(tree, node_tokens, draft_probs, target_probs, valid)
    batch, n = node_tokens.shape
    tokens = node_tokens.astype(jnp.int32)
    p = _normalise(target_probs.astype(jnp.float32))
    q = None if draft_probs is None else _normalise(draft_probs.astype(jnp.float32))
    valid = jnp.ones((batch, n), bool) if valid is None else valid.astype(bool)
    if tree.max_depth == 0:  # the root alone: one plain sample from p
        token = sample_from_probs(key, p[:, 0])
        return token[:, None], jnp.zeros((batch,), jnp.int32), jnp.zeros((batch, 1), jnp.int32)
    keys = jax.random.split(key, batch)
    row = functools.partial(_accept_row, tree=tree, replacement=bool(replacement))
    in_q = 0 if q is not None else None
    out, count, path, token = jax.vmap(
        lambda k, t, qq, pp, v: row(k, tokens=t, q=qq, p=pp, valid=v),
        in_axes=(0, 0, in_q, 0, 0),
    )(keys, tokens, q, p, valid)
    c = count[:, None]
    index = jnp.arange(tree.max_depth + 1)[None, :]
    out = jnp.where(index < c, out, jnp.where(index == c, token[:, None], fill_value))
    return out.astype(jnp.int32), count.astype(jnp.int32), path.astype(jnp.int32)


def draw_children(key, probs, num, *, replacement: bool):
    """Draws `num` children from q at each parent: int32 [..., num].

    With replacement: independent samples. Without: a Gumbel race over log q (Gumbel-top-k, an
    exact sample without replacement, in draw order); tokens outside supp q race only among
    themselves after every token inside it, i.e. uniformly without replacement, the law
    `tree_accept(replacement=False)` verifies them with once q's support is exhausted.

    Args:
      key: PRNG key.
      probs: float [..., vocab] q (the warped draft distribution the verifier will use).
      num: children per parent (static).
      replacement: see above.
    """
    if replacement:
        keys = jax.random.split(key, num)
        draws = [sample_from_probs(k, probs) for k in keys]
        return jnp.stack(draws, axis=-1).astype(jnp.int32)
    # "high" Gumbels, as `sample_from_probs` draws: the default "low" ones under-draw children
    # ~14 nats or more below the leader (see specjax/decoding/categorical.py).
    gumbel = jax.random.gumbel(key, probs.shape, jnp.float32, mode=GUMBEL_MODE)
    inside = probs > 0
    log_q = jnp.log(jnp.where(inside, probs, 1.0))
    race = jnp.where(inside, log_q + gumbel, _OUTSIDE_SUPPORT + gumbel)
    return jax.lax.top_k(race, num)[1].astype(jnp.int32)
