"""Cache-sized copies in compiled programs: the XLA:CPU pitfall, counted (see specjax/runtime.py).

Without `--xla_cpu_copy_insertion_use_region_analysis` XLA:CPU copies the KV caches in every
decoding step. `count_cache_copies` counts the stand-alone copy ops of a compiled program's HLO
text that produce a buffer of the cache's shape; `loop_cache_copies` does it for a decoder's
whole `generate` program.
"""

from __future__ import annotations

import re

from specjax.decoding import loop


def count_cache_copies(hlo: str, cache_shape) -> int:
    """Stand-alone copy ops (outside fusions) producing an f32 buffer of the KV cache's shape.

    A copy inside a fused computation is a layout change folded into the fusion's loop; a
    stand-alone copy is an extra pass over the whole buffer (what the XLA:CPU pitfall adds).

    Args:
      hlo: a compiled program's text (`jax.jit(f).lower(...).compile().as_text()`).
      cache_shape: the cache buffer's shape, e.g. (batch, cache_len, kv_heads, head_dim).
    """
    dims = ",".join(str(d) for d in cache_shape)
    pattern = re.compile(rf"= f32\[{dims}\]\{{[^}}]*\}} copy\(")
    count, fused = 0, False
    for line in hlo.split("\n"):
        if line and not line[0].isspace():  # a computation header
            fused = "fused" in line.split(" ")[0] or "fusion" in line.split(" ")[0]
        elif not fused and pattern.search(line):
            count += 1
    return count


def loop_cache_copies(decoder, params: tuple, tokens, lengths, key, max_new_tokens, cache_shape):
    """`count_cache_copies` of a decoder's whole generation program (`loop.generate_jit`).

    Args:
      decoder: any decoder of the loop driver.
      params: one params pytree per entry of `decoder.models`.
      tokens, lengths: bucketed prompts (`arguments.prepare`).
      key: PRNG key.
      max_new_tokens: the budget (traced: any value gives the same program).
      cache_shape: as for `count_cache_copies`.
    """
    lowered = loop.generate_jit.lower(decoder, params, tokens, lengths, key, max_new_tokens, -1)
    return count_cache_copies(lowered.compile().as_text(), cache_shape)
