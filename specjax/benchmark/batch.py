"""Throughput at batch: autoregressive vs speculative tokens/s as the batch grows.

At batch 1 a decode step streams every weight for one token, so the target is memory-bandwidth
bound and scoring γ+1 tokens costs little more than one: that is what speculation buys. As rows
are added, a step does more arithmetic per weight read; once the target is compute bound,
T_target(k, batch) grows with k·batch and verifying drafts costs what generating them would, so
speculation stops paying. Rows also accept different numbers of drafts (ragged acceptance): a
batch's loop runs until its slowest row is done, and a row that finished early idles.

`batch_table` measures, for each batch size, both decoders' tokens/s (timed round-robin, the
speedup with a 95 % interval over paired rounds) beside the target's step cost T_target(1) and
T_target(γ+1) at that batch, so the table shows where and why the speedup falls below 1.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np

from specjax.benchmark.costs import call_cost
from specjax.benchmark.versus import versus_autoregressive
from specjax.decoding import AutoregressiveDecoder, SpeculativeDecoder, loop


@dataclasses.dataclass(frozen=True)
class BatchRow:
    """One batch size's measurement.

    Attributes:
      batch: rows decoded together.
      ar_tokens_per_s, spec_tokens_per_s: generated tokens (all rows) per second, medians.
      speedup: spec / AR tokens/s.
      speedup_low, speedup_high: 95 % interval over paired rounds (None with one round).
      t_target_1_ms, t_target_verify_ms: the target's call scoring 1 and γ+1 tokens per row.
      verify_ratio: T_target(γ+1) / T_target(1) at this batch (1 = free verification).
      tokens_per_iteration: mean tokens per row-iteration of the speculative run.
      row_spread: (max − min) / mean of the rows' tokens per iteration (ragged acceptance).
      emitted, row_iterations: the speculative run's raw counts, summed over rows: tokens
        emitted and (row, iteration) pairs (tokens_per_iteration is their ratio).
    """

    batch: int
    ar_tokens_per_s: float
    spec_tokens_per_s: float
    speedup: float
    speedup_low: float | None
    speedup_high: float | None
    t_target_1_ms: float
    t_target_verify_ms: float
    verify_ratio: float
    tokens_per_iteration: float
    row_spread: float
    emitted: int
    row_iterations: int

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def batch_table(
    target,
    target_params,
    draft,
    draft_params,
    prompts,
    warper,
    gamma: int,
    *,
    batches=(1, 4, 16, 64),
    max_new_tokens: int = 64,
    cache_len: int = 256,
    repeats: int = 3,
    seed: int = 0,
    clock=time.perf_counter,
    log=print,
) -> list[BatchRow]:
    """AR vs speculative throughput for each batch size (see the module docstring).

    Args:
      target, target_params, draft, draft_params: the pair.
      prompts: at least max(batches) token arrays (ragged lengths are fine); batch b decodes
        the first b.
      warper: shared sampling warper.
      gamma: drafted tokens per iteration.
      batches: batch sizes, each >= 1.
      max_new_tokens: tokens per row (no EOS, so both decoders emit the same count).
      cache_len: cache positions.
      repeats: timed rounds per batch size.
      seed: PRNG seed.
      clock: wall time (default) or `time.process_time`: tokens per CPU-second of this process,
        steadier when other processes share the cores (see `timing.time_call`).
      log: progress printer (None: quiet).

    Returns:
      One BatchRow per batch size.
    """
    batches = [int(b) for b in batches]
    if not batches or min(batches) < 1:
        raise ValueError(f"batches must be batch sizes >= 1; got {batches}")
    if len(prompts) < max(batches):
        raise ValueError(f"prompts must hold at least {max(batches)} prompts; got {len(prompts)}")
    key = jax.random.PRNGKey(seed)
    ar = AutoregressiveDecoder(target, warper, cache_len=cache_len)
    spec = SpeculativeDecoder(target, draft, gamma, warper, cache_len=cache_len)
    pair = (target_params, draft_params)
    rows = []
    for b in batches:
        chunk = list(prompts[:b])
        calls = {
            "ar": lambda c=chunk: loop.generate(ar, (target_params,), c, key, max_new_tokens),
            "spec": lambda c=chunk: loop.generate(spec, pair, c, key, max_new_tokens),
        }
        v = versus_autoregressive(calls, repeats=repeats, clock=clock)
        stats = jax.device_get(v.timings["spec"].output.stats)
        per_row = stats.emitted / np.maximum(stats.iterations, 1)  # [batch]
        emitted = int(stats.emitted.sum())
        row_iterations = int(stats.iterations.sum())
        context = min(64, cache_len - gamma - 1)
        kwargs = dict(batch=b, context=context, cache_len=cache_len, repeats=repeats, clock=clock)
        t1 = call_cost(target, target_params, 1, **kwargs).median
        tv = call_cost(target, target_params, gamma + 1, **kwargs).median
        interval = v.interval("spec")
        row = BatchRow(
            batch=b,
            ar_tokens_per_s=1e3 / v.ms_per_token("ar"),
            spec_tokens_per_s=1e3 / v.ms_per_token("spec"),
            speedup=v.speedup("spec"),
            speedup_low=None if interval is None else interval[0],
            speedup_high=None if interval is None else interval[1],
            t_target_1_ms=t1 * 1e3,
            t_target_verify_ms=tv * 1e3,
            verify_ratio=tv / t1,
            tokens_per_iteration=emitted / max(row_iterations, 1),
            row_spread=float((per_row.max() - per_row.min()) / per_row.mean()),
            emitted=emitted,
            row_iterations=row_iterations,
        )
        if log is not None:
            log(format_batch_rows([row], gamma, header=not rows))
        rows.append(row)
    return rows


def format_batch_rows(rows, gamma: int, header: bool = True) -> str:
    """A markdown table of `BatchRow`s (T(1) growth relative to the first row given)."""
    lines = []
    if header:
        lines += [
            f"| batch | AR tok/s | spec tok/s | speedup (95 % CI) | T_target(1) ms "
            f"| T_target({gamma + 1}) ms | T({gamma + 1})/T(1) | tok/iter | row spread |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
    for r in rows:
        ci = "" if r.speedup_low is None else f" ({r.speedup_low:.2f}–{r.speedup_high:.2f})"
        lines.append(
            f"| {r.batch} | {r.ar_tokens_per_s:,.0f} | {r.spec_tokens_per_s:,.0f} | "
            f"{r.speedup:.2f}×{ci} | {r.t_target_1_ms:.3f} | {r.t_target_verify_ms:.3f} | "
            f"{r.verify_ratio:.2f} | {r.tokens_per_iteration:.2f} | {r.row_spread:.0%} |"
        )
    return "\n".join(lines)


def break_even(rows) -> int | None:
    """The smallest batch whose speedup is below 1 (None: speculation paid at every batch)."""
    losing = [r.batch for r in rows if r.speedup < 1.0]
    return min(losing) if losing else None
