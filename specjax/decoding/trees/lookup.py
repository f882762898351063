"""Prompt lookup grown into a token tree: several earlier matches propose different futures.

`LookupDrafter` copies the continuation of the *latest* earlier occurrence of the sequence's
suffix; when that occurrence continued differently from what the target wants, the iteration
gains nothing, even if an older occurrence continued the right way. `LookupTreeDrafter` proposes
all of them at once, as the children of a node of a static `TokenTree`:

  for each node, level by level (a node's history is the committed sequence, then the tokens
  of its ancestors below the root and its own), find the longest suffix n-gram (max_ngram down
  to min_ngram) of that history that occurs earlier, collect the tokens that followed its
  earlier occurrences, and make the distinct ones, the most recent first, the node's children
  in rank order.

A node with fewer distinct followers than the tree gives it children leaves the rest invalid
(`Proposal.valid` False, padded with token 0), and so are all the descendants of an invalid node:
`tree_accept` never tries them. The target still scores them (the shapes are static), and the
draft costs no model call: everything is read from the sequence.

Why it is lossless: the proposals are deterministic functions of the committed sequence (probs
None: point masses), and under a point mass the tree rule accepts a child x with probability
r(x), removes a rejected x from the residual r and emits from what is left, so each node emits
exactly the target's p whatever tokens it was offered, in whatever order (`rules/tree.py`). Invalid
nodes are never tried, so they are not trials at all. How many children a node gets and which
is decided from the history alone, before the target is called, never from its verdict; so the
proposal is fixed before the randomness of the acceptance test is drawn, which is all the rule
needs.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specjax import checks
from specjax.decoding.drafters.base import NoState, Proposal, Verdict
from specjax.decoding.state import Sequences
from specjax.decoding.trees.topology import TokenTree
from specjax.models.prompt_lookup import check_ngram_range, suffix_match_followers


@dataclasses.dataclass(frozen=True)
class LookupTreeDrafter:
    """A token tree of prompt-lookup proposals (see the module docstring); no model, no params.

    Attributes:
      vocab_size: the vocabulary (the target's).
      tree: the static topology (the decoder's `tree`); node i's children are the i-th node's
        distinct followers, most recent first.
      max_ngram: longest suffix to match.
      min_ngram: shortest suffix to match.
    """

    vocab_size: int
    tree: TokenTree
    max_ngram: int = 3
    min_ngram: int = 1

    def __post_init__(self):
        checks.check_count("vocab_size", self.vocab_size)
        check_ngram_range(self.min_ngram, self.max_ngram)
        if not isinstance(self.tree, TokenTree):
            raise TypeError(f"tree must be a TokenTree; got {self.tree!r}")
        if self.tree.max_depth < 1:
            raise ValueError("tree must have at least one node below the root")

    @property
    def model(self):
        return self  # no params: `ShardedDecoder` replicates the empty params it is given

    def init(self, params, prompts, prompt_lengths, cache_len: int) -> NoState:
        del params, prompts, prompt_lengths, cache_len
        return NoState()

    def _followers(self, history: jax.Array, length: jax.Array, num: int):
        """The first `num` distinct followers of one history's longest earlier-matching suffix.

        Args:
          history: int32 [max_len] (the first `length` valid).
          length: int32 [] valid tokens.
          num: followers wanted (static).

        Returns:
          (tokens int32 [num]: by most recent occurrence, 0 past count; count int32 [] found).
        """
        follows = suffix_match_followers(history, length, self.max_ngram, self.min_ngram)
        idx = jnp.arange(history.shape[0])
        tokens, count = [], jnp.zeros((), jnp.int32)
        for _ in range(num):
            latest = jnp.max(jnp.where(follows, idx, -1))  # the most recent follower left
            found = latest >= 0
            token = jnp.where(found, history[jnp.maximum(latest, 0)], 0)
            tokens.append(token)
            count = count + found.astype(jnp.int32)
            follows = follows & (history != token)  # its older occurrences are not new children
        return jnp.stack(tokens).astype(jnp.int32), count

    def _propose_row(self, history: jax.Array, length: jax.Array):
        """(tokens int32 [N - 1], valid bool [N - 1]) of one row of `length` committed tokens."""
        tree = self.tree
        parents = np.asarray(tree.parents)
        ranks = np.asarray(tree.ranks)
        ancestors = tree.ancestor_mask()
        offset = jnp.arange(history.shape[0]) - length  # [max_len] slot relative to the root + 1
        tokens = jnp.zeros((tree.num_nodes,), jnp.int32)
        valid = jnp.ones((tree.num_nodes,), bool)
        for d in range(tree.max_depth):
            first, end = tree.levels[d]
            lo, hi = tree.levels[d + 1]
            num = max(len(tree.children[i]) for i in range(first, end))
            # Level d's histories [n_d, max_len]: the sequence, then the path below the root.
            if d == 0:
                histories = history[None, :]
            else:
                path = np.stack([np.flatnonzero(ancestors[i])[1:] for i in range(first, end)])
                path_tokens = tokens[jnp.asarray(path)]  # [n_d, d] depths 1..d
                on_path = (offset >= 0) & (offset < d)  # [max_len]
                spliced = jnp.take(path_tokens, jnp.clip(offset, 0, d - 1), axis=1)
                histories = jnp.where(on_path[None, :], spliced, history[None, :])
            followers, count = jax.vmap(self._followers, in_axes=(0, None, None))(
                histories, length + d, num
            )  # [n_d, num], [n_d]
            parent = parents[lo:hi] - first  # [n_{d+1}] the parent's index within level d
            rank = ranks[lo:hi]
            child_valid = valid[parents[lo:hi]] & (jnp.asarray(rank) < count[parent])
            child_tokens = jnp.where(child_valid, followers[parent, rank], 0)
            tokens = tokens.at[lo:hi].set(child_tokens)
            valid = valid.at[lo:hi].set(child_valid)
        return tokens[1:], valid[1:]

    def propose(self, params, state, seq: Sequences, key, gamma: int) -> Proposal:
        """Grows every row's tree from its own sequence (no randomness, no model call).

        Returns:
          Proposal: tokens int32 [batch, N - 1] (nodes 1..N-1, 0 where invalid), probs None,
          num_drafted None, calls 0, valid bool [batch, N - 1] (all False for finished rows).
        """
        del params, key
        if gamma != self.tree.num_nodes - 1:
            raise ValueError(
                f"a LookupTreeDrafter proposes num_nodes - 1 = {self.tree.num_nodes - 1} "
                f"tokens; got gamma={gamma}"
            )
        tokens, valid = jax.vmap(self._propose_row)(seq.tokens, seq.lengths)
        valid = valid & ~seq.done[:, None]
        tokens = jnp.where(valid, tokens, 0)
        return Proposal(tokens, None, None, state, calls=0, valid=valid)

    def commit(self, state, verdict: Verdict):
        del verdict
        return state
