"""Speculative decoding: draft γ tokens, verify them with one target call, accept losslessly.

Each iteration, for every row independently:
  1. the draft proposes d_1..d_γ (a `lax.scan`, keeping q at each position);
  2. the target scores [last, d_1..d_γ] in one call, giving p at γ+1 positions;
  3. `speculative_accept` keeps n drafts and adds one resampled or bonus token;
  4. each row advances by its own n + 1 and each cache rolls back by setting its length.
No row waits for the slowest: acceptance is per row, and so are the caches' lengths.

Bookkeeping invariant (L = a row's sequence length at the start of an iteration): the target
cache holds the first L - 1 tokens; the draft cache holds the first L - k tokens, where k (1 or 2)
is how many tokens it still has to be fed. k is 2 exactly when the last iteration accepted all γ
drafts: the draft never saw d_γ.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from specjax.decoding import prompts as prompt_lib
from specjax.decoding.acceptance import speculative_accept
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
from specjax.models.interface import check_pair


@struct.dataclass
class SpecLoopState:
    """Speculative loop state.

    Attributes:
      step: int32 [] iteration.
      key: PRNG key of the call (iteration keys are fold_in(key, step)).
      max_new_tokens: int32 [] (traced).
      eos_id: int32 [] (-1: none).
      seq: Sequences.
      target_state: target cache, lengths = seq.lengths - 1.
      draft_state: draft cache, lengths = seq.lengths - (1 or 2).
      prompt_lengths: int32 [batch].
      stats: DecodeStats with accepted_at [gamma].
    """

    step: jax.Array
    key: jax.Array
    max_new_tokens: jax.Array
    eos_id: jax.Array
    seq: Sequences
    target_state: Any
    draft_state: Any
    prompt_lengths: jax.Array
    stats: DecodeStats


@dataclasses.dataclass(frozen=True)
class SpeculativeDecoder:
    """Lossless speculative sampling from `target` with proposals from `draft`.

    Attributes:
      target: the model whose distribution the output follows exactly.
      draft: any model with the same vocabulary.
      gamma: drafted tokens per iteration (static, >= 1).
      warper: applied to both models' logits (temperature 0 = greedy).
      cache_len: positions per row in caches and the output buffer.
      min_bucket: smallest padded prompt width.
      unroll_draft: unroll the draft's γ-step `lax.scan` (True), keep it a loop (False), or
        None: unroll when the draft is a transformer with a KV cache. A rolled scan carries the
        draft cache through a loop, and XLA:CPU copies it in every step (2 copies per layer);
        unrolled, the writes stay in place. Costs compile time that grows with γ.
    """

    target: Any
    draft: Any
    gamma: int
    warper: Warper
    cache_len: int = 512
    min_bucket: int = 16
    unroll_draft: bool | None = None

    def __post_init__(self):
        check_pair(self.target, self.draft)
        if isinstance(self.gamma, bool) or not isinstance(self.gamma, int) or self.gamma < 1:
            raise ValueError(f"gamma must be an integer >= 1, got {self.gamma!r}")
        if not isinstance(self.warper, Warper):
            raise TypeError(
                f"warper must be a specjax Warper (make_warper(...)); got {self.warper!r}"
            )

    # -- jittable pieces -------------------------------------------------------------------

    def init(
        self, target_params, draft_params, prompts, prompt_lengths, key, max_new_tokens, eos_id
    ) -> SpecLoopState:
        """Prefills both models with every prompt token but the last."""
        batch = prompts.shape[0]
        t_state = self.target.init_state(batch, self.cache_len)
        _, t_state = self.target.apply(target_params, t_state, prompts, prompt_lengths - 1)
        d_state = self.draft.init_state(batch, self.cache_len)
        _, d_state = self.draft.apply(draft_params, d_state, prompts, prompt_lengths - 1)
        return SpecLoopState(
            step=jnp.zeros((), jnp.int32),
            key=key,
            max_new_tokens=jnp.asarray(max_new_tokens, jnp.int32),
            eos_id=jnp.asarray(eos_id, jnp.int32),
            seq=init_sequences(prompts, prompt_lengths, self.cache_len),
            target_state=t_state,
            draft_state=d_state,
            prompt_lengths=prompt_lengths.astype(jnp.int32),
            stats=init_stats(batch, self.gamma),
        )

    def draft_tokens(self, draft_params, s: SpecLoopState, key):
        """Runs the draft γ times.

        Returns:
          tokens: int32 [batch, gamma]; probs: float32 [batch, gamma, vocab]; the draft state.
        """
        active = (~s.seq.done).astype(jnp.int32)  # [batch]
        num_pending = (s.seq.lengths - s.draft_state.lengths) * active  # [batch] 1 or 2
        pending = last_tokens(s.seq, 2)  # [batch, 2] oldest first
        # Rows with one pending token feed it at index 0.
        pending = jnp.where((num_pending == 2)[:, None], pending, pending[:, 1:])
        logits, d_state = self.draft.apply(draft_params, s.draft_state, pending, num_pending)
        last = jnp.maximum(num_pending - 1, 0)[:, None, None]  # [batch, 1, 1]
        q0 = self.warper.probs(jnp.take_along_axis(logits, last, axis=1)[:, 0])  # [batch, vocab]
        x0 = sample_from_probs(jax.random.fold_in(key, 0), q0)  # [batch]

        def one_step(carry, i):
            d_state, token = carry
            logits, d_state = self.draft.apply(draft_params, d_state, token[:, None], active)
            q = self.warper.probs(logits[:, 0])  # [batch, vocab]
            nxt = sample_from_probs(jax.random.fold_in(key, i), q)
            return (d_state, nxt), (nxt, q)

        unroll = self.unroll_draft
        if unroll is None:
            unroll = any(getattr(leaf, "ndim", 0) >= 3 for leaf in jax.tree.leaves(d_state))
        (d_state, _), (xs, qs) = jax.lax.scan(
            one_step, (d_state, x0), jnp.arange(1, self.gamma), unroll=bool(unroll)
        )  # xs [gamma - 1, batch], qs [gamma - 1, batch, vocab]
        tokens = jnp.concatenate([x0[:, None], xs.T], axis=1)  # [batch, gamma]
        probs = jnp.concatenate([q0[:, None], jnp.swapaxes(qs, 0, 1)], axis=1)
        return tokens, probs, d_state

    def step(self, target_params, draft_params, s: SpecLoopState) -> SpecLoopState:
        """One draft-verify-accept iteration for every row."""
        gamma = self.gamma
        active = ~s.seq.done  # [batch]
        key = jax.random.fold_in(s.key, s.step)
        drafted, q, d_state = self.draft_tokens(draft_params, s, key)

        verify_in = jnp.concatenate([last_tokens(s.seq, 1), drafted], axis=1)  # [batch, gamma+1]
        num_new = jnp.where(active, gamma + 1, 0).astype(jnp.int32)
        logits, t_state = self.target.apply(target_params, s.target_state, verify_in, num_new)
        p = self.warper.probs(logits)  # [batch, gamma + 1, vocab]
        out, n = speculative_accept(jax.random.fold_in(key, gamma), drafted, q, p, fill_value=0)

        old_len = s.seq.lengths
        seq, count = emit(s.seq, out, n + 1, s.eos_id, s.max_new_tokens)
        # Roll back: the target keeps [last, d_1..d_n]; the draft keeps what it was fed of those.
        t_state = t_state.replace(lengths=jnp.where(active, old_len + n, t_state.lengths))
        d_len = old_len + jnp.minimum(n, gamma - 1)
        d_state = d_state.replace(lengths=jnp.where(active, d_len, s.draft_state.lengths))

        accepted = (jnp.arange(gamma)[None, :] < n[:, None]) & active[:, None]  # [batch, gamma]
        stats = s.stats.replace(
            target_calls=s.stats.target_calls + 1,
            draft_calls=s.stats.draft_calls + gamma,
            emitted=s.stats.emitted + count,
            iterations=s.stats.iterations + active.astype(jnp.int32),
            accepted_at=s.stats.accepted_at + accepted.sum(0).astype(jnp.int32),
            nan_rows=s.stats.nan_rows
            | (active & (jnp.isnan(logits).any(axis=(1, 2)) | jnp.isnan(q).any(axis=(1, 2)))),
        )
        return s.replace(
            step=s.step + 1, seq=seq, target_state=t_state, draft_state=d_state, stats=stats
        )

    @staticmethod
    def running(s: SpecLoopState) -> jax.Array:
        """Loop condition: some row still active."""
        return ~jnp.all(s.seq.done)

    # -- host-facing API -------------------------------------------------------------------

    def prepare(self, prompts, max_new_tokens):
        """Host-side validation and bucketing of prompts."""
        tokens, lengths = prompt_lib.pad_prompts(
            prompts, self.target.vocab_size, 0, self.min_bucket
        )
        prompt_lib.check_capacity(tokens.shape[1], max_new_tokens, self.gamma, self.cache_len)
        return jnp.asarray(tokens), jnp.asarray(lengths)

    def generate(
        self,
        target_params,
        draft_params,
        prompts,
        key,
        max_new_tokens: int,
        eos_id: int | None = None,
    ) -> GenerationResult:
        """Generates up to `max_new_tokens` per prompt in one jitted call.

        Args:
          target_params: target parameters.
          draft_params: draft parameters ({} for parameter-free drafts).
          prompts: list of 1-D token sequences (ragged), or int [batch, P].
          key: PRNG key.
          max_new_tokens: >= 1; traced, so new values do not recompile.
          eos_id: stop a row after this token (None: never).

        Returns:
          GenerationResult with per-call statistics (`.summary()` for α, tokens/iteration).
        """
        tokens, lengths = self.prepare(prompts, max_new_tokens)
        eos = -1 if eos_id is None else int(eos_id)
        result = _generate_jit(
            self, target_params, draft_params, tokens, lengths, key, max_new_tokens, eos
        )
        check_finite_result(result)
        return result

    def stream(
        self,
        target_params,
        draft_params,
        prompts,
        key,
        max_new_tokens: int,
        eos_id: int | None = None,
    ):
        """Python-loop twin of `generate`: yields (tokens [batch, gamma + 1], counts [batch]).

        Row b emitted tokens[b, :counts[b]] this iteration. Same step and keys as `generate`, so
        the output is identical; the generator's return value is the GenerationResult.
        """
        tokens, lengths = self.prepare(prompts, max_new_tokens)
        eos = -1 if eos_id is None else int(eos_id)
        s = _init_jit(self, target_params, draft_params, tokens, lengths, key, max_new_tokens, eos)
        while bool(self.running(s)):
            before = s.seq.lengths
            s = _step_jit(self, target_params, draft_params, s)
            index = before[:, None] + jnp.arange(self.gamma + 1)[None, :]
            index = jnp.minimum(index, self.cache_len - 1)
            yield jnp.take_along_axis(s.seq.tokens, index, axis=1), s.seq.lengths - before
        result = GenerationResult(s.seq.tokens, s.seq.lengths, s.prompt_lengths, s.stats)
        check_finite_result(result)
        return result


@functools.partial(jax.jit, static_argnums=0)
def _init_jit(decoder, target_params, draft_params, tokens, lengths, key, max_new, eos_id):
    return decoder.init(target_params, draft_params, tokens, lengths, key, max_new, eos_id)


@functools.partial(jax.jit, static_argnums=0)
def _step_jit(decoder, target_params, draft_params, s):
    return decoder.step(target_params, draft_params, s)


@functools.partial(jax.jit, static_argnums=0)
def _generate_jit(decoder, target_params, draft_params, tokens, lengths, key, max_new, eos_id):
    s = decoder.init(target_params, draft_params, tokens, lengths, key, max_new, eos_id)
    s = jax.lax.while_loop(
        decoder.running, lambda s: decoder.step(target_params, draft_params, s), s
    )
    return GenerationResult(s.seq.tokens, s.seq.lengths, s.prompt_lengths, s.stats)
