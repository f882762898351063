"""EAGLE-2's dynamic token tree: the budget (`DynamicTree`) and how nodes are chosen.

A static tree spends the same nodes on every row and step. EAGLE-2 spends them where the draft
is confident: with k = `top_k` and D = `depth`,
  * depth 1: the draft's top-k tokens at the root are candidates, and all k are expanded;
  * depth d + 1 (d = 1 .. D - 1): each of the k expanded nodes of depth d proposes its top-k
    children, k^2 candidates, each scored by its cumulative draft log-probability (the parent's
    score plus log q(child)); the k best of them are expanded next;
  * re-ranking: of the k + (D - 1) k^2 candidates, the N - 1 best by score form the tree
    (N = `num_nodes`, the root included).
The scores are the draft's own log-softmax (temperature 1, whatever the sampling warper), so the
tree is a deterministic function of the draft: its children are point masses, verified by
`tree_accept(draft_probs=None)`, lossless at every temperature. Sequoia's rule for children
sampled without replacement would be biased here, since a node is kept or dropped by its own draft
score (tests/test_dynamic_tree.py plants exactly that bug).

The kept set is connected: a child's score is its parent's plus a log-probability <= 0, which
float rounding cannot make larger, so a parent scores at least as high. Ties happen (a peaked q
rounds to 1, log 0; a q that underflows to 0 gives -inf), so candidates are ordered by (score
descending, depth ascending, candidate index ascending), which puts every parent ahead of its
children. `select_nodes` also reports closure per node, and the drafter proposes only nodes whose
parents were kept (`Proposal.valid`), so even a broken invariant could not emit a wrong tree.

The kept nodes are numbered as `TokenTree` numbers its nodes: breadth-first, siblings contiguous
in their parents' order and by rank (the order of the draft's top-k), into a per-row topology
(`TracedTree`, `traced.py`) that the decoder scores and verifies.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

_INT32_MAX = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class DynamicTree:
    """The static budget of an EAGLE-2 dynamic tree (hashable: a jit argument).

    Attributes:
      depth: D, the deepest level drafted (>= 1); one draft call per level.
      top_k: k, children proposed per expanded node and nodes expanded per level (>= 1).
      num_nodes: N, nodes verified per row, the root included (2 <= N <= pool_size + 1).
    """

    depth: int
    top_k: int
    num_nodes: int

    def __post_init__(self):
        for name in ("depth", "top_k", "num_nodes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"DynamicTree.{name} must be an int; got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.depth < 1 or self.top_k < 1:
            raise ValueError(
                f"DynamicTree needs depth >= 1 and top_k >= 1; got depth={self.depth}, "
                f"top_k={self.top_k}"
            )
        if not 2 <= self.num_nodes <= self.pool_size + 1:
            raise ValueError(
                f"DynamicTree.num_nodes must lie in [2, {self.pool_size + 1}] (the root and at "
                f"most the {self.pool_size} candidates of depth={self.depth}, top_k="
                f"{self.top_k}); got {self.num_nodes}"
            )
        if (self.top_k + 1) ** self.depth > _INT32_MAX:
            raise ValueError(
                f"DynamicTree: top_k={self.top_k} and depth={self.depth} are too large to order "
                "the candidates in int32 ((top_k + 1) ** depth must stay below 2**31)"
            )

    @classmethod
    def parse(cls, text: str) -> DynamicTree:
        """From a config string "depth,top_k,num_nodes", e.g. "5,4,16"."""
        try:
            depth, top_k, num_nodes = (int(x) for x in str(text).replace(" ", "").split(","))
        except ValueError:
            raise ValueError(
                f"dynamic tree {text!r}: expected 'depth,top_k,num_nodes', e.g. '5,4,16'"
            ) from None
        return cls(depth, top_k, num_nodes)

    @property
    def pool_size(self) -> int:
        """Candidates drafted per row: k at depth 1, k^2 at each deeper level."""
        return self.top_k + (self.depth - 1) * self.top_k**2

    @property
    def max_depth(self) -> int:
        return self.depth

    @property
    def max_branch(self) -> int:
        return self.top_k

    def __repr__(self) -> str:
        return f"DynamicTree(depth={self.depth}, top_k={self.top_k}, num_nodes={self.num_nodes})"


def select_nodes(tokens, scores, parents, ranks, depths, tree: DynamicTree):
    """Keeps the best num_nodes - 1 candidates and numbers them as a tree (per row).

    Args:
      tokens: int32 [batch, P] each candidate's token.
      scores: float32 [batch, P] cumulative draft log-probabilities (<= its parent's).
      parents: int32 [batch, P] the parent's candidate index (< own index), -1 for the root.
      ranks: int32 [batch, P] rank among the parent's top-k children, in [0, top_k).
      depths: int32 [batch, P] depth in [1, tree.depth] (a parent's depth + 1).
      tree: the budget (N = tree.num_nodes nodes with the root; ranks below tree.top_k).

    Returns:
      node_tokens int32 [batch, N - 1] (nodes 1..N-1), tree_parents int32 [batch, N] (a
      `TracedTree`'s parents), closed bool [batch, N - 1]: the node's parent was kept (True for
      every node: the invariant the module docstring proves), order int32 [batch, N - 1]: each
      node's candidate index.
    """
    batch, pool = tokens.shape
    num_nodes, base = tree.num_nodes, tree.top_k + 1
    # A path key: the ranks along the path (plus one) read as base-(k + 1) digits, so that within
    # a depth the order is the parents' order, then rank. Each pass settles one more level.
    path_key = jnp.zeros((batch, pool), jnp.int32)
    up = jnp.maximum(parents, 0)
    for _ in range(tree.depth):
        above = jnp.where(parents < 0, 0, jnp.take_along_axis(path_key, up, axis=1))
        path_key = above * base + ranks + 1
    index = jnp.broadcast_to(jnp.arange(pool, dtype=jnp.int32), (batch, pool))

    def row(tok, score, parent, depth, path_key, idx):
        best = jnp.lexsort((idx, depth, -score))  # score descending, shallower, earlier
        kept = jnp.zeros(idx.shape, bool).at[best[: num_nodes - 1]].set(True)
        order = jnp.lexsort((path_key, depth, (~kept).astype(jnp.int32)))[: num_nodes - 1]
        number = jnp.zeros(idx.shape, jnp.int32).at[order].set(jnp.arange(1, num_nodes))
        up = parent[order]
        closed = (up < 0) | kept[jnp.maximum(up, 0)]
        tree_parent = jnp.where(up < 0, 0, number[jnp.maximum(up, 0)])
        tree_parents = jnp.concatenate([jnp.array([-1], jnp.int32), tree_parent])
        return tok[order], tree_parents, closed, order.astype(jnp.int32)

    return jax.vmap(row)(tokens, scores, parents, depths, path_key, index)
