"""`MedusaTreeDrafter`: a static token tree from K Medusa heads, in one call.

Medusa's heads all read the same feature (the target's hidden state after the last accepted
token, `drafters/medusa.py`), and head d proposes the token d places ahead whatever comes
between. So every node at depth d draws its children from the same q_d = head d's warped
distribution: a parent's children are drawn from it independently (`replacement=True`,
SpecInfer), without replacement (Sequoia: the tree's shape is fixed before its children are
drawn, so the rule applies), or taken as head d's top-k (point masses, the default at t = 0;
Medusa's own "Cartesian product" trees). Each child's q is the law it was drawn from, so
`tree_accept` verifies it exactly; one head call drafts the whole tree (depth <= K).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.argmax import has_nan, top_k
from specjax.decoding.drafters.base import Proposal
from specjax.decoding.drafters.medusa import MedusaDrafter, MedusaState
from specjax.decoding.state import Sequences
from specjax.decoding.trees.drafter import check_tree_drafter, top_k_children
from specjax.decoding.trees.topology import TokenTree, draw_children, draw_children_over_ids
from specjax.models.draft_vocab import full_rows


@dataclasses.dataclass(frozen=True)
class MedusaTreeDrafter(MedusaDrafter):
    """Drafts `tree` with `MedusaHeads` (see the module docstring).

    Attributes:
      heads, warper: as `MedusaDrafter`'s.
      tree: the static topology (depth <= the number of heads).
      replacement: sampled siblings independent (True) or without replacement (False).
      children: "sample", "top_k" or "auto" (top_k when the warper is greedy).
    """

    tree: TokenTree = None
    replacement: bool = True
    children: str = "auto"

    def __post_init__(self):
        super().__post_init__()
        check_tree_drafter(self.tree, self.children, self.replacement)
        if self.tree.max_depth > self.heads.num_heads:
            raise ValueError(
                f"tree: depth {self.tree.max_depth} exceeds the {self.heads.num_heads} Medusa "
                "heads (head d drafts depth d)"
            )

    @property
    def deterministic(self) -> bool:
        """True when children are the heads' top-k (point masses)."""
        return top_k_children(self.children, self.warper)

    def check_gamma(self, gamma: int) -> None:
        """Raises ValueError unless gamma is the tree's N - 1 nodes (not the chain's bound on
        the heads, which the tree's depth already meets)."""
        if gamma != self.tree.num_nodes - 1:
            raise ValueError(
                f"a MedusaTreeDrafter proposes num_nodes - 1 = {self.tree.num_nodes - 1} tokens; "
                f"got gamma={gamma}"
            )

    def propose(self, params, state: MedusaState, seq: Sequences, key, gamma: int) -> Proposal:
        """Nodes 1..N-1: tokens [batch, N - 1], probs [batch, N - 1, vocab] or None."""
        tree = self.tree
        self.check_gamma(gamma)
        del seq
        target_params, head_params = params
        ids = self.heads.draft_ids
        if ids is None:
            logits = self.heads.logits(target_params, head_params, state.last)  # [batch, K, V]
        else:  # children over the N draft ids alone (q is 0 off them), mapped to token ids
            logits = self.heads.draft_logits(head_params, state.last)  # [batch, K, N]
        parents, ranks = np.asarray(tree.parents), np.asarray(tree.ranks)
        batch = logits.shape[0]
        tokens, probs = [], []
        for d in range(tree.max_depth):  # level d's nodes get their children from head d + 1
            first, end = tree.levels[d]
            lo, hi = tree.levels[d + 1]
            num = int(max(len(tree.children[i]) for i in range(first, end)))
            parent = parents[lo:hi] - first  # [n_{d+1}] parent's index within level d
            if self.deterministic:
                top = top_k(logits[:, d], num)[1].astype(jnp.int32)  # [batch, num]
                top = top if ids is None else jnp.asarray(ids, jnp.int32)[top]
                tokens.append(top[:, ranks[lo:hi]])
                continue
            q = self.warper.probs(logits[:, d])  # [batch, V] (V = vocab, or N draft ids)
            each = jnp.broadcast_to(q[:, None], (batch, end - first, q.shape[-1]))
            level_key = jax.random.fold_in(key, d)
            if ids is None:
                draws = draw_children(level_key, each, num, replacement=self.replacement)
            else:
                draws = draw_children_over_ids(
                    level_key, each, ids, self.vocab_size, num, replacement=self.replacement
                )
                q = full_rows(q, ids, self.vocab_size, fill=0.0)  # [batch, vocab]
            tokens.append(draws[:, parent, ranks[lo:hi]])  # [batch, n_{d+1}]
            probs.append(jnp.broadcast_to(q[:, None], (batch, hi - lo, q.shape[-1])))
        node_tokens = jnp.concatenate(tokens, axis=1)  # [batch, N - 1]
        if self.deterministic:  # no q to show NaN logits: flag them from the heads used
            nan = has_nan(logits[:, : tree.max_depth], axis=(1, 2))  # [batch]
            return Proposal(node_tokens, None, None, state, calls=1, draft_nan=nan)
        return Proposal(node_tokens, jnp.concatenate(probs, axis=1), None, state, calls=1)
