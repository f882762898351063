"""Unigram and bigram drafts: count tables fitted from token arrays, additive smoothing.

Their step costs almost nothing (c ≈ 0), which makes them the paper's baseline drafts. Logits
are log-probabilities, so the shared warper (temperature, top-k, top-p) acts on them as on a
transformer's logits.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from specjax.models.interface import ApplyFromForward, ModelOutput


@struct.dataclass
class LengthState:
    """Decoding state of a model whose prediction needs no history: just per-row lengths.

    Attributes:
      lengths: int32 [batch].
    """

    lengths: jax.Array

    def select(self, starts: jax.Array, index: jax.Array) -> LengthState:
        """Nothing to compact: the prediction needs no history."""
        del starts, index
        return self


def token_documents(tokens, vocab_size: int) -> list[np.ndarray]:
    """`tokens` (one array or a list of documents) as int64 1-D arrays, each id checked to lie
    in [0, vocab_size); pairs never span two documents."""
    docs = tokens if isinstance(tokens, (list, tuple)) else [tokens]
    docs = [np.asarray(d).astype(np.int64).ravel() for d in docs]
    for d in docs:
        if d.size and (d.min() < 0 or d.max() >= vocab_size):
            raise ValueError(f"tokens must lie in [0, {vocab_size}); got [{d.min()}, {d.max()}]")
    return docs


def fit_ngram(tokens, vocab_size: int, order: int, smoothing: float = 0.1) -> dict:
    """Fits unigram (order 1) or bigram (order 2) log-probabilities.

    Args:
      tokens: 1-D integer array (a corpus), or a list of such arrays (documents; bigrams never
        cross a document boundary).
      vocab_size: V.
      order: 1 or 2.
      smoothing: additive (Lidstone) count added to every cell, > 0 so q never vanishes.

    Returns:
      {"log_probs": float32 [V] (order 1) or [V, V] (order 2, row = previous token)}.
    """
    if order not in (1, 2):
        raise ValueError(f"order must be 1 (unigram) or 2 (bigram), got {order!r}")
    if not smoothing > 0:
        raise ValueError(f"smoothing must be > 0, got {smoothing!r}")
    docs = token_documents(tokens, vocab_size)
    if order == 1:
        counts = sum(np.bincount(d, minlength=vocab_size) for d in docs).astype(np.float64)
    else:
        counts = np.zeros((vocab_size, vocab_size), np.float64)
        for d in docs:
            np.add.at(counts, (d[:-1], d[1:]), 1.0)
    counts = counts + smoothing
    log_probs = np.log(counts) - np.log(counts.sum(-1, keepdims=True))
    return {"log_probs": jnp.asarray(log_probs, jnp.float32)}


@dataclasses.dataclass(frozen=True)
class NgramLM(ApplyFromForward):
    """Unigram or bigram model behind the decoding interface (params from `fit_ngram`)."""

    vocab_size: int
    order: int = 2

    def __post_init__(self):
        if self.order not in (1, 2):
            raise ValueError(f"NgramLM.order must be 1 or 2, got {self.order!r}")

    def abstract_params(self) -> dict:
        """The params `fit_ngram` returns, as shapes (for `interface.check_params`)."""
        shape = (self.vocab_size,) * self.order
        return {"log_probs": jax.ShapeDtypeStruct(shape, jnp.float32)}

    def init_state(self, batch: int, max_len: int) -> LengthState:
        del max_len
        return LengthState(jnp.zeros((batch,), jnp.int32))

    def forward(self, params, state: LengthState, tokens, num_new, *, positions=None, mask=None):
        """Log-prob logits float32 [batch, T, vocab]; state advanced by num_new.

        A bigram reads only the token it follows, so positions and the mask (a chain or a
        token tree) change nothing.
        """
        del positions, mask
        table = params["log_probs"]
        if table.shape[-1] != self.vocab_size:
            raise ValueError(
                f"params['log_probs'] has vocab {table.shape[-1]}; "
                f"NgramLM expects {self.vocab_size}"
            )
        if self.order == 1:
            logits = jnp.broadcast_to(table, tokens.shape + (self.vocab_size,))
        else:
            logits = jnp.take(table, tokens, axis=0)  # [batch, T, vocab]
        return ModelOutput(logits, state.replace(lengths=state.lengths + num_new.astype(jnp.int32)))


@dataclasses.dataclass(frozen=True)
class UniformLM(ApplyFromForward):
    """A draft that knows nothing: every token equally likely (losslessness must still hold)."""

    vocab_size: int

    def init_state(self, batch: int, max_len: int) -> LengthState:
        del max_len
        return LengthState(jnp.zeros((batch,), jnp.int32))

    def forward(self, params, state: LengthState, tokens, num_new, *, positions=None, mask=None):
        """Zero logits float32 [batch, T, vocab]; state advanced by num_new."""
        del params, positions, mask
        logits = jnp.zeros(tokens.shape + (self.vocab_size,), jnp.float32)
        return ModelOutput(logits, state.replace(lengths=state.lengths + num_new.astype(jnp.int32)))
