"""Prompt-lookup draft: propose the continuation of the latest earlier match of the last n-gram.

Deterministic (q is a point mass), free to run, and strong whenever the output repeats its
context (code, extraction, editing). Its "logits" are 0 on the proposed token and -inf elsewhere,
so under any warper q is one-hot and the sampler's deterministic-draft rule applies exactly.
A tree of lookups from several earlier matches at once is `decoding/trees/lookup.py`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from specjax import checks
from specjax.models.interface import ApplyFromForward, ModelOutput
from specjax.models.kv_cache import select_rows, write_rows


@struct.dataclass
class HistoryState:
    """Every token fed so far, per row.

    Attributes:
      tokens: int32 [batch, max_len] (entries past `lengths` are stale).
      lengths: int32 [batch].
    """

    tokens: jax.Array
    lengths: jax.Array

    def select(self, starts: jax.Array, index: jax.Array) -> HistoryState:
        """Moves history entries starts[b] + index[b, j] to starts[b] + j (see select_rows)."""
        return self.replace(tokens=select_rows(self.tokens, starts, index))


# The longest suffix a lookup matches. The search is unrolled into the program, about
# max_ngram² / 2 comparisons over the history: 1,000 took minutes and gigabytes to trace.
MAX_NGRAM = 32


def check_ngram_range(min_ngram: int, max_ngram: int) -> None:
    """Raises unless min_ngram and max_ngram are integers with 1 <= min_ngram <= max_ngram <=
    `MAX_NGRAM` (the suffix lengths to match), naming them."""
    checks.check_count("min_ngram", min_ngram)
    checks.check_count("max_ngram", max_ngram, 1, MAX_NGRAM)
    if min_ngram > max_ngram:
        raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")


def _occurrences(history: jax.Array, length: jax.Array, n: int) -> jax.Array:
    """bool [max_len]: an earlier occurrence of the last n tokens starts at j (j + n < length)."""
    size = history.shape[0]
    idx = jnp.arange(size)
    # A candidate match starts at j with j + n < length (its continuation is known).
    match = (idx + n < length) & (length >= n)
    for k in range(n):
        suffix_token = history[jnp.clip(length - n + k, 0, size - 1)]
        match = match & (jnp.take(history, jnp.clip(idx + k, 0, size - 1)) == suffix_token)
    return match


def latest_suffix_match(history: jax.Array, length: jax.Array, max_ngram: int, min_ngram: int):
    """Where the continuation of the latest earlier occurrence of a row's suffix starts.

    For n = max_ngram down to min_ngram, looks for the latest j < length - n with
    history[j : j + n] == history[length - n : length]; the longest n that has one wins.

    Args:
      history: int32 [max_len] one row's tokens (the first `length` valid).
      length: int32 [] valid tokens.
      max_ngram, min_ngram: suffix lengths to try (static).

    Returns:
      (start int32 []: index of the first token that followed the match, found bool []).
    """
    idx = jnp.arange(history.shape[0])
    start = jnp.zeros((), jnp.int32)
    found = jnp.zeros((), bool)
    for n in range(max_ngram, min_ngram - 1, -1):
        latest = jnp.max(jnp.where(_occurrences(history, length, n), idx, -1))
        start = jnp.where(~found & (latest >= 0), latest + n, start).astype(jnp.int32)
        found = found | (latest >= 0)
    return start, found


def suffix_match_followers(
    history: jax.Array, length: jax.Array, max_ngram: int, min_ngram: int
) -> jax.Array:
    """Where the continuations of all earlier occurrences of a row's longest matching suffix start.

    For n = max_ngram down to min_ngram, an occurrence of the suffix history[length - n : length]
    at j < length - n is followed by the token at f = j + n (known: f < length); the longest n
    that has an occurrence wins, and only its occurrences count (`latest_suffix_match` gives
    the latest of them).

    Args:
      history: int32 [max_len] one row's tokens (the first `length` valid).
      length: int32 [] valid tokens.
      max_ngram, min_ngram: suffix lengths to try (static).

    Returns:
      bool [max_len]: follows[f] is True when history[f] followed an occurrence of that suffix
      (all False when no suffix of length >= min_ngram occurred earlier).
    """
    size = history.shape[0]
    idx = jnp.arange(size)
    follows = jnp.zeros((size,), bool)
    found = jnp.zeros((), bool)
    for n in range(max_ngram, min_ngram - 1, -1):
        starts = _occurrences(history, length, n)  # [max_len] over j; the follower is j + n
        match = (idx >= n) & jnp.take(starts, jnp.maximum(idx - n, 0))
        follows = jnp.where(found, follows, match)
        found = found | match.any()
    return follows


@dataclasses.dataclass(frozen=True)
class PromptLookupLM(ApplyFromForward):
    """Looks up the longest suffix n-gram (max_ngram down to min_ngram) in the history.

    With no match it proposes the last token again (any proposal keeps decoding lossless). It
    scores token trees too: given a mask, a node's history is the slots its mask row shows (the
    committed prefix, its ancestors and itself), so a `TreeDrafter` can draft with it.
    """

    vocab_size: int
    max_ngram: int = 3
    min_ngram: int = 1

    def __post_init__(self):
        checks.check_count("vocab_size", self.vocab_size)
        check_ngram_range(self.min_ngram, self.max_ngram)

    def init_state(self, batch: int, max_len: int) -> HistoryState:
        return HistoryState(jnp.zeros((batch, max_len), jnp.int32), jnp.zeros((batch,), jnp.int32))

    def _predict(self, history: jax.Array, length: jax.Array) -> jax.Array:
        """Next-token proposal for one row whose first `length` tokens are valid."""
        start, found = latest_suffix_match(history, length, self.max_ngram, self.min_ngram)
        last = history[jnp.maximum(length - 1, 0)]  # fallback: repeat the last token
        return jnp.where(found, history[jnp.clip(start, 0, history.shape[0] - 1)], last)

    def _predict_visible(self, history: jax.Array, visible: jax.Array) -> jax.Array:
        """Next-token proposal after the slots a mask row shows: history [max_len], visible bool.

        The visible slots, kept in slot order, are the token's history: compacted to the front
        (cumsum gives each its index; hidden slots are dropped), then looked up as a chain.
        """
        size = history.shape[0]
        index = jnp.cumsum(visible) - 1  # [max_len] the compacted index of a visible slot
        target = jnp.where(visible, index, size)  # hidden slots go out of bounds: dropped
        compact = jnp.zeros_like(history).at[target].set(history, mode="drop")
        return self._predict(compact, visible.sum().astype(jnp.int32))

    def forward(self, params, state: HistoryState, tokens, num_new, *, positions=None, mask=None):
        """Appends the new tokens and predicts after each of them.

        With mask None the new tokens extend the history as a chain: the prediction after the
        i-th sees the history up to and including it. With a mask (a token tree, `tree_inputs`)
        the new tokens are first written at their slots lengths[b] + t, and the prediction
        after token t is the lookup over the slots its mask row shows, in slot order (for a tree
        node: the committed prefix, then its ancestors and itself), whatever else is in the
        cache.

        Args:
          params: unused (prompt lookup has none).
          state: the history so far.
          tokens: int32 [batch, T]; row b's first num_new[b] are real.
          num_new: int32 [batch].
          positions: unused: a token's place in its history is its slot order.
          mask: bool [batch, T, max_len] slots each new token sees (its own included), or None.

        Returns:
          ModelOutput: logits float32 [batch, T, vocab], 0 on the proposed token, -inf
          elsewhere; the history extended by num_new tokens per row.
        """
        del params, positions
        batch, t = tokens.shape
        history = write_rows(state.tokens, tokens.astype(jnp.int32), state.lengths)
        if mask is None:
            # Prediction after the i-th new token sees the history up to and including it.
            ends = state.lengths[:, None] + jnp.arange(1, t + 1)[None, :]  # [batch, T]
            predict_row = jax.vmap(self._predict, in_axes=(None, 0))
            proposals = jax.vmap(predict_row)(history, ends)  # [batch, T]
        else:
            predict_row = jax.vmap(self._predict_visible, in_axes=(None, 0))
            proposals = jax.vmap(predict_row)(history, mask.astype(bool))  # [batch, T]
        logits = jnp.where(
            jax.nn.one_hot(proposals, self.vocab_size, dtype=bool), 0.0, -jnp.inf
        ).astype(jnp.float32)
        new_state = HistoryState(history, state.lengths + num_new.astype(jnp.int32))
        return ModelOutput(logits, new_state)
