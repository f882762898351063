"""Prompt-lookup draft: propose the continuation of the latest earlier match of the last n-gram.

Deterministic (q is a point mass), free to run, and strong whenever the output repeats its
context (code, extraction, editing). Its "logits" are 0 on the proposed token and -inf elsewhere,
so under any warper q is one-hot and the sampler's deterministic-draft rule applies exactly.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

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


def check_ngram_range(min_ngram: int, max_ngram: int) -> None:
    """Raises ValueError unless 1 <= min_ngram <= max_ngram (the suffix lengths to match)."""
    if not 1 <= min_ngram <= max_ngram:
        raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")


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
    size = history.shape[0]
    idx = jnp.arange(size)
    start = jnp.zeros((), jnp.int32)
    found = jnp.zeros((), bool)
    for n in range(max_ngram, min_ngram - 1, -1):
        # A candidate match starts at j with j + n < length (its continuation is known).
        match = (idx + n < length) & (length >= n)
        for k in range(n):
            suffix_token = history[jnp.clip(length - n + k, 0, size - 1)]
            match = match & (jnp.take(history, jnp.clip(idx + k, 0, size - 1)) == suffix_token)
        latest = jnp.max(jnp.where(match, idx, -1))
        start = jnp.where(~found & (latest >= 0), latest + n, start).astype(jnp.int32)
        found = found | (latest >= 0)
    return start, found


@dataclasses.dataclass(frozen=True)
class PromptLookupLM(ApplyFromForward):
    """Looks up the longest suffix n-gram (max_ngram down to min_ngram) in the history.

    With no match it proposes the last token again (any proposal keeps decoding lossless).
    """

    vocab_size: int
    max_ngram: int = 3
    min_ngram: int = 1

    def __post_init__(self):
        check_ngram_range(self.min_ngram, self.max_ngram)

    def init_state(self, batch: int, max_len: int) -> HistoryState:
        return HistoryState(jnp.zeros((batch, max_len), jnp.int32), jnp.zeros((batch,), jnp.int32))

    def _predict(self, history: jax.Array, length: jax.Array) -> jax.Array:
        """Next-token proposal for one row whose first `length` tokens are valid."""
        start, found = latest_suffix_match(history, length, self.max_ngram, self.min_ngram)
        last = history[jnp.maximum(length - 1, 0)]  # fallback: repeat the last token
        return jnp.where(found, history[jnp.clip(start, 0, history.shape[0] - 1)], last)

    def forward(self, params, state: HistoryState, tokens, num_new, *, positions=None, mask=None):
        """Appends the new tokens (a chain) and predicts after each of them.

        Returns:
          ModelOutput: logits float32 [batch, T, vocab], 0 on the proposed token, -inf
          elsewhere; the history extended by num_new tokens per row.
        """
        del params, positions  # a chain's positions are the history's slots
        if mask is not None:
            raise NotImplementedError(
                "PromptLookupLM reads its history as one chain; it cannot score a token tree "
                "(mask=...). Use a chain decoder, or a drafter that builds trees from matches."
            )
        batch, t = tokens.shape
        history = write_rows(state.tokens, tokens.astype(jnp.int32), state.lengths)
        # Prediction after the i-th new token sees the history up to and including it.
        ends = state.lengths[:, None] + jnp.arange(1, t + 1)[None, :]  # [batch, T]
        predict_row = jax.vmap(self._predict, in_axes=(None, 0))
        proposals = jax.vmap(predict_row)(history, ends)  # [batch, T]
        logits = jnp.where(
            jax.nn.one_hot(proposals, self.vocab_size, dtype=bool), 0.0, -jnp.inf
        ).astype(jnp.float32)
        new_state = HistoryState(history, state.lengths + num_new.astype(jnp.int32))
        return ModelOutput(logits, new_state)
