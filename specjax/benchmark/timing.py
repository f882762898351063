"""Timing with warm-up, `block_until_ready` and medians; speedup intervals and their verdict.

The CPU we develop on drifts by up to 1.5x within a session, so only ratios measured side by side
in one run mean anything; every figure here is a median over repeats after a warm-up call that
also absorbs compilation. `interleaved` is the one round-robin harness (benchmarks, scripts and
experiments time through it): wall and process CPU time of every round, and each call's last
output. `ratio_interval` gives a speedup's 95 % interval from paired rounds, `speedup_interval`
recomputes it from a stored row and `judge_speedup` compares a speedup with a prediction.
`held_out_fastest` is the best of several candidates without the winner's curse.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from specjax.checks import check_count, check_finite_real


@dataclasses.dataclass(frozen=True)
class Timing:
    """Seconds per call over repeats.

    Attributes:
      median: median seconds (of the clock asked for: wall time by default).
      samples: every repeat, in order.
      cpu_samples: process CPU seconds (all threads) of the same repeats, when recorded (); on
        a shared machine waiting for a core inflates wall time, not CPU time.
      output: the last timed call's output (`interleaved`), or None.
    """

    median: float
    samples: tuple
    cpu_samples: tuple = ()
    output: Any = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def cpu_median(self) -> float:
        """Median process CPU seconds (nan when CPU time was not recorded)."""
        return float(np.median(self.cpu_samples)) if self.cpu_samples else float("nan")

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: how noisy the measurement was (nan without samples)."""
        if not self.samples:
            return float("nan")
        lo, hi = np.percentile(self.samples, [10, 90])
        return float((hi - lo) / self.median) if self.median > 0 else 0.0


def time_call(
    fn: Callable, *args, repeats: int = 5, warmup: int = 1, clock: Callable = time.perf_counter
) -> Timing:
    """Times `fn(*args)` until its outputs are ready.

    Args:
      fn: usually a jitted function.
      *args: its arguments.
      repeats: timed calls (>= 1).
      warmup: untimed calls first (compilation, caches).
      clock: `time.perf_counter` (wall time) or `time.process_time` (CPU time of this process,
        all threads: steadier when other processes share the cores).

    Returns:
      Timing of the timed calls, with the last call's `output`.
    """
    check_count("repeats", repeats)  # 0 timed calls would give a nan median
    check_count("warmup", warmup, low=0)
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    samples = []
    for _ in range(repeats):
        start = clock()
        output = jax.block_until_ready(fn(*args))
        samples.append(clock() - start)
    return Timing(float(np.median(samples)), tuple(samples), output=output)


def interleaved(
    calls: dict,
    repeats: int = 5,
    warmup: int = 1,
    clock: Callable = time.perf_counter,
    rotate: bool = False,
) -> dict:
    """Times several zero-argument callables round-robin, so drift hits all of them alike.

    Every call ends when its output is ready (`jax.block_until_ready`; outputs that are not
    JAX arrays, e.g. host arrays or floats, are taken as they are). Each timed call is measured
    on `clock` and on the process CPU clock together.

    Args:
      calls: name -> zero-argument callable.
      repeats: timed rounds.
      warmup: untimed rounds (compilation, caches).
      clock: as for `time_call`.
      rotate: timed round r starts at call r (mod the number of calls) and wraps around, so
        no call always follows the same one (what a call pays for its predecessor, e.g. caches
        it evicted, becomes noise the intervals see); False: the order of `calls` every round.

    Returns:
      name -> Timing, with `cpu_samples` (process CPU seconds of the same rounds) and `output`
      (the last round's output).
    """
    check_count("repeats", repeats)  # 0 rounds would give every call a nan median
    check_count("warmup", warmup, low=0)
    last = {}
    for _ in range(warmup):
        for name, fn in calls.items():
            last[name] = jax.block_until_ready(fn())
    samples = {name: [] for name in calls}
    cpu = {name: [] for name in calls}
    names = list(calls)
    for r in range(repeats):
        shift = r % len(names) if rotate and names else 0
        for name in names[shift:] + names[:shift]:
            fn = calls[name]
            start, cpu_start = clock(), time.process_time()
            last[name] = jax.block_until_ready(fn())
            cpu[name].append(time.process_time() - cpu_start)
            samples[name].append(clock() - start)
    return {
        n: Timing(float(np.median(s)), tuple(s), tuple(cpu[n]), last.get(n))
        for n, s in samples.items()
    }


def _check_samples(name: str, samples, positive: bool = True):
    """Refuses, naming `name`, samples (a float array, or name -> float arrays) with a value
    that is not finite, or with `positive` (times) not > 0: a zero, negative or nan time turns
    a ratio or interval into nan, or a verdict into a pass. Returns `samples`."""
    table = samples if isinstance(samples, dict) else {None: samples}
    bad = []
    for key, a in table.items():
        ok = np.isfinite(a) & (a > 0) if positive else np.isfinite(a)
        if not np.all(ok):
            bad += a[~ok][:3].tolist() if key is None else [key]
    if bad:
        what = "times must be finite and positive" if positive else "values must be finite"
        raise ValueError(f"{name}: {what}; not so for {bad}")
    return samples


# Two-sided 95 % quantiles of Student's t by degrees of freedom 1..30 (beyond: 1.96).
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def ratio_interval(numerator, denominator) -> tuple[float, float] | None:
    """95 % interval of a ratio of paired timings, e.g. AR time / speculative time.

    Pairs are the rounds of `interleaved` (sample i of each was timed back to back, so drift
    common to a round cancels in its ratio); the interval is Student's t on the log ratios.

    Args:
      numerator, denominator: equal-length sequences of seconds (Timing.samples).

    Returns:
      (low, high), or None with fewer than 2 pairs.
    """
    num, den = np.asarray(numerator, np.float64), np.asarray(denominator, np.float64)
    if num.shape != den.shape or num.ndim != 1:
        raise ValueError(f"need equal-length 1-D samples; got {num.shape} and {den.shape}")
    _check_samples("numerator", num)
    _check_samples("denominator", den)
    if num.size < 2:
        return None
    logs = np.log(num / den)
    t = _T95[num.size - 2] if num.size - 1 <= len(_T95) else 1.96
    half = t * logs.std(ddof=1) / np.sqrt(num.size)
    return float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half))


def held_out_fastest(samples: dict, folds: int = 2) -> tuple[list, list] | None:
    """The fastest of several candidates, each round's time read from a pick made on other rounds.

    Taking the candidate with the lowest median and then reading its own rounds picks whichever
    candidate the noise favoured, so its time is biased low (the winner's curse: with five
    candidates of one speed, the best median sits below every candidate's true one), and a
    decoder compared with it looks slower than it is. Here round i belongs to fold i % folds;
    the rounds of a fold are answered by the candidate with the lowest median over the other
    folds' rounds, so no round's reading took part in its own selection (cross-fitting). The
    rounds of `interleaved` alternate in time, so drift reaches every fold alike. A pick that
    misses the true fastest (two candidates within the noise) makes the reference slightly
    slow, the opposite bias: the candidate's true speed lies between the two references.

    Args:
      samples: candidate -> equal-length sequences of per-round times (lower is better),
        paired round by round with the samples of whatever is compared with it.
      folds: 2 or more; each needs at least one round.

    Returns:
      (reference, picks): the reference's time in every round, and the candidate picked for
      each fold; None with fewer rounds than folds.
    """
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise ValueError(f"folds must be an int >= 2, got {folds!r}")
    if not samples:
        raise ValueError("samples: need at least one candidate")
    table = {name: np.asarray(s, np.float64) for name, s in samples.items()}
    lengths = {a.shape for a in table.values()}
    if len(lengths) != 1 or len(next(iter(lengths))) != 1:
        raise ValueError(f"samples: need equal-length 1-D sequences; got shapes {lengths}")
    _check_samples("samples", table)
    rounds = next(iter(table.values())).size
    if rounds < folds:
        return None
    fold = np.arange(rounds) % folds
    reference = np.empty(rounds)
    picks = []
    for f in range(folds):
        others = fold != f
        pick = min(table, key=lambda name: float(np.median(table[name][others])))
        picks.append(pick)
        reference[fold == f] = table[pick][fold == f]
    return reference.tolist(), picks


def mean_interval(samples) -> tuple[float, float] | None:
    """95 % interval of the mean of independent samples (Student's t); None with < 2. The
    samples must be finite (they may be negative: e.g. an overhead's share)."""
    arr = _check_samples("samples", np.asarray(samples, np.float64), positive=False)
    if arr.size < 2:
        return None
    t = _T95[arr.size - 2] if arr.size - 1 <= len(_T95) else 1.96
    half = t * arr.std(ddof=1) / np.sqrt(arr.size)
    return float(arr.mean() - half), float(arr.mean() + half)


def coefficient_of_variation(samples) -> float:
    """Sample standard deviation / mean of repeated timings (0 for a single sample); the
    timings must be finite and positive."""
    arr = _check_samples("samples", np.asarray(samples, np.float64))
    return float(arr.std(ddof=1) / arr.mean()) if arr.size > 1 and arr.mean() > 0 else 0.0


def speedup_interval(row: dict) -> tuple:
    """(low, high) of a stored speedup row: recomputed from its paired rounds when the row holds
    them (`ar_samples`, `spec_samples`: seconds of the baseline and of the decoder, round by
    round), else the recorded `speedup_low`, `speedup_high` ((None, None) if absent)."""
    ar, spec = row.get("ar_samples") or (), row.get("spec_samples") or ()
    if len(ar) >= 2 and len(ar) == len(spec):
        _check_samples("row['ar_samples']", np.asarray(ar, np.float64))
        _check_samples("row['spec_samples']", np.asarray(spec, np.float64))
        return ratio_interval(ar, spec)
    return row.get("speedup_low"), row.get("speedup_high")


def judge_speedup(speedup, low, high, predicted, tol: float = 0.10) -> dict:
    """Does a measured speedup agree with a prediction, given its 95 % interval?

    Agreement: the speedup is within `tol` of the prediction, or the prediction lies inside
    the interval (the measurement cannot tell them apart on this machine).

    Args:
      speedup: the measured speedup (median ratio).
      low, high: its 95 % interval, or None (one repeat: judged by `tol` alone).
      predicted: the prediction, or None (nothing to judge: never agrees).
      tol: relative bar.

    Returns:
      {"rel_err": speedup / predicted - 1 or None, "within_tol", "inside", "ok",
       "below_noise": the interval contains 1.0}.
    """
    check_finite_real("speedup", speedup)
    for name, value in (("low", low), ("high", high), ("predicted", predicted)):
        if value is not None:
            check_finite_real(name, value)
    if low is not None and high is not None and low > high:
        raise ValueError(f"low must be <= high; got low={low}, high={high}")
    check_finite_real("tol", tol, above_zero=False)
    rel_err = None if predicted is None else speedup / predicted - 1
    within = rel_err is not None and abs(rel_err) <= tol
    has_interval = low is not None and high is not None
    inside = predicted is not None and has_interval and low <= predicted <= high
    return {
        "rel_err": rel_err,
        "within_tol": within,
        "inside": inside,
        "ok": within or inside,
        "below_noise": has_interval and low <= 1.0 <= high,
    }
