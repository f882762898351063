"""`LookupDrafter`: prompt lookup in one shot, no model and no state (a `Drafter`, `base.py`).

Its tree twin, several earlier matches at once, is `specjax/decoding/trees/lookup.py`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax import checks
from specjax.decoding.drafters.base import NoState, Proposal, Verdict
from specjax.decoding.state import Sequences
from specjax.models.prompt_lookup import check_ngram_range, latest_suffix_match


@dataclasses.dataclass(frozen=True)
class LookupDrafter:
    """Prompt lookup in one shot: proposes the continuation of the latest earlier match.

    For n = max_ngram down to min_ngram it looks for the latest earlier occurrence of the row's
    last n tokens; the first n that has one proposes up to gamma tokens that followed it. A
    match near the end of the sequence has fewer than gamma known followers, and a row with no
    match drafts nothing (num_drafted = 0: the iteration is then one target step). Proposals are
    deterministic (probs None), so the rule "accept x with probability p(x)" keeps the output
    exact. Unlike `PromptLookupLM` inside a `ModelDrafter` (gamma calls, each predicting one
    token, repeating the last token on a miss), this needs no calls and no state.

    Attributes:
      vocab_size: the vocabulary (the target's).
      max_ngram: longest suffix to match.
      min_ngram: shortest suffix to match.
    """

    vocab_size: int
    max_ngram: int = 3
    min_ngram: int = 1
    variable_length = True  # a lookup proposes 0..gamma tokens: verify only as wide as needed

    def __post_init__(self):
        checks.check_count("vocab_size", self.vocab_size)
        check_ngram_range(self.min_ngram, self.max_ngram)

    @property
    def model(self):
        return self  # no params: `ShardedDecoder` replicates the empty params it is given

    def init(self, params, prompts, prompt_lengths, cache_len: int) -> NoState:
        del params, prompts, prompt_lengths, cache_len
        return NoState()

    def _lookup(self, history: jax.Array, length: jax.Array, gamma: int):
        """(tokens int32 [gamma], count int32 []) proposed for one row of `length` tokens."""
        size = history.shape[0]
        start, found = latest_suffix_match(history, length, self.max_ngram, self.min_ngram)
        count = jnp.where(found, jnp.minimum(length - start, gamma), 0)
        offsets = jnp.arange(gamma)
        tokens = jnp.take(history, jnp.clip(start + offsets, 0, size - 1))
        return jnp.where(offsets < count, tokens, 0).astype(jnp.int32), count.astype(jnp.int32)

    def propose(self, params, state, seq: Sequences, key, gamma: int) -> Proposal:
        """Looks up every row's suffix in its own sequence (no randomness, no model call)."""
        del params, key
        tokens, count = jax.vmap(self._lookup, in_axes=(0, 0, None))(
            seq.tokens, seq.lengths, gamma
        )  # [batch, gamma], [batch]
        count = jnp.where(seq.done, 0, count)
        return Proposal(tokens, None, count, state, calls=0)

    def commit(self, state, verdict: Verdict):
        del verdict
        return state
