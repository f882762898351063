"""Host-side prompt preparation: validation, right padding to a length bucket.

Prompts are right-padded: every row keeps its tokens at positions 0..len-1, so per-row cache
lengths need no position offsets. Padding the width to a bucket (next power of two, at least
`min_bucket`) lets prompts of similar length share one compiled program.
"""

from __future__ import annotations

import numpy as np


def bucket_length(length: int, min_bucket: int = 16) -> int:
    """Smallest power of two >= max(length, min_bucket)."""
    size = max(int(min_bucket), 1)
    while size < length:
        size *= 2
    return size


def pad_prompts(prompts, vocab_size: int, pad_id: int = 0, min_bucket: int = 16):
    """Validates prompts and right-pads them to a bucketed width.

    Args:
      prompts: a list of 1-D integer sequences, or an int array [batch, P] with every row full.
      vocab_size: tokens must lie in [0, vocab_size).
      pad_id: padding token (never attended to).
      min_bucket: smallest padded width.

    Returns:
      tokens: int32 [batch, bucket], lengths: int32 [batch].
    """
    if isinstance(prompts, np.ndarray) or hasattr(prompts, "shape"):
        arr = np.asarray(prompts)
        if arr.ndim != 2:
            raise ValueError(
                f"prompts as an array must have shape [batch, length]; got {arr.shape}"
            )
        rows = list(arr)
    else:
        rows = [np.asarray(p) for p in prompts]
    if not rows:
        raise ValueError("prompts is empty: pass at least one prompt")
    for i, row in enumerate(rows):
        if row.ndim != 1:
            raise ValueError(f"prompts[{i}] must be a 1-D token sequence; got shape {row.shape}")
        if row.size == 0:
            raise ValueError(f"prompts[{i}] is empty: every prompt needs at least one token")
        if not np.issubdtype(row.dtype, np.integer):
            raise TypeError(f"prompts[{i}] must hold integer token ids; got dtype {row.dtype}")
        if row.min() < 0 or row.max() >= vocab_size:
            raise ValueError(
                f"prompts[{i}] has token ids in [{row.min()}, {row.max()}], outside the "
                f"vocabulary [0, {vocab_size})"
            )
    lengths = np.array([len(r) for r in rows], np.int32)
    width = bucket_length(int(lengths.max()), min_bucket)
    tokens = np.full((len(rows), width), pad_id, np.int32)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = row
    return tokens, lengths


def check_capacity(prompt_width: int, max_new_tokens: int, lookahead: int, cache_len: int):
    """Raises ValueError naming the argument if a generation cannot fit in the cache.

    Args:
      prompt_width: padded prompt width.
      max_new_tokens: requested new tokens.
      lookahead: extra positions a step may write past the output (γ for speculative, 0 else).
      cache_len: positions the caches hold.
    """
    if isinstance(max_new_tokens, bool) or int(max_new_tokens) != max_new_tokens:
        raise TypeError(f"max_new_tokens must be an integer, got {max_new_tokens!r}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    need = prompt_width + max_new_tokens + lookahead
    if need > cache_len:
        raise ValueError(
            f"prompt (padded to {prompt_width} tokens) + max_new_tokens ({max_new_tokens})"
            + (f" + gamma lookahead ({lookahead})" if lookahead else "")
            + f" = {need} exceeds cache_len={cache_len}; raise cache_len or shorten the prompt"
        )
