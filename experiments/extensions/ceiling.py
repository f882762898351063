"""How much adapting γ per task could gain on a mixed prompt set: every task at its own fixed γ.

A policy that only tells the tasks apart can at best run each task at that task's fastest fixed
γ. Summing a round's task times at those γ gives the mixed set's time under that per-task oracle;
its ratio to the mixed set's single best fixed γ is the ceiling of per-task adaptation. Goal 2 of
the adaptive-γ issue (a policy faster than the single best γ, interval above 1.0) needs a ceiling
above 1.0 by more than the noise, or a policy that adapts within a response, which this oracle
does not.

Two readings, each against the single γ picked the same way:
  * after the fact: each task's fixed γ of lowest median, read on the rounds that chose it
    (optimistic: the winner's curse once per task), against the mixed set's best median;
  * held out (`timing.held_out_fastest`): each task's even rounds at the γ fastest on its odd
    rounds and the other way round, against the mixed set's γ picked so.

Inputs are the stored rows of `adaptive_real` (per set: each decoder's "ms_per_token_samples"
and "tokens"), so `per_task_ceiling` runs again on any saved results file.
"""

from __future__ import annotations

import numpy as np

from specjax.benchmark.timing import held_out_fastest, ratio_interval


def _seconds(row: dict) -> np.ndarray:
    """[rounds] seconds of a row's calls: its ms/token samples times its tokens."""
    return np.asarray(row["ms_per_token_samples"], np.float64) * row["tokens"] / 1e3


def composite(sets: dict, picks: dict) -> np.ndarray:
    """[rounds] ms per token of the mixed set with task t's round i at fixed γ picks[t][i].

    sets: set name -> {"rows": [...]}; picks: task -> one decoder label per round.
    """
    seconds, tokens = 0.0, 0.0
    for task, labels in picks.items():
        rows = {r["decoder"]: r for r in sets[task]["rows"]}
        seconds = seconds + np.array([_seconds(rows[g])[i] for i, g in enumerate(labels)])
        tokens = tokens + np.array([rows[g]["tokens"] for g in labels], np.float64)
    return seconds * 1e3 / tokens


def per_task_ceiling(sets: dict, fixed, tasks, mixed: str = "mixed") -> dict:
    """The per-task oracle's speedup on the mixed set over its single best fixed γ.

    Args:
      sets: `adaptive_real`'s sets of one temperature (the tasks' and the mixed set's rows,
        each with "best_fixed").
      fixed: the fixed-γ decoder labels the oracle picks among.
      tasks: the tasks the mixed set sums.
      mixed: the mixed set's name.

    Returns:
      {"after_the_fact": {"picks": {task: label}, "ratio", "low", "high"},
       "held_out": {"picks": {task: [even, odd]}, "ratio", "low", "high"} or None with fewer
       than two rounds}; ratio > 1 means the oracle is faster, low/high a 95 % interval over
      the paired rounds (None with one round).
    """
    mixed_rows = {r["decoder"]: r for r in sets[mixed]["rows"]}
    rounds = len(mixed_rows[fixed[0]]["ms_per_token_samples"])

    def judged(reference, oracle, picks):
        interval = ratio_interval(reference, oracle)
        low, high = interval or (None, None)
        ratio = float(np.median(reference) / np.median(oracle))
        return dict(picks=picks, ratio=ratio, low=low, high=high)

    after = {t: sets[t]["best_fixed"] for t in tasks}
    oracle = composite(sets, {t: [g] * rounds for t, g in after.items()})
    reference = mixed_rows[sets[mixed]["best_fixed"]]["ms_per_token_samples"]
    out = dict(after_the_fact=judged(reference, oracle, after), held_out=None)
    single = held_out_fastest({g: mixed_rows[g]["ms_per_token_samples"] for g in fixed})
    if single is None:
        return out
    held = {}
    for t in tasks:
        rows = {r["decoder"]: r for r in sets[t]["rows"]}
        _, held[t] = held_out_fastest({g: rows[g]["ms_per_token_samples"] for g in fixed})
    folds = len(next(iter(held.values())))
    oracle = composite(sets, {t: [p[i % folds] for i in range(rounds)] for t, p in held.items()})
    out["held_out"] = judged(single[0], oracle, held)
    return out


def format_ceiling(ceiling: dict) -> str:
    """One line per reading."""

    def one(name, c):
        interval = "-" if c["low"] is None else f"{c['low']:.3f}–{c['high']:.3f}"
        return f"{name}: {c['ratio']:.3f}x ({interval})"

    parts = [one("picked after the fact", ceiling["after_the_fact"])]
    if ceiling["held_out"] is not None:
        parts.append(one("picked on held-out rounds", ceiling["held_out"]))
    return (
        "Ceiling of per-task adaptation (every task at its own fixed γ, summed on the mixed set, "
        "over the single best fixed γ): " + "; ".join(parts) + "."
    )
