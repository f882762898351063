"""`EagleTreeDrafter`: a static token tree drafted by an EAGLE-1 head, one head call per depth.

The head's bookkeeping is the chain drafter's (`drafters/eagle.py`): it first catches up on the
true pairs (the target's features along the last accepted path), which gives the predicted
feature after the root and so q at the root. Then, level by level as `TreeDrafter` does for a
model, every node of depth d is fed as the pair (its parent's predicted feature, its token),
written at head slot r + node (r the slot of the root's pair) with position r + depth and the
tree's ancestor mask (`tree_inputs`), which gives each node's predicted feature and the q of
its children. Children are drawn as `TreeDrafter` draws them (sampled with or without
replacement with the parent's q, or the head's top-k as point masses at t = 0).

`commit` is the chain's: the tree's pairs were made on predicted features, so the head keeps
only its true pairs and the next `propose` catches up on the accepted path's real features
(`Verdict.features`, gathered along the path by the tree decoder).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.drafters.base import Proposal
from specjax.decoding.drafters.eagle import EagleDrafter
from specjax.decoding.state import Sequences
from specjax.decoding.trees.drafter import TreeDrafter, check_tree_drafter, top_k_children
from specjax.decoding.trees.topology import TokenTree, draw_children_over_ids, tree_inputs
from specjax.models.draft_vocab import full_rows
from specjax.models.kv_cache import rollback


@dataclasses.dataclass(frozen=True)
class EagleTreeDrafter(EagleDrafter):
    """Drafts `tree` with an `EagleHead` (see the module docstring).

    Attributes:
      head, warper: as `EagleDrafter`'s.
      tree: the static topology.
      replacement: sampled siblings independent (True) or without replacement (False).
      children: "sample", "top_k" or "auto" (top_k when the warper is greedy), as TreeDrafter's.
    """

    tree: TokenTree = None
    replacement: bool = True
    children: str = "auto"

    def __post_init__(self):
        super().__post_init__()
        check_tree_drafter(self.tree, self.children, self.replacement)

    @property
    def deterministic(self) -> bool:
        """True when children are the head's top-k (point masses)."""
        return top_k_children(self.children, self.warper)

    # A negative control's switch (tests/test_eagle.py plants it): race children without
    # replacement over the draft vocabulary even where q's support there is exhausted, the
    # biased fallback the issue warns of. False: such levels race over the full vocabulary.
    race_inside_only = False

    def _draw_level(self, params, feats, key, num: int):
        """`TreeDrafter._draw` on the head's q at features [batch, n, embed]: children
        [batch, n, num], q [batch, n, vocab] or None, NaN rows or None.

        With a draft vocabulary, children are drawn over its N ids alone (q is 0 elsewhere, so
        the law is the full row's; sorted ids keep the order of ties) and q is scattered back;
        `draw_children_over_ids` falls back to full rows where a race without replacement
        would pass supp q."""
        ids = self.head.draft_ids
        if num == 1 and not self.deterministic:  # one child: the chain's draw (over the ids)
            token, q = self._draw(params, feats, key)  # [batch, n], [batch, n, vocab]
            return token[..., None], q, None
        if ids is None or num > len(ids):
            return TreeDrafter._draw(self, key, self.head.logits(*params, feats), num)
        sub = self.head.draft_logits(params[1], feats)  # [batch, n, N]
        if self.deterministic:
            children, _, nan = TreeDrafter._draw(self, key, sub, num)
            return jnp.asarray(ids, jnp.int32)[children], None, nan
        q_sub = self.warper.probs(sub)  # [batch, n, N]
        children = draw_children_over_ids(
            key,
            q_sub,
            ids,
            self.vocab_size,
            num,
            replacement=self.replacement,
            inside_only=self.race_inside_only,
        )
        return children, full_rows(q_sub, ids, self.vocab_size, fill=0.0), None

    def propose(self, params, state, seq: Sequences, key, gamma: int) -> Proposal:
        """Drafts nodes 1..N-1: tokens [batch, N - 1], probs [batch, N - 1, vocab] or None."""
        tree = self.tree
        if gamma != tree.num_nodes - 1:
            raise ValueError(
                f"an EagleTreeDrafter proposes num_nodes - 1 = {tree.num_nodes - 1} tokens; "
                f"got gamma={gamma}"
            )
        target_params, head_params = params
        active = ~seq.done  # [batch]
        cache, f_root, root = self.catch_up(params, state, seq, tree.max_depth + 1)
        max_len = cache.max_len
        parents, ranks = np.asarray(tree.parents), np.asarray(tree.ranks)
        batch = seq.lengths.shape[0]
        feats = f_root[:, None]  # [batch, n_d, embed] predicted features of level d's nodes
        tokens = [jnp.zeros((batch, 1), jnp.int32)]
        probs = [jnp.zeros((batch, 1, self.vocab_size), jnp.float32)]
        nan = jnp.zeros((batch,), bool)  # [batch] NaN in the logits top-k children came from
        for d in range(tree.max_depth):
            first, _ = tree.levels[d]
            lo, hi = tree.levels[d + 1]
            num = int(max(len(tree.children[i]) for i in range(*tree.levels[d])))
            draws, q, level_nan = self._draw_level(params, feats, jax.random.fold_in(key, d), num)
            if level_nan is not None:
                nan = nan | level_nan
            parent = parents[lo:hi] - first  # [n_{d+1}] parent's index within level d
            level_tokens = draws[:, parent, ranks[lo:hi]]  # [batch, n_{d+1}]
            tokens.append(level_tokens)
            if q is not None:
                probs.append(q[:, parent])
            if d + 1 < tree.max_depth:  # feed the level: each node's predicted feature
                positions, mask = tree_inputs(tree, root, max_len, nodes=range(lo, hi))
                embeds = self.head.target.embed(target_params, level_tokens)
                at = jnp.where(active, root + lo, cache.lengths)
                feats, cache = self.head.forward_features(
                    head_params,
                    rollback(cache, at),
                    feats[:, parent],
                    embeds,
                    jnp.where(active, hi - lo, 0).astype(jnp.int32),
                    positions=positions,
                    mask=mask,
                )
        node_tokens = jnp.concatenate(tokens, axis=1)[:, 1:]  # [batch, N - 1]
        state = state.replace(cache=cache)
        if self.deterministic:
            return Proposal(node_tokens, None, None, state, calls=tree.max_depth, draft_nan=nan)
        node_probs = jnp.concatenate(probs, axis=1)[:, 1:]
        return Proposal(node_tokens, node_probs, None, state, calls=tree.max_depth)
