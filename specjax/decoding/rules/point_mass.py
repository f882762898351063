"""A lossless chain rule's outcome when the target is a point mass (greedy decoding).

With temperature 0 the target's p at every scored position is the one-hot of its argmax a_i.
Then the token-wise rule (`speculative_accept`) decides without chance, whatever q is:
  * a draft x_i = a_i has p_i(x_i) = 1 >= q_i(x_i): accepted (u q < 1 for every u in [0, 1));
  * a draft x_i != a_i has p_i(x_i) = 0: rejected;
  * the correction norm(max(0, p_n − q_n)) has its only mass at a_n (q_n(a_n) < 1, since the
    rejected x_n had q_n(x_n) > 0; where it has none, the rule's fallback is p_n itself), and
    the bonus is drawn from p_{γ+1} = one-hot(a_{γ+1}).
So the rule emits the longest prefix of drafts that equals a_1, a_2, ..., then the target's
argmax after it: exactly greedy decoding's tokens. Block verification (`block_accept`) keeps
the same prefix: its weight b_i stays 1 along the matching drafts and drops to 0 at the first
mismatch, so h_i is 1 up to it and 0 after, and its correction is one-hot(a_τ+1) too.

`point_mass_accept` computes that outcome from the drafted and the target's tokens alone, with
no [batch, γ + 1, vocab] distributions: a greedy speculative iteration then pays one argmax
over the target's logits instead of a one-hot, the rule's passes over p and q, and a draw from
the residual (about 1 ms per iteration at a 49,152-token vocabulary on a 2-core CPU). The
decoders use it where the warper ends in `Greedy` and the rule carries it (`point_mass`
attribute: `speculative_accept`, `block_accept`); tests/test_point_mass_accept.py checks it
against both rules on random one-hot targets and random q, ragged `num_drafted` included.

`tree_point_mass_accept` is the same for `tree_accept` (SpecInfer's and Sequoia's tree rule).
At a node whose target token is a = argmax p, the residual r starts as one-hot(a); a child x is
tried with the law Q it was drawn from (its own q, the parent's reduced q, or a point mass):
  * x = a: r(x) = 1 >= Q(x), so the trial u Q(x) < r(x) succeeds for every u in [0, 1);
  * x != a: r(x) = 0, rejected; then r <- norm(max(0, r − Q)) is one-hot(a) again (its only
    mass is 1 − Q(a) at a; where it has none, the rule keeps r) and a deterministic child is
    removed from r, which had no mass at x.
So the walk descends into the first proposed child (rank order) holding a, emits a where no
child does, and at a leaf emits the leaf's token: greedy decoding's tokens along the tree, and
the same path (tests/test_tree_point_mass.py checks it against `tree_accept` on one-hot
targets for both sibling rules, deterministic children, invalid nodes and per-row trees).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax import checks
from specjax.decoding.rules._common import accepted_prefix, assemble_tokens
from specjax.decoding.trees.topology import TokenTree
from specjax.decoding.trees.traced import TracedTree


def point_mass_accept(
    draft_tokens: jax.Array,
    target_tokens: jax.Array,
    *,
    fill_value: int = -1,
    num_drafted: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The lossless rules' output for a point-mass target: the drafts that equal its tokens.

    Args:
      draft_tokens: int [batch, gamma] the drafted tokens.
      target_tokens: int [batch, gamma + 1] the token the target's p is a point mass on at each
        scored position (`Warper.greedy_tokens` of its logits), or a negative value where p has
        no mass at all (logits all -inf, or NaN at the argmax): there, as the rules do with an
        all-zero p row, no draft is accepted and token 0 is emitted.
      fill_value: written to tokens[b, n + 1:].
      num_drafted: int [batch] in [0, gamma], how many of each row's tokens were drafted (the
        rest is never accepted), or None: every row drafted gamma.

    Returns:
      tokens: int32 [batch, gamma + 1]; tokens[b, :n + 1] are emitted (the n accepted drafts,
        then the target's token at position n), the rest `fill_value`.
      num_accepted: int32 [batch], n in [0, gamma].
    """
    checks.check_fill_value(fill_value)
    checks.check_rank("draft_tokens", draft_tokens, 2, "[batch, gamma]")
    checks.check_int("draft_tokens", draft_tokens)
    checks.check_rank("target_tokens", target_tokens, 2, "[batch, gamma + 1]")
    checks.check_int("target_tokens", target_tokens)
    batch, gamma = draft_tokens.shape
    if target_tokens.shape != (batch, gamma + 1):
        raise ValueError(
            f"target_tokens must have shape [batch, gamma + 1] = [{batch}, {gamma + 1}] for "
            f"draft_tokens of shape {tuple(draft_tokens.shape)}; got {tuple(target_tokens.shape)}"
        )
    if num_drafted is not None:
        checks.check_rank("num_drafted", num_drafted, 1, "[batch]")
        if num_drafted.shape[0] != batch:
            raise ValueError(
                f"num_drafted must have shape [batch] = [{batch}]; got {tuple(num_drafted.shape)}"
            )
    draft_tokens = draft_tokens.astype(jnp.int32)
    target_tokens = target_tokens.astype(jnp.int32)
    accepted = draft_tokens == target_tokens[:, :gamma]  # [batch, gamma]; never at no mass
    if num_drafted is not None:
        accepted = accepted & (jnp.arange(gamma)[None, :] < num_drafted[:, None])
    num_accepted = accepted_prefix(accepted)  # [batch]
    next_token = jnp.take_along_axis(target_tokens, num_accepted[:, None], axis=1)[:, 0]
    next_token = jnp.maximum(next_token, 0)  # no mass: the rules' draw from an all-zero row
    tokens = assemble_tokens(draft_tokens, num_accepted, next_token, fill_value)
    return tokens, num_accepted.astype(jnp.int32)


def tree_point_mass_accept(
    tree: TokenTree | TracedTree,
    node_tokens: jax.Array,
    target_tokens: jax.Array,
    *,
    fill_value: int = -1,
    valid: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`tree_accept`'s output for a point-mass target: the path of children that equal its tokens.

    Args:
      tree: a static `TokenTree` or a per-row `TracedTree`.
      node_tokens: int [batch, N] the token at each node (entry 0, the root, is ignored).
      target_tokens: int [batch, N] the token the target's p is a point mass on after each node
        (`Warper.greedy_tokens` of its logits), or a negative value where p has no mass (no
        child is accepted there and token 0 is emitted, as `point_mass_accept` does).
      fill_value: written to tokens[b, n + 1:].
      valid: bool [batch, N] nodes that were proposed (None: all); an invalid node is never
        accepted.

    Returns:
      (tokens int32 [batch, max_depth + 1], num_accepted int32 [batch], path int32
      [batch, max_depth + 1]) laid out as `tree_accept` returns them.
    """
    if not isinstance(tree, (TokenTree, TracedTree)):
        raise TypeError(f"tree must be a TokenTree or a TracedTree; got {tree!r}")
    checks.check_fill_value(fill_value)
    checks.check_rank("node_tokens", node_tokens, 2, "[batch, num_nodes]")
    checks.check_int("node_tokens", node_tokens)
    batch, n = node_tokens.shape
    checks.check_shape("target_tokens", target_tokens, (batch, n), "[batch, num_nodes]")
    checks.check_int("target_tokens", target_tokens)
    if valid is not None:
        checks.check_shape("valid", valid, (batch, n), "[batch, num_nodes]")
    if n != tree.num_nodes:
        raise ValueError(
            f"node_tokens must have shape [batch, num_nodes] = [{batch}, {tree.num_nodes}] for "
            f"a tree of {tree.num_nodes} nodes; got {tuple(node_tokens.shape)}"
        )
    depth = tree.max_depth
    node_tokens = node_tokens.astype(jnp.int32)
    target_tokens = target_tokens.astype(jnp.int32)
    valid = jnp.ones((batch, n), bool) if valid is None else valid.astype(bool)
    traced = isinstance(tree, TracedTree)
    slots = jnp.asarray(tree.child_slots())  # [N, branch] (static) or [batch, N, branch]
    node = jnp.zeros((batch,), jnp.int32)  # where each row's walk stands
    going = jnp.ones((batch,), bool)  # every level so far accepted a child
    path = [node]
    for _ in range(depth):  # static: at most one level per depth
        if traced:
            kids = jnp.take_along_axis(slots, node[:, None, None], axis=1)[:, 0]  # [batch, B]
        else:
            kids = slots[node]  # [batch, branch], -1 padded
        safe = jnp.maximum(kids, 0)
        token = jnp.take_along_axis(target_tokens, node[:, None], axis=1)  # [batch, 1]
        hit = (kids >= 0) & jnp.take_along_axis(valid, safe, axis=1)
        hit = hit & (jnp.take_along_axis(node_tokens, safe, axis=1) == token) & going[:, None]
        first = jnp.argmax(hit, axis=1)  # the first hit in rank order
        going = hit.any(axis=1)
        chosen = jnp.take_along_axis(kids, first[:, None], axis=1)[:, 0]
        node = jnp.where(going, chosen, node)
        path.append(jnp.where(going, chosen, -1))
    path = jnp.stack(path, axis=1)  # [batch, depth + 1]: 0, the accepted nodes, then -1
    num_accepted = (path[:, 1:] >= 0).sum(axis=1).astype(jnp.int32)
    last = jnp.take_along_axis(target_tokens, node[:, None], axis=1)[:, 0]
    last = jnp.maximum(last, 0)  # no mass: the rules' draw from an all-zero row
    accepted = jnp.take_along_axis(node_tokens, jnp.maximum(path[:, 1:], 0), axis=1)
    tokens = assemble_tokens(accepted, num_accepted, last, fill_value)
    return tokens, num_accepted, path.astype(jnp.int32)
