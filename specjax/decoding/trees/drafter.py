"""Drafting a token tree with any specjax model, one draft call per depth.

`TreeDrafter` is the tree twin of `ModelDrafter` (same pending-token invariant, same prefill):

  * call 0 feeds the 1 or 2 tokens the model has not seen (the root is the last of them) and
    gives q at the root;
  * call d (d = 1 .. max_depth - 1) feeds every node of depth d at once, written at cache slots
    L - 1 + node with positions L - 1 + d and the tree's ancestor mask (`tree_inputs`), and
    gives q at each of them;
  * after each call the children of the level's nodes are drawn from those q: independently
    (`replacement=True`, SpecInfer), without replacement by a Gumbel race (`replacement=False`,
    Sequoia; `draw_children`), or deterministically as the draft's top-k (`children="top_k"`,
    the default for a greedy warper, where a sampled q is one-hot and every child would repeat
    the argmax). Sampled children come with the parent's q (the law `tree_accept` verifies them
    against); top-k children are point masses (probs None), which keeps the rule exact.

`commit` compacts the accepted path's entries into consecutive slots (the state's `select`)
and keeps what the model has seen of it: the root and the accepted nodes above the last level
(leaves at the deepest level are drawn, never fed).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.argmax import has_nan, top_k
from specjax.decoding.arguments import check_flag
from specjax.decoding.drafters.base import Proposal, Verdict
from specjax.decoding.prefill import prefill
from specjax.decoding.sampling import Warper, check_warper
from specjax.decoding.state import Sequences, last_tokens
from specjax.decoding.trees.topology import TokenTree, draw_children, tree_inputs
from specjax.models.kv_cache import rollback

CHILDREN_MODES = ("auto", "sample", "top_k")


def check_tree_drafter(tree, children: str, replacement) -> None:
    """The checks every tree drafter makes of its topology, children mode and sibling draw."""
    check_flag(replacement, "replacement")
    if not isinstance(tree, TokenTree):
        raise TypeError(f"tree must be a TokenTree; got {tree!r}")
    if tree.max_depth < 1:
        raise ValueError("tree must have at least one node below the root")
    if children not in CHILDREN_MODES:
        raise ValueError(f"children must be one of {CHILDREN_MODES}; got {children!r}")


def top_k_children(children: str, warper) -> bool:
    """Whether children are the draft's top-k (point masses): "top_k", or "auto" when greedy."""
    return children == "top_k" or (children == "auto" and warper.is_greedy)


def check_top_k_children(tree: TokenTree, vocab_size: int, mode: str) -> None:
    """Raises ValueError when a node of `tree` has more top-k children than the draft has tokens.

    Top-k children are distinct tokens, so a node can have at most `vocab_size` of them
    (`jax.lax.top_k` would fail inside jit with a message that names neither). `mode` says why
    the children are top-k ("a greedy warper", "children='top_k'") in the message.
    """
    if tree.max_branch > vocab_size:
        raise ValueError(
            f"tree: a node has {tree.max_branch} children, but top-k children ({mode}) "
            f"are distinct tokens of the draft's {vocab_size}; use at most "
            f"{vocab_size} children per node, or children='sample'"
        )


@dataclasses.dataclass(frozen=True)
class TreeDrafter:
    """Drafts a static token tree level by level with a model (see the module docstring).

    Attributes:
      model: the draft model (any specjax model; its state needs `select`).
      warper: the sampling warper (the decoder's).
      tree: the topology.
      replacement: sampled siblings drawn independently (True) or without replacement (False).
      children: "sample" (from the warped q), "top_k" (the draft's top-k, deterministic) or
        "auto": top_k when the warper is greedy, else sample.
    """

    model: Any
    warper: Warper
    tree: TokenTree
    replacement: bool = True
    children: str = "auto"

    def __post_init__(self):
        check_warper(self.warper)
        check_tree_drafter(self.tree, self.children, self.replacement)
        if self.deterministic:
            mode = "children='top_k'" if self.children == "top_k" else "a greedy warper"
            check_top_k_children(self.tree, self.vocab_size, mode)

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    @property
    def deterministic(self) -> bool:
        """True when children are the draft's top-k (point masses)."""
        return top_k_children(self.children, self.warper)

    def init(self, params, prompts, prompt_lengths, cache_len: int):
        """Prefills the model with every prompt token but the last."""
        state = self.model.init_state(prompts.shape[0], cache_len)
        return prefill(self.model, params, state, prompts, prompt_lengths)

    def _draw(self, key, logits, num):
        """Children of every node of a level: tokens [batch, n, num], q [batch, n, vocab] or
        None when deterministic, and then bool [batch] which rows' logits held NaN (q shows it
        otherwise: None)."""
        if self.deterministic:
            top = top_k(logits, num)[1].astype(jnp.int32)
            return top, None, has_nan(logits).any(axis=1)
        if num == 1:  # one child: a plain draw (the same key use as ModelDrafter's)
            token, q = self.warper.draw(key, logits)
            return token[..., None], q, None
        q = self.warper.probs(logits)
        return draw_children(key, q, num, replacement=self.replacement), q, None

    def propose(self, params, state, seq: Sequences, key, gamma: int) -> Proposal:
        """Drafts nodes 1..N-1: tokens [batch, N - 1], probs [batch, N - 1, vocab] or None."""
        tree = self.tree
        if gamma != tree.num_nodes - 1:
            raise ValueError(
                f"a TreeDrafter proposes num_nodes - 1 = {tree.num_nodes - 1} tokens; "
                f"got gamma={gamma}"
            )
        active = ~seq.done  # [batch]
        num_pending = (seq.lengths - state.lengths) * active.astype(jnp.int32)  # [batch] 1 or 2
        pending = last_tokens(seq, 2)  # [batch, 2] oldest first
        pending = jnp.where((num_pending == 2)[:, None], pending, pending[:, 1:])
        logits, state = self.model.apply(params, state, pending, num_pending)
        last = jnp.maximum(num_pending - 1, 0)[:, None, None]  # [batch, 1, 1]
        level_logits = jnp.take_along_axis(logits, last, axis=1)  # [batch, 1, vocab] the root
        starts = seq.lengths - 1  # [batch] the root's slot
        max_len = seq.tokens.shape[1]
        parents = np.asarray(tree.parents)
        ranks = np.asarray(tree.ranks)
        batch = seq.lengths.shape[0]
        tokens = [jnp.zeros((batch, 1), jnp.int32)]  # per level, the root first
        probs = [jnp.zeros((batch, 1, self.vocab_size), jnp.float32)]
        nan = jnp.zeros((batch,), bool)  # [batch] NaN in the logits top-k children came from
        for d in range(tree.max_depth):
            first, _ = tree.levels[d]
            lo, hi = tree.levels[d + 1]
            num = int(max(len(tree.children[i]) for i in range(*tree.levels[d])))
            draws, q, level_nan = self._draw(jax.random.fold_in(key, d), level_logits, num)
            if level_nan is not None:
                nan = nan | level_nan
            parent = parents[lo:hi] - first  # [n_{d+1}] parent's index within level d
            level_tokens = draws[:, parent, ranks[lo:hi]]  # [batch, n_{d+1}]
            tokens.append(level_tokens)
            if q is not None:
                probs.append(q[:, parent])
            if d + 1 < tree.max_depth:  # feed the level to get q at its nodes
                at = jnp.where(active, starts + lo, state.lengths)
                positions, mask = tree_inputs(tree, starts, max_len, nodes=range(lo, hi))
                level_logits, state = self.model.apply(
                    params,
                    rollback(state, at),
                    level_tokens,
                    jnp.where(active, hi - lo, 0).astype(jnp.int32),
                    positions=positions,
                    mask=mask,
                )
        node_tokens = jnp.concatenate(tokens, axis=1)[:, 1:]  # [batch, N - 1]
        if self.deterministic:
            return Proposal(node_tokens, None, None, state, calls=tree.max_depth, draft_nan=nan)
        node_probs = jnp.concatenate(probs, axis=1)[:, 1:]
        return Proposal(node_tokens, node_probs, None, state, calls=tree.max_depth)

    def commit(self, state, verdict: Verdict):
        """Moves the accepted path to consecutive slots; keeps what the model has seen of it."""
        depth = self.tree.max_depth
        starts = verdict.lengths_before - 1  # [batch] the root's slot
        identity = jnp.arange(depth + 1)[None, :]
        index = jnp.where(verdict.active[:, None], jnp.maximum(verdict.path, 0), identity)
        state = state.select(starts, index)
        kept = verdict.lengths_before + jnp.minimum(verdict.num_accepted, depth - 1)
        return rollback(state, jnp.where(verdict.active, kept, state.lengths))
