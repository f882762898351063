"""A bigram draft for large vocabularies: each token's most frequent successors, backed off.

`NgramLM`'s dense [V, V] table is 9.7 GB at a real tokenizer's 49152 ids. This keeps, for each
previous token a, its `top_k` most frequent successors with their counts, and mixes them with a
unigram distribution (Witten-Bell interpolation):

    q(b | a) = lam(a) * c(a, b) / c(a) [b among a's top_k] + (1 - lam(a)) * u(b)
    lam(a) = c(a) / (c(a) + t(a)),  t(a) = distinct successors of a,  u: smoothed unigram

so q is a full distribution (never 0: the acceptance rule needs q(x) > 0 where drafted). Logits
are log q, so the shared warper acts on them as on a transformer's. Fitted by
`fit_sparse_bigram` on any token stream, e.g. the target's own samples.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models.interface import ApplyFromForward, ModelOutput
from specjax.models.ngram import LengthState, token_documents


def fit_sparse_bigram(tokens, vocab_size: int, top_k: int = 16, smoothing: float = 0.1) -> dict:
    """Fits the sparse bigram's tables.

    Args:
      tokens: 1-D integer array, or a list of them (documents: no bigram crosses a boundary).
      vocab_size: V.
      top_k: successors kept per token (>= 1).
      smoothing: additive count of every token in the unigram (> 0, so q never vanishes).

    Returns:
      {"next_ids": int32 [V, top_k], "next_logp": float32 [V, top_k] (log of lam(a) times the
      successor's share, -inf for unused slots), "backoff_logp": float32 [V] (log(1 - lam(a))),
      "unigram_logp": float32 [V]}.
    """
    if not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be an integer >= 1, got {top_k!r}")
    if not smoothing > 0:
        raise ValueError(f"smoothing must be > 0, got {smoothing!r}")
    docs = token_documents(tokens, vocab_size)
    unigram = sum(np.bincount(d, minlength=vocab_size) for d in docs).astype(np.float64)
    unigram += smoothing
    pairs = np.concatenate([d[:-1] * vocab_size + d[1:] for d in docs if d.size > 1] or [[]])
    keys, counts = np.unique(pairs.astype(np.int64), return_counts=True)
    prev, nxt = keys // vocab_size, keys % vocab_size
    next_ids = np.zeros((vocab_size, top_k), np.int32)
    next_logp = np.full((vocab_size, top_k), -np.inf, np.float32)
    backoff = np.zeros((vocab_size,), np.float32)  # log(1 - lam) = 0 for unseen tokens
    order = np.lexsort((-counts, prev))  # by previous token, most frequent successor first
    prev, nxt, counts = prev[order], nxt[order], counts[order]
    starts = np.searchsorted(prev, np.arange(vocab_size))
    ends = np.searchsorted(prev, np.arange(vocab_size), side="right")
    for a in np.nonzero(ends > starts)[0]:
        c = counts[starts[a] : ends[a]].astype(np.float64)
        total, distinct = c.sum(), c.size
        lam = total / (total + distinct)
        kept = min(top_k, distinct)
        next_ids[a, :kept] = nxt[starts[a] : starts[a] + kept]
        next_logp[a, :kept] = np.log(lam * c[:kept] / total)
        # What the dropped successors carried goes to the backoff, so q stays normalised.
        backoff[a] = np.log((1 - lam) + lam * c[kept:].sum() / total)
    unigram_logp = np.log(unigram / unigram.sum()).astype(np.float32)
    return {
        "next_ids": jnp.asarray(next_ids),
        "next_logp": jnp.asarray(next_logp),
        "backoff_logp": jnp.asarray(backoff),
        "unigram_logp": jnp.asarray(unigram_logp),
    }


@dataclasses.dataclass(frozen=True)
class SparseBigramLM(ApplyFromForward):
    """The sparse bigram behind the decoding interface (params from `fit_sparse_bigram`)."""

    vocab_size: int
    top_k: int = 16

    def abstract_params(self) -> dict:
        """The params `fit_sparse_bigram` returns, as shapes (for `interface.check_params`)."""
        v, k = self.vocab_size, self.top_k
        return {
            "next_ids": jax.ShapeDtypeStruct((v, k), jnp.int32),
            "next_logp": jax.ShapeDtypeStruct((v, k), jnp.float32),
            "backoff_logp": jax.ShapeDtypeStruct((v,), jnp.float32),
            "unigram_logp": jax.ShapeDtypeStruct((v,), jnp.float32),
        }

    def init_state(self, batch: int, max_len: int) -> LengthState:
        del max_len
        return LengthState(jnp.zeros((batch,), jnp.int32))

    def forward(self, params, state: LengthState, tokens, num_new, *, positions=None, mask=None):
        """Log-q logits float32 [batch, T, vocab]; state advanced by num_new.

        q(. | a) = lam(a) * top-k successor shares + (1 - lam(a)) * unigram, summed in
        probability space (a successor's mass and its backoff share add).
        """
        del positions, mask
        ids = jnp.take(params["next_ids"], tokens, axis=0)  # [batch, T, k]
        succ = jnp.take(params["next_logp"], tokens, axis=0)  # [batch, T, k]
        back = jnp.take(params["backoff_logp"], tokens, axis=0)  # [batch, T]
        base = back[..., None] + params["unigram_logp"]  # [batch, T, vocab]
        at = jnp.take_along_axis(base, ids, axis=-1)  # [batch, T, k] the backoff at successors
        mixed = jnp.logaddexp(at, succ)
        b, t = tokens.shape
        rows = jnp.arange(b)[:, None, None]
        cols = jnp.arange(t)[None, :, None]
        # Unused slots (-inf) repeat slot 0's id and value, so duplicate writes agree (a row
        # with no successor at all writes base's own value at id 0: nothing changes).
        used = jnp.isfinite(succ)
        first = jnp.where(used[..., :1], mixed[..., :1], at[..., :1])
        ids = jnp.where(used, ids, ids[..., :1])
        mixed = jnp.where(used, mixed, first)
        logits = base.at[rows, cols, ids].set(mixed)
        new_state = state.replace(lengths=state.lengths + num_new.astype(jnp.int32))
        return ModelOutput(logits, new_state)
