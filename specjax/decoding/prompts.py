"""Host-side prompt preparation: validation, right padding to a length bucket.

Prompts are right-padded: every row keeps its tokens at positions 0..len-1, so per-row cache
lengths need no position offsets. Padding the width to a bucket (next power of two, at least
`min_bucket`, at most the cache) lets prompts of similar length share one compiled program.
Padding is never attended and never counted: capacity is checked with the real lengths.
"""

from __future__ import annotations

import numpy as np


def bucket_length(length: int, min_bucket: int = 16) -> int:
    """Smallest power of two >= max(length, min_bucket)."""
    size = max(int(min_bucket), 1)
    while size < length:
        size *= 2
    return size


def pad_prompts(
    prompts, vocab_size: int, pad_id: int = 0, min_bucket: int = 16, max_width: int | None = None
):
    """Validates prompts and right-pads them to a bucketed width.

    Args:
      prompts: a list of 1-D integer sequences, or an int array [batch, P] with every row full.
      vocab_size: tokens must lie in [0, vocab_size).
      pad_id: padding token (never attended to).
      min_bucket: smallest padded width.
      max_width: the bucket's cap (the cache length): the width is then at most
        max(max_width, longest prompt). None: no cap.

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
    longest = int(lengths.max())
    width = bucket_length(longest, min_bucket)
    if max_width is not None:
        width = max(min(width, int(max_width)), longest)
    tokens = np.full((len(rows), width), pad_id, np.int32)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = row
    return tokens, lengths


def check_capacity(
    prompt_length: int,
    max_new_tokens: int,
    lookahead: int,
    cache_len: int,
    position_limit: int | None = None,
    limited_by: str = "model",
):
    """Raises ValueError, saying what to shorten, if a generation cannot fit in the cache.

    Args:
      prompt_length: the longest prompt's real length (padding does not count: it is never
        attended, and what would land past the buffer is never written).
      max_new_tokens: requested new tokens.
      lookahead: extra positions a step may write past the output (γ for speculative, 0 else).
      cache_len: positions the caches hold.
      position_limit: the most positions the models can read (a learned position table), or
        None: cache_len could be raised without bound.
      limited_by: which model has that limit ("target", "draft", "model").
    """
    try:
        whole = not isinstance(max_new_tokens, bool) and int(max_new_tokens) == max_new_tokens
    except (TypeError, ValueError):  # None, a string, an array of several
        whole = False
    if not whole:
        raise TypeError(f"max_new_tokens must be an integer, got {max_new_tokens!r}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    need = prompt_length + max_new_tokens + lookahead
    if need <= cache_len:
        return
    fixes = []
    if cache_len - max_new_tokens - lookahead >= 1:
        fixes.append(
            f"shorten the prompt to at most {cache_len - max_new_tokens - lookahead} tokens"
        )
    if cache_len - prompt_length - lookahead >= 1:
        fixes.append(f"lower max_new_tokens to at most {cache_len - prompt_length - lookahead}")
    if position_limit is None:
        fixes.append("raise cache_len")
        limit = ""
    elif cache_len < position_limit:
        fixes.append(f"raise cache_len (up to {position_limit}: the {limited_by}'s position limit)")
        limit = ""
    else:
        limit = (
            f"; cache_len cannot grow: {cache_len} positions is the {limited_by}'s limit "
            f"(its learned position table, max_len={position_limit})"
        )
    if not fixes:
        fixes.append("draft fewer tokens per step (a smaller gamma or tree)")
    raise ValueError(
        f"longest prompt ({prompt_length} tokens) + max_new_tokens ({max_new_tokens})"
        + (f" + gamma lookahead ({lookahead})" if lookahead else "")
        + f" = {need} exceeds cache_len={cache_len}{limit}; "
        + (fixes[0] if len(fixes) == 1 else ", ".join(fixes[:-1]) + " or " + fixes[-1])
    )
