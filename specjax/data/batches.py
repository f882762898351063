"""Deterministic, seekable batches of token windows for training, evaluation and prompting.

Training batches are a pure function of (seed, step): `batch_at` draws window starts from
`np.random.default_rng([seed, step])`. A run resumed at step s therefore sees exactly the
batches it would have seen without the interruption, and the only iterator state worth saving
is the step number.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np

from specjax.data.tokenizer import PAD_ID


def _check_tokens(tokens) -> np.ndarray:
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"tokens must hold integers, got dtype {arr.dtype}")
    return arr


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_fits(num_tokens: int, window: int, what: str) -> None:
    if window > num_tokens:
        raise ValueError(f"{what} needs {window} tokens but the corpus has only {num_tokens}")


def window_starts(
    num_tokens: int, step: int, batch_size: int, seq_len: int, seed: int
) -> np.ndarray:
    """Start offsets of the training windows of one step (what `batch_at` slices).

    Args:
      num_tokens: length of the token array.
      step: training step, >= 0.
      batch_size: windows per batch, >= 1.
      seq_len: model input length, >= 1; a window holds seq_len + 1 tokens (inputs + shifted
        targets).
      seed: data seed, >= 0.

    Returns:
      int64 [batch_size], each in [0, num_tokens - seq_len - 1], drawn uniformly with
      replacement.
    """
    num_tokens = _check_int(num_tokens, "num_tokens", 0)
    step = _check_int(step, "step", 0)
    batch_size = _check_int(batch_size, "batch_size", 1)
    seq_len = _check_int(seq_len, "seq_len", 1)
    seed = _check_int(seed, "seed", 0)
    _check_fits(num_tokens, seq_len + 1, f"a window of seq_len + 1 = {seq_len + 1}")
    rng = np.random.default_rng([seed, step])
    return rng.integers(0, num_tokens - seq_len, size=batch_size, dtype=np.int64)


def batch_at(tokens, step: int, batch_size: int, seq_len: int, seed: int) -> np.ndarray:
    """The training batch of `step`: random windows of seq_len + 1 consecutive tokens.

    Args:
      tokens: 1-D integer token ids, e.g. from `load_corpus`.
      step: training step, >= 0.
      batch_size: windows per batch, >= 1.
      seq_len: model input length, >= 1.
      seed: data seed, >= 0.

    Returns:
      int32 [batch_size, seq_len + 1]; row r is tokens[s_r : s_r + seq_len + 1] with s_r from
      `window_starts`. Inputs are [:, :-1], targets [:, 1:].
    """
    tokens = _check_tokens(tokens)
    starts = window_starts(tokens.size, step, batch_size, seq_len, seed)  # [batch]
    offsets = starts[:, None] + np.arange(seq_len + 1)  # [batch, seq_len + 1]
    return tokens[offsets].astype(np.int32)


class TrainBatches:
    """Endless iterator over `batch_at(tokens, step, ...)` for step = start_step, start_step + 1...

    Save `state` (the next step) with a checkpoint and pass it back as `start_step` to resume.
    """

    def __init__(self, tokens, batch_size: int, seq_len: int, seed: int, start_step: int = 0):
        """Checks the arguments once, so a bad configuration fails before training starts.

        Args:
          tokens: 1-D integer token ids.
          batch_size: windows per batch, >= 1.
          seq_len: model input length, >= 1.
          seed: data seed, >= 0.
          start_step: step of the first batch produced, >= 0.
        """
        self._tokens = _check_tokens(tokens)
        window_starts(self._tokens.size, start_step, batch_size, seq_len, seed)  # validates
        self.batch_size = int(batch_size)
        self.seq_len = int(seq_len)
        self.seed = int(seed)
        self.step = int(start_step)

    @property
    def state(self) -> int:
        """The step of the next batch; checkpoint this."""
        return self.step

    def __iter__(self) -> Iterator[np.ndarray]:
        return self

    def __next__(self) -> np.ndarray:
        """Returns int32 [batch_size, seq_len + 1] for the current step and advances it."""
        batch = batch_at(self._tokens, self.step, self.batch_size, self.seq_len, self.seed)
        self.step += 1
        return batch


def eval_windows(tokens, seq_len: int, max_windows: int | None = None) -> np.ndarray:
    """Fixed evaluation windows whose targets do not overlap.

    Window i is tokens[i * seq_len : i * seq_len + seq_len + 1]: consecutive windows share one
    boundary token (the last target of one is the first input of the next), so every token after
    the first is a target exactly once. The tail that does not fill a window is dropped.

    Args:
      tokens: 1-D integer token ids (validation split).
      seq_len: model input length, >= 1.
      max_windows: keep only the first this many windows (>= 1); None keeps all.

    Returns:
      int32 [num_windows, seq_len + 1], num_windows = min((len(tokens) - 1) // seq_len,
      max_windows).
    """
    tokens = _check_tokens(tokens)
    seq_len = _check_int(seq_len, "seq_len", 1)
    _check_fits(tokens.size, seq_len + 1, f"an eval window of seq_len + 1 = {seq_len + 1}")
    num = (tokens.size - 1) // seq_len
    if max_windows is not None:
        num = min(num, _check_int(max_windows, "max_windows", 1))
    offsets = np.arange(num)[:, None] * seq_len + np.arange(seq_len + 1)  # [num, seq_len + 1]
    return tokens[offsets].astype(np.int32)


def eval_batches(
    tokens, batch_size: int, seq_len: int, max_windows: int | None = None, pad_id: int = PAD_ID
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """`eval_windows` in batches of a fixed shape (one jit compilation for the whole eval).

    Args:
      tokens: 1-D integer token ids.
      batch_size: windows per batch, >= 1.
      seq_len: model input length, >= 1.
      max_windows: cap on the number of windows; None keeps all.
      pad_id: fills the rows that pad the last batch.

    Yields:
      windows: int32 [batch_size, seq_len + 1].
      valid: bool [batch_size]; False marks padding rows, which must get zero weight.
    """
    batch_size = _check_int(batch_size, "batch_size", 1)
    windows = eval_windows(tokens, seq_len, max_windows)  # [num, seq_len + 1]
    for lo in range(0, windows.shape[0], batch_size):
        chunk = windows[lo : lo + batch_size]
        valid = np.zeros((batch_size,), bool)
        valid[: chunk.shape[0]] = True
        if chunk.shape[0] < batch_size:
            pad = np.full((batch_size - chunk.shape[0], seq_len + 1), pad_id, np.int32)
            chunk = np.concatenate([chunk, pad])
        yield chunk, valid


def spread_eval_batches(
    tokens, seq_len: int, batch_size: int, max_windows: int | None = None
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Fixed evaluation windows spread evenly over a split, in batches of one shape.

    Like `eval_batches`, but a cap keeps windows spaced evenly across the whole split instead of
    its first ones (whose documents, in sorted order, are not a fair sample). The arguments are
    checked when it is called, not at the first batch.

    Args:
      tokens: 1-D token ids.
      seq_len: window length (inputs; a window holds seq_len + 1 tokens), >= 1.
      batch_size: windows per batch, >= 1.
      max_windows: how many windows (the first, last and evenly spaced ones between), >= 1;
        None or at least the number of windows: all.

    Returns:
      An iterator of windows int32 [batch_size, seq_len + 1] and valid bool [batch_size]
      (False: padding row).
    """
    batch_size = _check_int(batch_size, "batch_size", 1)
    if max_windows is not None:
        max_windows = _check_int(max_windows, "max_windows", 1)
    windows = eval_windows(tokens, seq_len)  # [num, seq_len + 1], disjoint targets
    num = windows.shape[0]
    if max_windows is not None and max_windows < num:
        # Consecutive picks are >= 1 apart before flooring, so they stay distinct.
        windows = windows[np.floor(np.linspace(0, num - 1, max_windows)).astype(np.int64)]
    return _padded_batches(windows, seq_len, batch_size)


def _padded_batches(windows: np.ndarray, seq_len: int, batch_size: int):
    """Yields `windows` [num, seq_len + 1] in batches of `batch_size`, the last padded."""
    for lo in range(0, windows.shape[0], batch_size):
        chunk = windows[lo : lo + batch_size]
        valid = np.arange(batch_size) < chunk.shape[0]  # [batch_size]
        if chunk.shape[0] < batch_size:
            pad = np.full((batch_size - chunk.shape[0], seq_len + 1), PAD_ID, np.int32)
            chunk = np.concatenate([chunk, pad])
        yield chunk, valid


@dataclasses.dataclass(frozen=True)
class Prompts:
    """Prompts cut from a corpus, with what followed them there.

    Attributes:
      offsets: int64 [num_prompts], where each prompt starts in the token array.
      tokens: int32 [num_prompts, prompt_len], the prompts.
      continuations: int32 [num_prompts, continuation_len], the tokens that follow each prompt
        in the corpus (reference text for generation experiments).
    """

    offsets: np.ndarray
    tokens: np.ndarray
    continuations: np.ndarray


def sample_prompts(
    tokens, num_prompts: int, prompt_len: int, seed: int, continuation_len: int = 0
) -> Prompts:
    """Draws distinct prompt start offsets from a split, uniformly without replacement.

    Args:
      tokens: 1-D integer token ids (normally the validation split).
      num_prompts: how many prompts, >= 1.
      prompt_len: tokens per prompt, >= 1.
      seed: >= 0; the same seed gives the same prompts.
      continuation_len: tokens after each prompt to return as reference, >= 0; every prompt
        is drawn so that its continuation fits in the corpus.

    Returns:
      `Prompts`, sorted by offset.
    """
    tokens = _check_tokens(tokens)
    num_prompts = _check_int(num_prompts, "num_prompts", 1)
    prompt_len = _check_int(prompt_len, "prompt_len", 1)
    seed = _check_int(seed, "seed", 0)
    continuation_len = _check_int(continuation_len, "continuation_len", 0)
    span = prompt_len + continuation_len
    _check_fits(tokens.size, span, f"prompt_len + continuation_len = {span}")
    num_starts = tokens.size - span + 1
    if num_prompts > num_starts:
        raise ValueError(
            f"num_prompts={num_prompts} exceeds the {num_starts} distinct start offsets the "
            f"corpus of {tokens.size} tokens has for windows of {span}"
        )
    rng = np.random.default_rng(seed)
    offsets = np.sort(rng.choice(num_starts, size=num_prompts, replace=False)).astype(np.int64)
    idx = offsets[:, None] + np.arange(span)  # [num_prompts, span]
    spans = tokens[idx].astype(np.int32)
    return Prompts(
        offsets=offsets, tokens=spans[:, :prompt_len], continuations=spans[:, prompt_len:]
    )
