"""Reading a stored adaptive-γ run (`adaptive_real`'s results): every ratio, pick and goal
from the rows' per-round samples alone, so an old results file can be read again, on the wall
or the CPU clock, without measuring anything.

  * `versus_best`: each decoder over its set's fastest fixed γ, picked after the fact;
  * `held_out`: over the fixed γ picked on held-out rounds (`timing.held_out_fastest`);
  * `goals`: the issue's two goals for the best policy;
  * `rederive`: the held-out reference, goals and per-task ceiling for an older file;
  * `on_cpu_clock`: the whole run read on the process CPU clock.
"""

from __future__ import annotations

import copy

import numpy as np

from experiments.common.real_prompts import TASKS
from experiments.extensions.ceiling import per_task_ceiling
from specjax.benchmark.timing import held_out_fastest, ratio_interval

MIXED = "mixed"


def fixed_gamma(label: str) -> float:
    """γ of a "fixed<γ>" decoder (NaN for a policy without its own counter)."""
    return float(label[5:]) if label.startswith("fixed") and label[5:].isdigit() else float("nan")


def versus_best(set_block: dict, fixed) -> dict:
    """Sets each row's "ms_per_token" (median of its samples) and its speedup over the set's
    fastest fixed γ ("best_fixed", picked after the fact), with a 95 % interval over the paired
    rounds ("_low", "_high"; None with one round). Returns set_block."""
    per = {r["decoder"]: r for r in set_block["rows"]}
    for row in per.values():
        row["ms_per_token"] = float(np.median(row["ms_per_token_samples"]))
    best = min(fixed, key=lambda g: per[g]["ms_per_token"])
    for row in per.values():
        row["vs_best_fixed"] = per[best]["ms_per_token"] / row["ms_per_token"]
        interval = ratio_interval(per[best]["ms_per_token_samples"], row["ms_per_token_samples"])
        row["vs_best_fixed_low"], row["vs_best_fixed_high"] = interval or (None, None)
    set_block["best_fixed"] = best
    return set_block


def held_out(set_block: dict, fixed) -> dict:
    """Adds to one set's rows their speedup over the fixed γ picked on held-out rounds.

    set_block: {"rows": [...]} with each row's "decoder" and "ms_per_token_samples"; fixed: the
    fixed-γ labels. Sets "held_out_picks" (per fold) and each row's "vs_held_out" (median
    ratio) with its 95 % interval ("_low", "_high"), None with one round. Returns set_block.
    """
    samples = {r["decoder"]: r["ms_per_token_samples"] for r in set_block["rows"]}
    held = held_out_fastest({g: samples[g] for g in fixed})
    reference, picks = held or (None, None)
    for row in set_block["rows"]:
        own = row["ms_per_token_samples"]
        row["vs_held_out"] = None if held is None else float(np.median(reference) / np.median(own))
        interval = None if held is None else ratio_interval(reference, own)
        row["vs_held_out_low"], row["vs_held_out_high"] = interval or (None, None)
    set_block["held_out_picks"] = picks
    return set_block


def rederive(results: dict) -> dict:
    """Results saved before the held-out reference existed, with it, the goals and the per-task
    ceiling recomputed from their stored rounds (nothing is measured again). Returns results,
    updated."""
    return _judge(results, rank=False)


def on_cpu_clock(results: dict) -> dict:
    """The same run read on the process CPU clock: every ratio, pick, goal and ceiling
    recomputed from the rows' "ms_per_token_cpu_samples" (time the process spent on the cores,
    not time it waited for them). A new dict with "clock": "cpu"; raises ValueError for results
    saved before CPU samples were kept."""
    out = copy.deepcopy(results)
    for block in out["blocks"]:
        for set_block in block["sets"].values():
            for row in set_block["rows"]:
                if "ms_per_token_cpu_samples" not in row:
                    raise ValueError("results: no CPU samples (saved before they were kept)")
                row["ms_per_token_samples"] = row["ms_per_token_cpu_samples"]
    out["clock"] = "cpu"
    return _judge(out, rank=True)


def _judge(results: dict, rank: bool) -> dict:
    """Every block's references, goals and ceiling from its rows' "ms_per_token_samples"
    (rank: the best fixed γ after the fact and each row's ratio to it too). Updates results."""
    for block in results["blocks"]:
        labels = [r["decoder"] for r in block["sets"][MIXED]["rows"]]
        fixed = [x for x in labels if not np.isnan(fixed_gamma(x))]  # not fixed_via_adaptive
        for set_block in block["sets"].values():
            held_out(versus_best(set_block, fixed) if rank else set_block, fixed)
        tasks = [name for name in block["sets"] if name != MIXED]
        block["goals"] = goals(block["sets"], results["policies"], tasks)
        block["ceiling"] = per_task_ceiling(block["sets"], fixed, tasks, MIXED)
    return results


def goals(block: dict, policies, tasks=TASKS) -> dict:
    """The issue's two goals on one temperature's sets, for the best policy on the mixed set: a
    lower 95 % bound >= 0.97 against the best fixed γ of every task, and on the mixed set an
    interval above 1.0.

    Returns {"best_policy", "per_task_low": {task: lower bound vs that task's best fixed γ},
    "per_task_ok", "mixed": [ratio, low, high], "mixed_ok"}, and the same four against the
    fixed γ picked on held-out rounds (suffix "_held_out"); the bounds are None with one round.
    """

    def row(set_name, label):
        return next(r for r in block[set_name]["rows"] if r["decoder"] == label)

    best = max(policies, key=lambda p: row(MIXED, p)["vs_best_fixed"])
    out = dict(best_policy=best)
    for suffix, key in (("", "vs_best_fixed"), ("_held_out", "vs_held_out")):
        lows = {t: row(t, best).get(f"{key}_low") for t in tasks}
        mixed = row(MIXED, best)
        low = mixed.get(f"{key}_low")
        out |= {
            f"per_task_low{suffix}": lows,
            f"per_task_ok{suffix}": all(v is not None and v >= 0.97 for v in lows.values()),
            f"mixed{suffix}": [mixed.get(key), low, mixed.get(f"{key}_high")],
            f"mixed_ok{suffix}": low is not None and low > 1.0,
        }
    return out
