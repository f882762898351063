"""Loop state shared by the autoregressive and speculative decoders.

What the models see (their caches) is kept apart from the loop's bookkeeping: the output
sequences and the statistics from which α and tokens per iteration are measured.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from specjax.models.kv_cache import write_rows


@struct.dataclass
class Sequences:
    """Prompt plus generated tokens per row.

    Attributes:
      tokens: int32 [batch, cache_len]; tokens[b, :lengths[b]] are the sequence.
      lengths: int32 [batch].
      num_generated: int32 [batch] tokens generated so far.
      done: bool [batch] the row hit EOS or max_new_tokens.
    """

    tokens: jax.Array
    lengths: jax.Array
    num_generated: jax.Array
    done: jax.Array


@struct.dataclass
class DecodeStats:
    """Per-call counters (device arrays until the result reaches the host).

    Attributes:
      target_calls: int32 [] target forward calls after prefill (one per loop iteration).
      draft_calls: int32 [] draft forward calls after prefill.
      emitted: int32 [batch] tokens emitted per row.
      iterations: int32 [batch] loop iterations in which the row was still active.
      accepted_at: int32 [gamma] for each draft position i, how many (row, iteration) pairs
        accepted the i-th drafted token (empty for autoregressive decoding).
      nan_rows: bool [batch] a row saw NaN logits (the result is then rejected on the host).
    """

    target_calls: jax.Array
    draft_calls: jax.Array
    emitted: jax.Array
    iterations: jax.Array
    accepted_at: jax.Array
    nan_rows: jax.Array


def init_stats(batch: int, gamma: int) -> DecodeStats:
    zero = jnp.zeros((), jnp.int32)
    return DecodeStats(
        target_calls=zero,
        draft_calls=zero,
        emitted=jnp.zeros((batch,), jnp.int32),
        iterations=jnp.zeros((batch,), jnp.int32),
        accepted_at=jnp.zeros((gamma,), jnp.int32),
        nan_rows=jnp.zeros((batch,), bool),
    )


def init_sequences(prompts: jax.Array, prompt_lengths: jax.Array, cache_len: int) -> Sequences:
    """Places right-padded prompts [batch, P] into a [batch, cache_len] buffer."""
    batch, width = prompts.shape
    tokens = jnp.zeros((batch, cache_len), jnp.int32).at[:, :width].set(prompts)
    return Sequences(
        tokens=tokens,
        lengths=prompt_lengths.astype(jnp.int32),
        num_generated=jnp.zeros((batch,), jnp.int32),
        done=jnp.zeros((batch,), bool),
    )


def last_tokens(seq: Sequences, count: int) -> jax.Array:
    """int32 [batch, count]: the last `count` tokens of each row, oldest first."""
    offsets = jnp.arange(count) - count  # [count]
    index = jnp.maximum(seq.lengths[:, None] + offsets[None, :], 0)  # [batch, count]
    return jnp.take_along_axis(seq.tokens, index, axis=1)


def emit(
    seq: Sequences, new: jax.Array, count: jax.Array, eos_id: jax.Array, max_new_tokens: jax.Array
):
    """Appends new[b, :count[b]] to each active row, stopping at EOS and at the token budget.

    Args:
      seq: current sequences.
      new: int32 [batch, K] candidate tokens.
      count: int32 [batch] how many of them the step produced (0..K).
      eos_id: int32 [] end-of-sequence id, or -1 for none.
      max_new_tokens: int32 [] budget per row.

    Returns:
      (updated Sequences, int32 [batch] tokens actually appended).
    """
    k = new.shape[1]
    position = jnp.arange(k)[None, :]  # [1, K]
    count = jnp.where(seq.done, 0, jnp.minimum(count, max_new_tokens - seq.num_generated))
    is_eos = (new == eos_id) & (position < count[:, None]) & (eos_id >= 0)  # [batch, K]
    first_eos = jnp.min(jnp.where(is_eos, position, k), axis=1)  # [batch]
    count = jnp.minimum(count, first_eos + 1)
    tokens = write_rows(seq.tokens, new, seq.lengths)
    # Keep the buffer clean past each row's end: entries beyond `count` are restored.
    keep_old = jnp.arange(seq.tokens.shape[1])[None, :] >= (seq.lengths + count)[:, None]
    tokens = jnp.where(keep_old, seq.tokens, tokens)
    num_generated = seq.num_generated + count
    hit_eos = first_eos < count
    done = seq.done | hit_eos | (num_generated >= max_new_tokens)
    updated = Sequences(tokens, seq.lengths + count, num_generated, done)
    return updated, count


@struct.dataclass
class GenerationResult:
    """What `generate` returns.

    Attributes:
      tokens: int32 [batch, cache_len] prompt + generated, valid up to `lengths`.
      lengths: int32 [batch] total lengths.
      prompt_lengths: int32 [batch].
      stats: DecodeStats.
    """

    tokens: jax.Array
    lengths: jax.Array
    prompt_lengths: jax.Array
    stats: DecodeStats

    def new_tokens(self) -> list[np.ndarray]:
        """Generated tokens per row, as host arrays."""
        tokens, lengths, starts = jax.device_get((self.tokens, self.lengths, self.prompt_lengths))
        return [tokens[b, starts[b] : lengths[b]] for b in range(tokens.shape[0])]

    def summary(self) -> dict:
        """Host-side α and tokens-per-iteration estimates from the counters."""
        return summarize_stats([self.stats])


def summarize_stats(stats: list) -> dict:
    """α and tokens-per-iteration estimates from the counters of one or more decode calls.

    Args:
      stats: DecodeStats of calls with the same γ (counts are pooled across calls and rows).

    Returns:
      dict of call counts, tokens, and (speculative decoding) acceptance estimates.
    """
    host = [jax.device_get(s) for s in stats]
    iterations = int(sum(s.iterations.sum() for s in host))
    emitted = int(sum(s.emitted.sum() for s in host))
    out = {
        "target_calls": int(sum(s.target_calls for s in host)),
        "draft_calls": int(sum(s.draft_calls for s in host)),
        "tokens_emitted": emitted,
        "row_iterations": iterations,
        "tokens_per_iteration": emitted / max(iterations, 1),
    }
    accepted_at = np.sum([s.accepted_at for s in host], axis=0)  # [gamma]
    if accepted_at.size:
        reached = np.concatenate([[iterations], accepted_at[:-1]])
        out["acceptance_by_position"] = (accepted_at / np.maximum(reached, 1)).tolist()
        # Acceptance events over acceptance trials: each iteration tries positions until the
        # first rejection, so trials = accepted + rejections (one per non-full iteration).
        accepted = int(accepted_at.sum())
        rejections = iterations - int(accepted_at[-1])
        out["alpha_empirical"] = accepted / max(accepted + rejections, 1)
        # Tokens per iteration as the sampler produced them (n + 1), before EOS / budget
        # truncation of a row's last iteration: what (1 - α^{γ+1}) / (1 - α) predicts.
        out["sampler_tokens_per_iteration"] = 1.0 + accepted / max(iterations, 1)
    return out


def check_finite_result(result: GenerationResult) -> None:
    """Raises ValueError if a row saw NaN logits (one host sync, after the loop)."""
    nan_rows = np.asarray(jax.device_get(result.stats.nan_rows))
    if nan_rows.any():
        raise ValueError(
            f"model logits contained NaN for batch rows {np.flatnonzero(nan_rows).tolist()}; "
            "the generated tokens of those rows are meaningless (check the params / inputs)"
        )
