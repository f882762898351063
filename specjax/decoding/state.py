"""The loop's bookkeeping, shared by every decoder: output sequences, `emit`, counters.

What the models see (their caches) is kept apart from this bookkeeping: the output sequences
and the statistics from which α and tokens per iteration are measured. The loop state that holds
both is `decoding/loop.py`'s `LoopState`; host-side summaries of the counters are in
`decoding/stats.py`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import PartitionSpec

from specjax.decoding.stats import summarize_stats
from specjax.models.interface import per_row_axes
from specjax.models.kv_cache import write_rows

# Bits of `DecodeStats.nan_rows`: which model's numbers went NaN in a row.
NAN_TARGET = 1
NAN_DRAFT = 2


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

    def logical_axes(self) -> Sequences:
        """Every field is per row."""
        return jax.tree.map(lambda x: per_row_axes(x.ndim), self)


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
      nan_rows: int32 [batch] which model gave a row NaN, as bits: NAN_TARGET (its logits),
        NAN_DRAFT (the draft's logits or probabilities); nonzero rows are rejected on the host.
      tested_at: int32 [gamma] for each draft position i, how many (row, iteration) pairs
        tested the i-th drafted token (a row tests its drafts until its first rejection or its
        last drafted token): the denominators of acceptance by position and of α. For a token
        tree, position i is depth i + 1: a row tested depth i + 1 when it reached a node at depth
        i that had children.
      accepted_rank: int32 [depth, branch] for token trees: how many (row, iteration) pairs
        accepted, at depth d + 1, the child of rank k (k = 0 the first tried); None for chains.
      drafted_hist: int32 [gamma + 1] with an adaptive γ: how many (row, iteration) pairs
        drafted d tokens, d = 0..gamma; None otherwise.
    """

    target_calls: jax.Array
    draft_calls: jax.Array
    emitted: jax.Array
    iterations: jax.Array
    accepted_at: jax.Array
    nan_rows: jax.Array
    tested_at: jax.Array
    accepted_rank: jax.Array | None = None
    drafted_hist: jax.Array | None = None

    def logical_axes(self) -> DecodeStats:
        """Per-row counters split by `batch`; totals and per-position counts replicated."""
        row, whole = PartitionSpec("batch"), PartitionSpec()
        return DecodeStats(
            target_calls=whole,
            draft_calls=whole,
            emitted=row,
            iterations=row,
            accepted_at=PartitionSpec(None),
            nan_rows=row,
            tested_at=PartitionSpec(None),
            accepted_rank=None if self.accepted_rank is None else PartitionSpec(None, None),
            drafted_hist=None if self.drafted_hist is None else PartitionSpec(None),
        )


def init_stats(batch: int, gamma: int, branch: int | None = None) -> DecodeStats:
    """Zero counters for `gamma` draft positions (tree depths); `branch`: a tree's widest node."""
    zero = jnp.zeros((), jnp.int32)
    return DecodeStats(
        target_calls=zero,
        draft_calls=zero,
        emitted=jnp.zeros((batch,), jnp.int32),
        iterations=jnp.zeros((batch,), jnp.int32),
        accepted_at=jnp.zeros((gamma,), jnp.int32),
        nan_rows=jnp.zeros((batch,), jnp.int32),
        tested_at=jnp.zeros((gamma,), jnp.int32),
        accepted_rank=None if branch is None else jnp.zeros((gamma, branch), jnp.int32),
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


def nan_flags(nan_target: jax.Array, nan_draft: jax.Array | None = None) -> jax.Array:
    """int32 [batch] bits for `DecodeStats.nan_rows` from bool [batch] flags (jittable)."""
    flags = jnp.where(nan_target, NAN_TARGET, 0)
    if nan_draft is not None:
        flags = flags | jnp.where(nan_draft, NAN_DRAFT, 0)
    return flags.astype(jnp.int32)


def nan_message(nan_rows) -> str | None:
    """What went NaN in which rows, naming the params to check (None if nothing did)."""
    nan_rows = np.asarray(jax.device_get(nan_rows)).astype(np.int64)
    parts = []
    for bit, what, fix in (
        (NAN_TARGET, "the target's logits", "target_params and the prompts"),
        (NAN_DRAFT, "the draft's logits or probabilities", "draft_params"),
    ):
        rows = np.flatnonzero(nan_rows & bit).tolist()
        if rows:
            parts.append(f"{what} contained NaN for batch rows {rows} (check {fix})")
    if not parts:
        return None
    return "; ".join(parts) + ": the generated tokens of those rows are meaningless"


def check_finite_result(result: GenerationResult) -> None:
    """Raises ValueError naming the model (target or draft) whose numbers went NaN, and the rows
    (one host sync, after the loop)."""
    message = nan_message(result.stats.nan_rows)
    if message is not None:
        raise ValueError(message)
