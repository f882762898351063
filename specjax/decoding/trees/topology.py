"""Token-tree topology: `TokenTree`, the inputs that score its nodes, and how children are drawn.

A chain proposes one future; a token tree proposes several at each position, and the target
scores every node in the one call it makes anyway: each node attends to the committed prefix and
its own ancestors (SpecInfer's topology-aware causal mask, `tree_inputs`). The tree's lossless
verification is `specjax.decoding.rules.tree.tree_accept`; its drafters are in this room
(`drafter.py`: a model, `lookup.py`: prompt lookup), and `search.py` finds Sequoia's optimal
tree for a measured acceptance-by-rank vector.

Node 0 is the root: the last committed token, whose successor is being guessed. Under specjax's
pending-token invariant it is not yet in the target's cache, so a tree over a row of L tokens is
written at cache slots L - 1 + i (node i) with positions L - 1 + depth(i).

`draw_children` draws the children of a level from the draft's q: independently (SpecInfer), or
without replacement by a Gumbel race (Sequoia), in the law `tree_accept` verifies them with.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.argmax import top_k
from specjax.decoding.categorical import GUMBEL_MODE
from specjax.decoding.sampling import sample_from_probs
from specjax.models.draft_vocab import full_rows

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
    return top_k(race, num)[1].astype(jnp.int32)


def draw_children_over_ids(key, q_sub, ids, vocab_size: int, num: int, *, replacement: bool,
                           inside_only: bool = False):  # fmt: skip
    """`draw_children` for a q that is 0 off the sorted token `ids` (a draft vocabulary).

    Draws over the N ids alone, the same law as over full rows at N / vocab of the cost, and
    maps the draws to token ids. Without replacement, where some row's q holds fewer than `num`
    tokens of support, the race runs over full rows instead (one `lax.cond` for all rows, the
    full rows built only there): past supp q a sibling is uniform over every untried token,
    most of them off the ids.

    Args:
      key: PRNG key.
      q_sub: float [..., N] q at `ids`.
      ids: sorted distinct token ids, N of them.
      vocab_size: the target's vocabulary.
      num: children per row (static).
      replacement: as `draw_children`'s.
      inside_only: race inside the ids even past supp q: biased, for negative controls.

    Returns:
      int32 [..., num] token ids. (The rule's q is `full_rows(q_sub, ids, vocab_size, 0.0)`.)
    """
    id_map = jnp.asarray(ids, jnp.int32)

    def inside():
        return id_map[draw_children(key, q_sub, num, replacement=replacement)]

    def full():
        q = full_rows(q_sub, ids, vocab_size, fill=0.0)  # [..., vocab]
        return draw_children(key, q, num, replacement=False)

    if replacement:
        return inside()
    if num > len(ids):  # more children than ids: some always come from past them
        return full()
    enough = jnp.all(jnp.sum(q_sub > 0, axis=-1) >= num) | inside_only
    return jax.lax.cond(enough, inside, full)  # [..., num]
