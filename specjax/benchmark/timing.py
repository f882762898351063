"""Wall-clock timing with warm-up, `block_until_ready` and medians.

The CPU we develop on drifts by up to 1.5x within a session, so only ratios measured side by side
in one run mean anything; every figure here is a median over repeats after a warm-up call that
also absorbs compilation.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import jax
import numpy as np


@dataclasses.dataclass(frozen=True)
class Timing:
    """Seconds per call over repeats.

    Attributes:
      median: median seconds.
      samples: every repeat, in order.
    """

    median: float
    samples: tuple

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: how noisy the measurement was."""
        lo, hi = np.percentile(self.samples, [10, 90])
        return float((hi - lo) / self.median) if self.median > 0 else 0.0


def time_call(fn: Callable, *args, repeats: int = 5, warmup: int = 1) -> Timing:
    """Times `fn(*args)` until its outputs are ready.

    Args:
      fn: usually a jitted function.
      *args: its arguments.
      repeats: timed calls (>= 1).
      warmup: untimed calls first (compilation, caches).

    Returns:
      Timing of the timed calls.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        samples.append(time.perf_counter() - start)
    return Timing(float(np.median(samples)), tuple(samples))


def interleaved(calls: dict, repeats: int = 5, warmup: int = 1) -> dict:
    """Times several zero-argument callables round-robin, so drift hits all of them alike.

    Args:
      calls: name -> zero-argument callable.
      repeats: timed rounds.
      warmup: untimed rounds.

    Returns:
      name -> Timing.
    """
    for _ in range(warmup):
        for fn in calls.values():
            jax.block_until_ready(fn())
    samples = {name: [] for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            start = time.perf_counter()
            jax.block_until_ready(fn())
            samples[name].append(time.perf_counter() - start)
    return {n: Timing(float(np.median(s)), tuple(s)) for n, s in samples.items()}
