"""Autoregressive decoding: one target call per token, on the shared loop driver.

The step feeds each row's last token and samples the next; `decoding/loop.py` runs it in one
jitted `lax.while_loop` (`generate`) and in a Python loop (`stream`) that gives identical tokens
for the same key, for streaming and debugging.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from specjax.decoding import arguments, loop
from specjax.decoding.argmax import has_nan
from specjax.decoding.loop import LoopState
from specjax.decoding.prefill import prefill
from specjax.decoding.sampling import Warper, check_warper
from specjax.decoding.state import emit, last_tokens, nan_flags


@dataclasses.dataclass(frozen=True)
class AutoregressiveDecoder:
    """Samples from `model` token by token.

    Attributes:
      model: any specjax model (see models/interface.py).
      warper: how logits become the sampling distribution (temperature 0 = greedy).
      cache_len: positions per row in caches and the output buffer (static). None (the
        default): the model's position limit (its learned position table), else 512.
      min_bucket: smallest padded prompt width.
    """

    model: Any
    warper: Warper
    cache_len: int | None = None
    min_bucket: int = 16

    def __post_init__(self):
        check_warper(self.warper)
        arguments.resolve_cache_len(self)

    # -- the loop driver's protocol --------------------------------------------------------

    @property
    def models(self) -> tuple:
        return (self.model,)

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    lookahead = 0
    tokens_per_step = 1

    def init(self, params, prompts, prompt_lengths, key, max_new_tokens, eos_id) -> LoopState:
        """Prefills all prompt tokens but the last (jittable); params = (model_params,)."""
        (model_params,) = params
        state = self.model.init_state(prompts.shape[0], self.cache_len)
        state = prefill(self.model, model_params, state, prompts, prompt_lengths)
        return loop.new_state(
            prompts, prompt_lengths, key, max_new_tokens, eos_id, self.cache_len, 0, (state,)
        )

    def step(self, params, s: LoopState) -> LoopState:
        """Feeds each row's last token, samples the next (jittable)."""
        (model_params,) = params
        (model_state,) = s.model_states
        active = ~s.seq.done  # [batch]
        pending = last_tokens(s.seq, 1)  # [batch, 1]
        logits, model_state = self.model.apply(
            model_params, model_state, pending, active.astype(jnp.int32)
        )  # logits [batch, 1, vocab]
        token = self.warper.sample(jax.random.fold_in(s.key, s.step), logits[:, 0])  # [batch]
        seq, count = emit(s.seq, token[:, None], jnp.ones_like(token), s.eos_id, s.max_new_tokens)
        stats = s.stats.replace(
            target_calls=s.stats.target_calls + 1,
            emitted=s.stats.emitted + count,
            iterations=s.stats.iterations + active.astype(jnp.int32),
            nan_rows=s.stats.nan_rows | nan_flags(active & has_nan(logits, axis=(1, 2))),
        )
        return s.replace(step=s.step + 1, seq=seq, model_states=(model_state,), stats=stats)

    @staticmethod
    def running(s: LoopState) -> jax.Array:
        """Loop condition: some row still active."""
        return loop.running(s)

    # -- host-facing API -------------------------------------------------------------------

    def generate(self, params, prompts, key, max_new_tokens: int, eos_id: int | None = None):
        """Generates up to `max_new_tokens` per prompt in one jitted call.

        Every decoder is called alike: its models' params first (here one pytree), then
        keywords: `generate(params, prompts=..., key=..., max_new_tokens=...)` (see
        `decoding/loop.py`); the positional form `generate(params, prompts, key, n)` is the same.

        Args:
          params: model parameters.
          prompts: list of 1-D token sequences (ragged), or int [batch, P].
          key: PRNG key.
          max_new_tokens: >= 1; traced, so new values do not recompile.
          eos_id: stop a row after this token (None: never).

        Returns:
          GenerationResult (call `.new_tokens()` for the continuations).
        """
        return loop.generate(self, (params,), prompts, key, max_new_tokens, eos_id)

    def stream(self, params, prompts, key, max_new_tokens: int, eos_id: int | None = None):
        """Python-loop twin of `generate`: yields each step's tokens [batch] (-1 for done rows).

        Same step function and keys as `generate`, so the tokens are identical. The generator's
        return value (`StopIteration.value`) is the GenerationResult.
        """

        def one_token(tokens, counts):
            return jnp.where(counts > 0, tokens[:, 0], -1)

        return (
            yield from loop.stream(
                self, (params,), prompts, key, max_new_tokens, eos_id, view=one_token
            )
        )

    def prepare(self, prompts, max_new_tokens):
        """Host-side validation and bucketing of prompts."""
        return arguments.prepare(self, prompts, max_new_tokens)
