"""`EagleDynamicTreeDrafter`: EAGLE-2's dynamic tree drafted by an EAGLE-1 feature head.

The head's bookkeeping is the chain drafter's (`drafters/eagle.py`): it catches up on the true
pairs, which gives its predicted feature after the root, and `commit` keeps only true pairs.
Then, per level (`dynamic.py` has the selection and its proof):
  * depth 1: the head's top-k tokens at the root are the candidates, all k expanded;
  * level d = 1 .. D - 1: the k expanded nodes are fed to the head at once, each as the pair
    (its parent's predicted feature, its token), at head slot r + 1 + (d - 1) k + j (r the root
    pair's slot) with position r + d, attending to the committed pairs, the root pair and its own
    expanded ancestors; the head's top-k at each gives k^2 candidates scored by cumulative
    log-probability, of which the k best are expanded next.
Finally the N - 1 best candidates become the tree: tokens [batch, N - 1] and the per-row parents
(`Proposal.parents`), with probs None: point masses, whatever the warper.

The head writes slots up to r + (D - 1) k, which can pass the target's N - 1: the decoder
reserves `cache_headroom` = max(N - 1, (D - 1) k) slots past the sequence (`arguments.prepare`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.decoding.argmax import top_k
from specjax.decoding.drafters.base import Proposal
from specjax.decoding.drafters.eagle import EagleDrafter
from specjax.decoding.state import Sequences
from specjax.decoding.trees.dynamic import DynamicTree, select_nodes
from specjax.models.kv_cache import rollback


@dataclasses.dataclass(frozen=True)
class EagleDynamicTreeDrafter(EagleDrafter):
    """Drafts an EAGLE-2 dynamic tree with an `EagleHead` (see the module docstring).

    Attributes:
      head, warper: as `EagleDrafter`'s (the warper does not shape the tree: scores are the
        head's log-softmax).
      tree: the `DynamicTree` budget.
    """

    tree: DynamicTree = None

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.tree, DynamicTree):
            raise TypeError(f"tree must be a DynamicTree; got {self.tree!r}")
        if self.tree.top_k > self.vocab_size:  # a raw lax.top_k error at generate before
            raise ValueError(
                f"tree.top_k={self.tree.top_k} exceeds the vocabulary ({self.vocab_size} tokens)"
            )

    deterministic = True  # children are the head's top-k: point masses
    # A negative control's switch (tests/test_dynamic_tree.py plants it): report each
    # node's parent q as if the children had been sampled from it, the biased verification of a
    # pruned tree that the checks must catch. False here: no q is computed.
    parent_q = False

    def _top_k(self, params, feats, k: int):
        """The head's top-k at features [..., embed]: (log q [..., k] (<= 0), tokens [..., k],
        the warped q [..., vocab] or None). With a draft vocabulary the top-k is taken over its
        N ids (the same values and order as over the full row, where the rest is -inf)."""
        target_params, head_params = params
        ids = self.head.draft_ids
        if ids is not None and k <= len(ids) and not self.parent_q:
            sub = self.head.draft_logits(head_params, feats)  # [..., N]
            log_q = jnp.minimum(jax.nn.log_softmax(sub, axis=-1), 0.0)
            scores, index = top_k(log_q, k)
            return scores, jnp.asarray(ids, jnp.int32)[index], None
        logits = self.head.logits(target_params, head_params, feats).astype(jnp.float32)
        log_q = jnp.minimum(jax.nn.log_softmax(logits, axis=-1), 0.0)
        scores, tokens = top_k(log_q, k)
        return scores, tokens, (self.warper.probs(logits) if self.parent_q else None)

    def candidates(self, params, state, seq: Sequences):
        """Catches up and drafts the candidate pool (P = k + (D - 1) k^2 per row).

        Returns:
          (pool, head cache): pool = {"tokens", "scores" (cumulative log q), "parents" (pool
          index, -1 for the root), "ranks", "depths"}, each [batch, P], plus "q" [batch, P,
          vocab] (each candidate's parent's warped q) when `parent_q` is set.
        """
        tree = self.tree
        depth, k = tree.depth, tree.top_k
        target_params, head_params = params
        active = ~seq.done  # [batch]
        batch = seq.lengths.shape[0]
        cache, f_root, root = self.catch_up(params, state, seq, depth + 1)
        max_len = cache.max_len
        slots = 1 + (depth - 1) * k  # head slots past the root: the root pair, expanded nodes

        score, tok, q = self._top_k(params, f_root, k)  # [batch, k]
        pool_tok, pool_score = [tok], [score]
        pool_q = [jnp.repeat(q[:, None], k, axis=1)] if q is not None else []
        pool_parent = [jnp.full((batch, k), -1, jnp.int32)]
        pool_rank = [jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32), (batch, k))]
        pool_depth = [jnp.ones((batch, k), jnp.int32)]
        # The expanded nodes of the level: candidate index, token, score, parent's feature, and
        # the head slots they attend to past the root's ([batch, k, slots], offsets from r).
        cand = jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32), (batch, k))
        feat_in = jnp.broadcast_to(f_root[:, None], (batch, k, f_root.shape[-1]))
        seen = jnp.zeros((batch, k, slots), bool).at[:, :, 0].set(True)
        offset = jnp.arange(max_len)[None, :] - root[:, None]  # [batch, max_len]
        for d in range(1, depth):
            first = 1 + (d - 1) * k  # the level's first head slot past the root
            own = jnp.arange(slots)[None, :] == (first + jnp.arange(k))[:, None]  # [k, slots]
            seen = seen | own[None]
            inside = (offset >= 0) & (offset < slots)  # [batch, max_len]
            index = jnp.broadcast_to(
                jnp.clip(offset, 0, slots - 1)[:, None, :], (batch, k, max_len)
            )
            mask = jnp.take_along_axis(seen, index, axis=2) & inside[:, None, :]
            mask = mask | (offset < 0)[:, None, :]  # [batch, k, max_len]
            positions = jnp.broadcast_to((root + d)[:, None], (batch, k)).astype(jnp.int32)
            embeds = self.head.target.embed(target_params, tok)  # [batch, k, embed]
            at = jnp.where(active, root + first, cache.lengths)
            feats, cache = self.head.forward_features(
                head_params,
                rollback(cache, at),
                feat_in,
                embeds,
                jnp.where(active, k, 0).astype(jnp.int32),
                positions=positions,
                mask=mask,
            )
            child_score, child_tok, q = self._top_k(params, feats, k)  # [batch, k, k]
            if q is not None:
                pool_q.append(jnp.repeat(q, k, axis=1))
            level_score = (score[:, :, None] + child_score).reshape(batch, k * k)
            level_tok = child_tok.reshape(batch, k * k)
            pool_tok.append(level_tok)
            pool_score.append(level_score)
            pool_parent.append(jnp.repeat(cand, k, axis=1))
            pool_rank.append(jnp.tile(jnp.arange(k, dtype=jnp.int32), (batch, k)))
            pool_depth.append(jnp.full((batch, k * k), d + 1, jnp.int32))
            if d + 1 < depth:  # the k best of the level are expanded next
                score, best = top_k(level_score, k)  # ties: the earlier candidate
                parent = best // k  # [batch, k] which expanded node
                base = k + (d - 1) * k * k  # the level's first candidate index
                cand = (base + best).astype(jnp.int32)
                tok = jnp.take_along_axis(level_tok, best, axis=1)
                feat_in = jnp.take_along_axis(feats, parent[:, :, None], axis=1)
                seen = jnp.take_along_axis(seen, parent[:, :, None], axis=1)
        cat = lambda xs: jnp.concatenate(xs, axis=1)  # noqa: E731
        pool = {
            "tokens": cat(pool_tok),
            "scores": cat(pool_score),
            "parents": cat(pool_parent),
            "ranks": cat(pool_rank),
            "depths": cat(pool_depth),
        }
        if pool_q:
            pool["q"] = cat(pool_q)
        return pool, cache

    def propose(self, params, state, seq: Sequences, key, gamma: int) -> Proposal:
        """Drafts N - 1 nodes: tokens [batch, N - 1], probs None, parents [batch, N]."""
        del key  # deterministic
        tree = self.tree
        if gamma != tree.num_nodes - 1:
            raise ValueError(
                f"an EagleDynamicTreeDrafter proposes num_nodes - 1 = {tree.num_nodes - 1} "
                f"tokens; got gamma={gamma}"
            )
        pool, cache = self.candidates(params, state, seq)
        node_tokens, parents, closed, order = select_nodes(
            pool["tokens"], pool["scores"], pool["parents"], pool["ranks"], pool["depths"], tree
        )
        probs = None
        if "q" in pool:
            probs = jnp.take_along_axis(pool["q"], order[:, :, None], axis=1)
        # NaN logits make the row's log q, hence every score it ranks, NaN: flag it.
        nan = jnp.isnan(pool["scores"]).any(axis=1)  # [batch]
        return Proposal(
            node_tokens.astype(jnp.int32),
            probs,
            None,
            state.replace(cache=cache),
            calls=tree.depth,
            valid=closed,
            parents=parents,
            draft_nan=nan,
        )
