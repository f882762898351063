"""Per-draw cost of the categorical samplers and of argmax, in-loop, by vocabulary size.

Each figure is one device loop of `draws` calls on one [batch, vocab] row (`lax.fori_loop`, the
input perturbed by the loop index so nothing is hoisted), timed round-robin against the others
(`timing.interleaved`) and divided by `draws`: what a decoding loop pays per call.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp

from specjax.benchmark.timing import interleaved
from specjax.decoding.argmax import first_argmax
from specjax.decoding.categorical import default_block, sample_from_probs

__all__ = ["sampler_table"]


def _looped(fn, x: jax.Array, draws: int):
    """A zero-argument callable running `fn(key_i, x + 1e-30 i)` `draws` times in one program
    (the shift is below float32 resolution of x's entries but keeps the call inside the loop)."""

    @jax.jit
    def loop(x):
        def body(i, acc):
            shifted = x + i.astype(x.dtype) * 1e-30
            return acc + fn(jax.random.fold_in(jax.random.key(0), i), shifted).sum()

        return jax.lax.fori_loop(0, draws, body, jnp.int32(0))

    return lambda: loop(x)


def sampler_table(
    vocabs=(259, 4096, 32000, 128256),
    *,
    batch: int = 1,
    draws: int | None = None,
    repeats: int = 7,
    clock=time.process_time,
) -> list[dict]:
    """Milliseconds per call of each sampler and argmax, one dict per vocabulary size.

    Args:
      vocabs: vocabulary sizes.
      batch: rows per call.
      draws: calls per timed loop; None: max(500, 4e6 / vocab), so that even the fastest call's
        loop lasts ~10 ms (process CPU time on this VM is not reliable for ~1 ms intervals:
        200-call loops at vocab 259 gave 0.0006 and 0.0070 ms for the same sampler).
      repeats: timed rounds (medians).
      clock: `time.process_time` (CPU time of this process) or `time.perf_counter`.

    Returns:
      [{"vocab", "block", "categorical", "two_level", "argmax", "first_argmax"}] in ms per call:
      `jax.random.categorical` (one Gumbel per entry), `sample_from_probs` (two-level),
      `jnp.argmax` and `first_argmax`.
    """
    rows = []
    for vocab in vocabs:
        n = draws if draws is not None else max(500, 4_000_000 // vocab)
        logits = 3.0 * jax.random.normal(jax.random.key(vocab), (batch, vocab))
        probs = jax.nn.softmax(logits)
        calls = {
            "categorical": _looped(lambda k, p, v=vocab: sample_from_probs(k, p, v), probs, n),
            "two_level": _looped(sample_from_probs, probs, n),
            "argmax": _looped(lambda k, x: jnp.argmax(x, axis=-1), logits, n),
            "first_argmax": _looped(lambda k, x: first_argmax(x), logits, n),
        }
        timed = interleaved(calls, repeats=repeats, clock=clock)
        row = {"vocab": vocab, "block": default_block(vocab)}
        row.update({name: t.median / n * 1e3 for name, t in timed.items()})
        rows.append(row)
    return rows
