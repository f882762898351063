"""A token tree whose topology is data: per-row parents, traced under jit (dynamic trees).

`TokenTree` is a static topology, a jit argument: every row of every step verifies the same
tree. A dynamic tree (EAGLE-2, `dynamic.py`) is chosen per row and per step from the draft's
scores, so its topology is an array. `TracedTree` holds it with the same conventions as
`TokenTree`: node 0 is the root (parent -1), nodes are numbered breadth-first (depths never
decrease), and the children of a node are contiguous and ordered by rank. Only the bounds are
static (the node count, the depth and the branching), so one compiled program serves every tree
within them.

`TracedTree.from_tree` lifts a static tree into this form; `tree_accept` and `tree_inputs` given
it compute exactly what they compute for the static tree (a test holds them bit-identical).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from specjax.decoding.trees.topology import TokenTree


@struct.dataclass
class TracedTree:
    """A per-row token-tree topology.

    Attributes:
      parents: int32 [batch, N]: parents[b, i] is node i's parent in row b (< i), parents[b, 0]
        = -1; breadth-first, siblings contiguous by rank (as `TokenTree.parents`).
      max_depth: static bound on every row's depth (>= 1).
      max_branch: static bound on any node's number of children (>= 1).
    """

    parents: jax.Array
    max_depth: int = struct.field(pytree_node=False)
    max_branch: int = struct.field(pytree_node=False)

    @classmethod
    def from_tree(cls, tree: TokenTree, batch: int) -> TracedTree:
        """The static `tree` in every one of `batch` rows."""
        if not isinstance(tree, TokenTree):
            raise TypeError(f"tree must be a TokenTree; got {tree!r}")
        parents = jnp.broadcast_to(jnp.asarray(tree.parents, jnp.int32), (batch, tree.num_nodes))
        return cls(parents, tree.max_depth, tree.max_branch)

    @property
    def num_nodes(self) -> int:
        return self.parents.shape[1]

    def depths(self) -> jax.Array:
        """int32 [batch, N]: each node's depth (the root 0)."""
        is_root = jnp.arange(self.num_nodes)[None, :] == 0
        up = jnp.maximum(self.parents, 0)
        depth = jnp.zeros_like(self.parents)
        for _ in range(self.max_depth):  # each pass settles one more level
            depth = jnp.where(is_root, 0, jnp.take_along_axis(depth, up, axis=1) + 1)
        return depth

    def ancestor_mask(self) -> jax.Array:
        """bool [batch, N, N]: mask[b, i, j] when j is i itself or one of its ancestors."""
        n = self.num_nodes
        eye = jnp.eye(n, dtype=bool)[None]  # [1, N, N]
        up = jnp.maximum(self.parents, 0)[:, :, None]  # [batch, N, 1]
        is_root = (jnp.arange(n) == 0)[None, :, None]
        mask = jnp.broadcast_to(eye, (self.parents.shape[0], n, n))
        for _ in range(self.max_depth):
            inherited = jnp.take_along_axis(mask, up, axis=1)  # the parent's row
            mask = eye | jnp.where(is_root, False, inherited)
        return mask

    def ranks(self) -> jax.Array:
        """int32 [batch, N]: each node's rank among its siblings (0 for the root)."""
        return jax.vmap(_row_ranks)(self.parents)

    def child_slots(self) -> jax.Array:
        """int32 [batch, N, max_branch]: each node's children in rank order, padded with -1
        (children ranked past max_branch are dropped: `check` reports them)."""
        return jax.vmap(lambda p: _row_slots(p, self.max_branch))(self.parents)

    def check(self) -> None:
        """Raises ValueError naming the first row that breaks the conventions (concrete only)."""
        parents = np.asarray(self.parents)
        depth_of = np.asarray(self.depths())
        for b, row in enumerate(parents):
            try:
                tree = TokenTree(tuple(int(x) for x in row))
            except ValueError as e:
                raise ValueError(f"TracedTree row {b}: {e}") from None
            if tree.max_depth > self.max_depth or tree.max_branch > self.max_branch:
                raise ValueError(
                    f"TracedTree row {b} has depth {tree.max_depth} and branching "
                    f"{tree.max_branch}, past the bounds {self.max_depth} and {self.max_branch}"
                )
            if tuple(depth_of[b]) != tree.depths:
                raise ValueError(f"TracedTree row {b}: depths disagree with the parents")


def _row_ranks(parents: jax.Array) -> jax.Array:
    """[N] -> [N]: i minus the first node with the same parent (siblings are contiguous)."""
    n = parents.shape[0]
    index = jnp.arange(n, dtype=jnp.int32)
    owner = jnp.where(index == 0, n, parents)  # the root has no parent: dropped
    first = jnp.full((n,), n, jnp.int32).at[owner].min(index, mode="drop")
    return jnp.where(index == 0, 0, index - first[jnp.maximum(parents, 0)]).astype(jnp.int32)


def _row_slots(parents: jax.Array, max_branch: int) -> jax.Array:
    """[N] -> [N, max_branch]: the children of each node in rank order, -1 padded."""
    n = parents.shape[0]
    ranks = _row_ranks(parents)
    owner = jnp.where(jnp.arange(n) == 0, n, parents)  # the root has no parent: dropped
    slots = jnp.full((n, max_branch), -1, jnp.int32)
    return slots.at[owner, ranks].set(jnp.arange(n, dtype=jnp.int32), mode="drop")


def traced_tree_inputs(tree: TracedTree, starts: jax.Array, max_len: int):
    """Positions and mask for scoring a `TracedTree`'s nodes written at slots starts[b] + node.

    The traced twin of `topology.tree_inputs` (all nodes, in order).

    Returns:
      positions int32 [batch, N]: starts + depth(node);
      mask bool [batch, N, max_len]: the committed prefix (slots < starts), and the slots of the
        node's ancestors and itself.
    """
    n = tree.num_nodes
    positions = starts[:, None] + tree.depths()  # [batch, N]
    ancestors = tree.ancestor_mask()  # [batch, N, N]
    offset = jnp.arange(max_len)[None, :] - starts[:, None]  # [batch, max_len]
    in_tree = (offset >= 0) & (offset < n)
    index = jnp.broadcast_to(jnp.clip(offset, 0, n - 1)[:, None, :], (offset.shape[0], n, max_len))
    seen = jnp.take_along_axis(ancestors, index, axis=2) & in_tree[:, None, :]
    return positions.astype(jnp.int32), seen | (offset < 0)[:, None, :]
