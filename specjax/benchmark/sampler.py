"""Per-draw cost of the categorical samplers and of argmax, in-loop, by vocabulary size.

Each figure is one device loop of `draws` calls on one [batch, vocab] row
(`overhead._repeat_piece`: a `lax.fori_loop` whose index keys each draw or perturbs argmax's
input, so nothing is hoisted), timed round-robin against the others (`timing.interleaved`) and
divided by `draws`: what a decoding loop pays per call.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp

from specjax.benchmark.overhead import _repeat_piece
from specjax.benchmark.timing import interleaved
from specjax.checks import check_count
from specjax.decoding import sample_from_probs
from specjax.decoding.argmax import first_argmax
from specjax.decoding.categorical import default_block

__all__ = ["sampler_table"]


def _draw(vocab_block, i, probs):
    """One draw with key i from probs * (1 + 1e-30 i) (== probs in float32, but loop-variant, so
    XLA cannot hoist the block sums out of the loop); `vocab_block` None: the two-level default,
    else the block size."""
    probs = probs * (1.0 + i.astype(probs.dtype) * 1e-30)
    return sample_from_probs(jax.random.fold_in(jax.random.key(0), i), probs, vocab_block).sum()


def _argmax(fn, i, x):
    """fn(x + 1e-30 i): the shift is below x's float32 resolution but keeps the call in the loop."""
    return fn(x + i.astype(x.dtype) * 1e-30).sum()


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
    vocabs = tuple(vocabs)  # read twice: a generator would be spent by the check
    for vocab in vocabs:
        check_count("each of vocabs", vocab)
    check_count("batch", batch)
    if draws is not None:
        check_count("draws", draws)  # the time per call divides by it
    check_count("repeats", repeats)
    rows = []
    for vocab in vocabs:
        n = draws if draws is not None else max(500, 4_000_000 // vocab)
        logits = 3.0 * jax.random.normal(jax.random.key(vocab), (batch, vocab))
        probs = jax.nn.softmax(logits)
        pieces = {
            "categorical": (functools.partial(_draw, vocab), probs),  # block = vocab: one level
            "two_level": (functools.partial(_draw, None), probs),
            "argmax": (functools.partial(_argmax, jnp.argmax), logits),
            "first_argmax": (functools.partial(_argmax, first_argmax), logits),
        }
        calls = {
            name: functools.partial(_repeat_piece, piece, (x,), n)
            for name, (piece, x) in pieces.items()
        }
        timed = interleaved(calls, repeats=repeats, clock=clock)
        row = {"vocab": vocab, "block": default_block(vocab)}
        row.update({name: t.median / n * 1e3 for name, t in timed.items()})
        rows.append(row)
    return rows
