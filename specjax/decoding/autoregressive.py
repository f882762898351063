"""Autoregressive decoding: one target call per token, one jitted `lax.while_loop`.

The same `step` drives the device loop (`generate`) and a Python loop (`stream`), so the two
give identical tokens for the same key; the Python loop is for streaming and debugging.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from specjax.decoding import prompts as prompt_lib
from specjax.decoding.sampling import Warper, sample_from_probs
from specjax.decoding.state import (
    DecodeStats,
    GenerationResult,
    Sequences,
    check_finite_result,
    emit,
    init_sequences,
    init_stats,
    last_tokens,
)


@struct.dataclass
class ARLoopState:
    """Autoregressive loop state.

    Attributes:
      step: int32 [] loop iteration.
      key: PRNG key of the whole call (step keys are fold_in(key, step)).
      max_new_tokens: int32 [] (traced: changing it does not recompile).
      eos_id: int32 [] (-1: none).
      seq: Sequences; the model cache holds every token but the last one of each row.
      model_state: the model's cache.
      prompt_lengths: int32 [batch].
      stats: DecodeStats.
    """

    step: jax.Array
    key: jax.Array
    max_new_tokens: jax.Array
    eos_id: jax.Array
    seq: Sequences
    model_state: Any
    prompt_lengths: jax.Array
    stats: DecodeStats


@dataclasses.dataclass(frozen=True)
class AutoregressiveDecoder:
    """Samples from `model` token by token.

    Attributes:
      model: any specjax model (see models/interface.py).
      warper: how logits become the sampling distribution (temperature 0 = greedy).
      cache_len: positions per row in caches and the output buffer (static).
      min_bucket: smallest padded prompt width.
    """

    model: Any
    warper: Warper
    cache_len: int = 512
    min_bucket: int = 16

    def __post_init__(self):
        if not isinstance(self.warper, Warper):
            raise TypeError(
                f"warper must be a specjax Warper (make_warper(...)); got {self.warper!r}"
            )
        if self.cache_len < 2:
            raise ValueError(f"cache_len must be >= 2, got {self.cache_len}")

    def init(self, params, prompts, prompt_lengths, key, max_new_tokens, eos_id) -> ARLoopState:
        """Prefills all prompt tokens but the last (jittable)."""
        batch = prompts.shape[0]
        state = self.model.init_state(batch, self.cache_len)
        _, state = self.model.apply(params, state, prompts, prompt_lengths - 1)
        return ARLoopState(
            step=jnp.zeros((), jnp.int32),
            key=key,
            max_new_tokens=jnp.asarray(max_new_tokens, jnp.int32),
            eos_id=jnp.asarray(eos_id, jnp.int32),
            seq=init_sequences(prompts, prompt_lengths, self.cache_len),
            model_state=state,
            prompt_lengths=prompt_lengths.astype(jnp.int32),
            stats=init_stats(batch, 0),
        )

    def step(self, params, s: ARLoopState) -> ARLoopState:
        """Feeds each row's last token, samples the next (jittable)."""
        active = ~s.seq.done  # [batch]
        pending = last_tokens(s.seq, 1)  # [batch, 1]
        logits, model_state = self.model.apply(
            params, s.model_state, pending, active.astype(jnp.int32)
        )  # logits [batch, 1, vocab]
        probs = self.warper.probs(logits[:, 0])  # [batch, vocab]
        token = sample_from_probs(jax.random.fold_in(s.key, s.step), probs)  # [batch]
        seq, count = emit(s.seq, token[:, None], jnp.ones_like(token), s.eos_id, s.max_new_tokens)
        stats = s.stats.replace(
            target_calls=s.stats.target_calls + 1,
            emitted=s.stats.emitted + count,
            iterations=s.stats.iterations + active.astype(jnp.int32),
            nan_rows=s.stats.nan_rows | (active & jnp.isnan(logits).any(axis=(1, 2))),
        )
        return s.replace(step=s.step + 1, seq=seq, model_state=model_state, stats=stats)

    @staticmethod
    def running(s: ARLoopState) -> jax.Array:
        """Loop condition: some row still active."""
        return ~jnp.all(s.seq.done)

    def generate(self, params, prompts, key, max_new_tokens: int, eos_id: int | None = None):
        """Generates up to `max_new_tokens` per prompt in one jitted call.

        Args:
          params: model parameters.
          prompts: list of 1-D token sequences (ragged), or int [batch, P].
          key: PRNG key.
          max_new_tokens: >= 1; traced, so new values do not recompile.
          eos_id: stop a row after this token (None: never).

        Returns:
          GenerationResult (call `.new_tokens()` for the continuations).
        """
        tokens, lengths = self.prepare(prompts, max_new_tokens)
        result = _generate_jit(self, params, tokens, lengths, key, max_new_tokens, _eos(eos_id))
        check_finite_result(result)
        return result

    def stream(self, params, prompts, key, max_new_tokens: int, eos_id: int | None = None):
        """Python-loop twin of `generate`: yields each step's tokens [batch] (-1 for done rows).

        Same step function and keys as `generate`, so the tokens are identical. The generator's
        return value (`StopIteration.value`) is the GenerationResult.
        """
        tokens, lengths = self.prepare(prompts, max_new_tokens)
        s = _init_jit(self, params, tokens, lengths, key, max_new_tokens, _eos(eos_id))
        while bool(self.running(s)):
            before = s.seq.lengths
            s = _step_jit(self, params, s)
            grew = s.seq.lengths > before
            yield jnp.where(grew, jnp.take_along_axis(s.seq.tokens, before[:, None], 1)[:, 0], -1)
        result = GenerationResult(s.seq.tokens, s.seq.lengths, s.prompt_lengths, s.stats)
        check_finite_result(result)
        return result

    def prepare(self, prompts, max_new_tokens):
        """Host-side validation and bucketing of prompts."""
        tokens, lengths = prompt_lib.pad_prompts(prompts, self.model.vocab_size, 0, self.min_bucket)
        prompt_lib.check_capacity(tokens.shape[1], max_new_tokens, 0, self.cache_len)
        return jnp.asarray(tokens), jnp.asarray(lengths)


def _eos(eos_id):
    return -1 if eos_id is None else int(eos_id)


@functools.partial(jax.jit, static_argnums=0)
def _init_jit(decoder, params, tokens, lengths, key, max_new_tokens, eos_id):
    return decoder.init(params, tokens, lengths, key, max_new_tokens, eos_id)


@functools.partial(jax.jit, static_argnums=0)
def _step_jit(decoder, params, s):
    return decoder.step(params, s)


@functools.partial(jax.jit, static_argnums=0)
def _generate_jit(decoder, params, tokens, lengths, key, max_new_tokens, eos_id):
    s = decoder.init(params, tokens, lengths, key, max_new_tokens, eos_id)
    s = jax.lax.while_loop(decoder.running, lambda s: decoder.step(params, s), s)
    return GenerationResult(s.seq.tokens, s.seq.lengths, s.prompt_lengths, s.stats)
