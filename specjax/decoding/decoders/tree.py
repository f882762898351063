"""Token-tree speculative decoding: one target call verifies a whole tree of drafts.

The iteration is the chain's (`SpeculativeSteps`: propose, score, verify, emit, commit) with
three parts replaced:
  * score: the target reads the N tree nodes in one call, node i written at cache slot
    L - 1 + i with position L - 1 + depth(i), attending to the committed prefix and its own
    ancestors (`tree_inputs`; L is the row's sequence length, the root is its last token);
  * verify: `tree_accept` (SpecInfer's rule with `replacement=True`, Sequoia's without);
  * commit: the accepted path's cache entries move to slots L - 1 .. L - 1 + n (`select`), and
    the target keeps the first L + n tokens, as a chain that accepted n drafts would.
Rows accept, advance and roll back independently, inside the same jitted `while_loop`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from specjax.decoding import arguments
from specjax.decoding.decoders.steps import SpeculativeSteps
from specjax.decoding.drafters.base import check_gamma, feature_layers, is_drafter
from specjax.decoding.drafters.feature_heads import check_feature_target
from specjax.decoding.prefill import target_features
from specjax.decoding.rules.point_mass import tree_point_mass_accept
from specjax.decoding.rules.tree import tree_accept
from specjax.decoding.sampling import Warper, check_warper
from specjax.decoding.state import last_tokens
from specjax.decoding.trees.drafter import CHILDREN_MODES, TreeDrafter
from specjax.decoding.trees.dynamic import DynamicTree
from specjax.decoding.trees.eagle import EagleTreeDrafter
from specjax.decoding.trees.eagle_dynamic import EagleDynamicTreeDrafter
from specjax.decoding.trees.medusa import MedusaTreeDrafter
from specjax.decoding.trees.topology import TokenTree, tree_inputs
from specjax.decoding.trees.traced import TracedTree, traced_tree_inputs
from specjax.models.eagle_head import EagleHead
from specjax.models.interface import check_pair, check_vocab
from specjax.models.kv_cache import rollback
from specjax.models.medusa_heads import MedusaHeads


@dataclasses.dataclass(frozen=True)
class TreeSpeculativeDecoder(SpeculativeSteps):
    """Lossless speculative sampling from `target` with a token tree of proposals per call.

    Attributes:
      target: the model whose distribution the output follows exactly.
      draft: a model (drafted level by level by a `TreeDrafter`), a feature head (`EagleHead`,
        drafted by an `EagleTreeDrafter`, or an `EagleDynamicTreeDrafter` for a `DynamicTree`;
        `MedusaHeads`, by a `MedusaTreeDrafter`) or a tree drafter (an object with the Drafter
        methods and this decoder's `tree`, e.g. `LookupTreeDrafter`).
      tree: the static topology (`TokenTree`; a chain is `TokenTree.chain(gamma)`), or a
        `DynamicTree` budget (EAGLE-2: each row's tree chosen per step by an `EagleHead` draft's
        scores, its children point masses, so `replacement` does not apply).
      warper: applied to both models' logits (temperature 0 = greedy).
      replacement: sampled siblings are independent (True, SpecInfer) or drawn without
        replacement (False, Sequoia).
      cache_len: positions per row in caches and the output buffer. None (the default): the
        models' position limit (the smaller learned position table of target and draft), else
        512.
      min_bucket: smallest padded prompt width.
      children: for a model draft, "sample", "top_k" or "auto" (see `TreeDrafter`).
    """

    target: Any
    draft: Any
    tree: TokenTree | DynamicTree
    warper: Warper
    replacement: bool = True
    cache_len: int | None = None
    min_bucket: int = 16
    children: str = "auto"

    def __post_init__(self):
        # The tree's type first: the drafter check below compares trees.
        if not isinstance(self.tree, (TokenTree, DynamicTree)):
            raise TypeError(
                "tree must be a TokenTree (TokenTree.from_branching(...)) or a DynamicTree; "
                f"got {self.tree!r}"
            )
        if isinstance(self.tree, DynamicTree):
            if not isinstance(self.draft, EagleHead) and not is_drafter(self.draft):
                raise ValueError(
                    f"draft: a DynamicTree is drafted by a feature head (EagleHead) or a drafter "
                    f"that proposes per-row trees; got {type(self.draft).__name__} (a model "
                    "draft takes a static TokenTree)"
                )
            if self.children == "sample":
                raise ValueError(
                    "children='sample' cannot build a DynamicTree: its children are the draft's "
                    "top-k (point masses), chosen by the draft's scores"
                )
        if isinstance(self.draft, (EagleHead, MedusaHeads)):
            check_vocab(self.target, self.draft)
        elif is_drafter(self.draft):
            check_vocab(self.target, self.draft)
            if getattr(self.draft, "tree", None) != self.tree:
                raise ValueError(
                    f"draft {self.draft!r} drafts a different tree than this decoder's {self.tree}"
                )
        else:
            check_pair(self.target, self.draft)
        if self.tree.max_depth < 1:
            raise ValueError("tree must have at least one node below the root")
        check_warper(self.warper)
        arguments.check_flag(self.replacement, "replacement")
        drawn = getattr(self.draft, "replacement", None) if is_drafter(self.draft) else None
        if drawn is not None and drawn != self.replacement:
            # Each sibling rule is exact only for its own draw (tests/test_tree_decoding_sampling
            # catches a mismatched one): a tree drafter's draw and this decoder's rule must agree.
            raise ValueError(
                f"replacement={self.replacement!r} verifies siblings drawn "
                f"{'with' if self.replacement else 'without'} replacement, but draft "
                f"{type(self.draft).__name__} draws them with replacement={drawn!r}: pass "
                f"replacement={drawn!r} (or build the drafter with this decoder's)"
            )
        if self.children not in CHILDREN_MODES:
            raise ValueError(f"children must be one of {CHILDREN_MODES}; got {self.children!r}")
        check_feature_target(self.target, self.drafter)
        check_gamma(self.drafter, self.lookahead)
        arguments.resolve_cache_len(self)

    @property
    def drafter(self):
        """The proposer: `draft` if it is a drafter, else a TreeDrafter around the model."""
        if is_drafter(self.draft):
            return self.draft
        if isinstance(self.draft, MedusaHeads):  # one call on the last feature
            return MedusaTreeDrafter(
                self.draft, self.warper, self.tree, self.replacement, self.children
            )
        if isinstance(self.draft, EagleHead) and isinstance(self.tree, DynamicTree):
            return EagleDynamicTreeDrafter(self.draft, self.warper, self.tree)
        if isinstance(self.draft, EagleHead):  # a feature head, with this decoder's warper
            return EagleTreeDrafter(
                self.draft, self.warper, self.tree, self.replacement, self.children
            )
        return TreeDrafter(self.draft, self.warper, self.tree, self.replacement, self.children)

    @property
    def lookahead(self) -> int:
        """Slots a step writes past the root: the N - 1 proposed nodes."""
        return self.tree.num_nodes - 1

    @property
    def cache_headroom(self) -> int:
        """Slots past the sequence a step may write in any cache: the lookahead, or for a
        `DynamicTree` the head's expanded candidates too ((D - 1) k, `eagle_dynamic.py`)."""
        if isinstance(self.tree, DynamicTree):
            return max(self.lookahead, (self.tree.depth - 1) * self.tree.top_k)
        return self.lookahead

    @property
    def depth(self) -> int:
        return self.tree.max_depth

    @property
    def branch(self) -> int:
        return self.tree.max_branch

    # -- the step's seams (see SpeculativeSteps) ---------------------------------------------

    def score(self, target_params, t_state, seq, proposal, active, features: bool = False):
        """The target's logits [batch, N, vocab] at every node of the tree and its state; with
        `features`, also the drafter's features at every node [batch, N, F]
        (`prefill.target_features`)."""
        tree = self.topology(proposal)
        nodes = jnp.concatenate([last_tokens(seq, 1), proposal.tokens], axis=1)  # [batch, N]
        starts = t_state.lengths  # [batch] = L - 1: the root's slot
        if isinstance(tree, TracedTree):
            positions, mask = traced_tree_inputs(tree, starts, self.cache_len)
        else:
            positions, mask = tree_inputs(tree, starts, self.cache_len)
        num_new = jnp.where(active, tree.num_nodes, 0).astype(jnp.int32)
        if features:
            layers = feature_layers(self.drafter)
            out = self.target.forward(
                target_params, t_state, nodes, num_new, positions=positions, mask=mask,
                return_layers=layers,
            )  # fmt: skip
            return out.logits, out.state, target_features(out, layers)
        return self.target.apply(
            target_params, t_state, nodes, num_new, positions=positions, mask=mask
        )

    def topology(self, proposal):
        """The tree this proposal fills: the static `tree`, or the per-row `TracedTree` of a
        dynamic tree (`proposal.parents`)."""
        if proposal.parents is None:
            if isinstance(self.tree, DynamicTree):
                raise ValueError(f"{self.drafter!r} proposed no per-row tree for {self.tree}")
            return self.tree
        return TracedTree(proposal.parents, self.tree.max_depth, self.tree.max_branch)

    @staticmethod
    def accepted_features(hidden, path):
        """Hidden states along the accepted path: [batch, N, embed] -> [batch, depth + 1, embed]
        (entries past num_accepted come from node 0 and are not valid)."""
        index = jnp.maximum(path, 0)[:, :, None]  # [batch, depth + 1, 1]
        return jnp.take_along_axis(hidden, index, axis=1)

    def _check_children(self, proposal) -> None:
        """A dynamic tree's children must be point masses (`proposal.probs` None): its nodes were
        kept or dropped by the draft's own scores, which the sampled-children rules do not
        allow for (biased; the tests plant that bug)."""
        if isinstance(self.tree, DynamicTree) and proposal.probs is not None:
            raise ValueError(
                f"{self.drafter!r} reported draft probs for a DynamicTree: its children are "
                "point masses (probs None); the sampled-children rules are biased on a tree "
                "pruned by its own draws"
            )

    def verify(self, key, proposal, p):
        """(tokens [batch, depth + 1], num_accepted [batch], path [batch, depth + 1])."""
        self._check_children(proposal)
        return self.verify_tree(key, proposal, p)

    def verify_point_mass(self, proposal, logits):
        """`verify`'s result read off the target's argmax tokens where the warper is greedy,
        else None (then `verify` runs `tree_accept` on p).

        For a point-mass p, `tree_accept` descends into the first proposed child holding the
        target's token at each node and emits that token where none does, whatever the
        children's q (`rules.point_mass.tree_point_mass_accept`, proof there): the same tokens,
        counts and path, without the [batch, N, vocab] residual passes. A subclass that replaces
        `verify` or `verify_tree` keeps its own rule.
        """
        own = (TreeSpeculativeDecoder.verify, TreeSpeculativeDecoder.verify_tree)
        if not self.warper.ends_greedy or (type(self).verify, type(self).verify_tree) != own:
            return None
        self._check_children(proposal)
        nodes, valid = _with_root(proposal)
        return tree_point_mass_accept(
            self.topology(proposal),
            nodes,
            self.warper.greedy_tokens(logits, no_mass=-1),  # [batch, N]; -1: p without mass
            fill_value=0,
            valid=valid,
        )

    def verify_tree(self, key, proposal, p):
        """`tree_accept` on the proposal's tree (no check of what kind of children it has)."""
        node_tokens, valid = _with_root(proposal)
        probs = proposal.probs
        if probs is not None:
            probs = jnp.concatenate([jnp.zeros_like(probs[:, :1]), probs], axis=1)
        return tree_accept(
            key,
            self.topology(proposal),
            node_tokens,
            probs,
            p,
            replacement=self.replacement,
            fill_value=0,
            valid=valid,
        )

    def commit_target(self, t_state, old_len, n, path, active):
        """Moves the accepted path to slots L - 1 .. L - 1 + n; keeps L + n tokens."""
        identity = jnp.arange(self.depth + 1)[None, :]
        index = jnp.where(active[:, None], jnp.maximum(path, 0), identity)
        t_state = t_state.select(old_len - 1, index)
        return rollback(t_state, jnp.where(active, old_len + n, t_state.lengths))

    def acceptance_events(self, proposal, n, path, active):
        """(accepted, tested [batch, depth], accepted rank [batch, depth, branch])."""
        tree = self.topology(proposal)
        batch = n.shape[0]
        depth = jnp.arange(tree.max_depth)[None, :]  # [1, depth]
        accepted = (depth < n[:, None]) & active[:, None]
        if isinstance(tree, TracedTree):
            slots, node_ranks = tree.child_slots(), tree.ranks()  # [batch, N, branch], [batch, N]
        else:
            slots = jnp.asarray(tree.child_slots())  # [N, branch]
            node_ranks = jnp.asarray(np.asarray(tree.ranks, np.int32))[None, :]  # [1, N]
        if proposal.valid is None:
            has_children = jnp.broadcast_to((slots >= 0).any(-1), (batch, tree.num_nodes))
        else:
            valid = jnp.concatenate([jnp.ones_like(proposal.valid[:, :1]), proposal.valid], 1)
            if slots.ndim == 2:
                child_valid = jnp.take(valid, jnp.maximum(slots, 0), axis=1) & (slots >= 0)
            else:
                flat = jnp.maximum(slots, 0).reshape(batch, -1)
                child_valid = jnp.take_along_axis(valid, flat, axis=1).reshape(slots.shape)
                child_valid = child_valid & (slots >= 0)
            has_children = child_valid.any(-1)  # [batch, N]
        at_depth = jnp.maximum(path[:, :-1], 0)  # [batch, depth] the node reached at each depth
        reached_kids = jnp.take_along_axis(has_children, at_depth, axis=1)
        tested = (depth <= n[:, None]) & reached_kids & active[:, None]
        node_ranks = jnp.broadcast_to(node_ranks, (batch, tree.num_nodes))
        ranks = jnp.take_along_axis(node_ranks, jnp.maximum(path[:, 1:], 0), axis=1)
        one_hot = ranks[..., None] == jnp.arange(tree.max_branch)[None, None, :]
        rank = (one_hot & accepted[..., None]).astype(jnp.int32)  # [batch, depth, branch]
        return accepted, tested, rank


def _with_root(proposal):
    """The proposal's nodes with the root (node 0) in front: (tokens int32 [batch, N], the
    root's entry 0; valid bool [batch, N] with the root valid, or None)."""
    batch = proposal.tokens.shape[0]
    nodes = jnp.concatenate([jnp.zeros((batch, 1), jnp.int32), proposal.tokens], axis=1)
    valid = proposal.valid
    if valid is not None:
        valid = jnp.concatenate([jnp.ones((batch, 1), bool), valid], axis=1)
    return nodes, valid
