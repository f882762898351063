"""The sequoia2024 cost model: T(k) of the target and T_draft(k) measured, and a tree's price.

Sequoia's hardware-aware size charges a tree of n nodes the target's T(n) plus its draft calls
(`tree_cost`), on costs measured in the same run (`measure_costs`); `pipeline.py` runs it and
`walltime.py` times the trees it picks.
"""

from __future__ import annotations

import jax
import numpy as np

from specjax.benchmark.costs import call_cost
from specjax.decoding.trees.search import draft_call_widths


def _log(msg: str) -> None:
    print(msg, flush=True)


def measure_costs(config, target, tparams, draft, dparams) -> dict:
    """T(k) of the target for every width the experiment verifies, T_draft(k) for draft levels.

    Widths: 1 .. max(gammas) + 1 and every size (target); 1, 2, 4, ... up to the largest size
    (draft). Each is an in-loop timing (`call_cost`), measured once per round for
    `cost_rounds` rounds (round-robin against drift and load). The cost model uses the fastest
    sample of each width (other processes only ever add time; on a shared CPU the median mixes
    in their load), and the medians are kept beside it.
    The tree's ancestor mask adds nothing measurable to T (experiments/trees/RESULTS.md), so a
    tree of n nodes is charged T(n) of a chain of n.

    Returns:
      {"t_target": {k: s}, "t_draft": {k: s}, "median": {the same, medians}}.
    """
    kw = dict(
        context=config.cost_context,
        cache_len=config.cache_len,
        steps=config.cost_steps,
        repeats=config.cost_repeats,
    )
    widths = sorted(set(range(1, max(config.gammas) + 2)) | set(config.sizes))
    dwidths = sorted({2**i for i in range(max(config.sizes).bit_length())} | {1})
    programs = {("t_target", k): (target, tparams, k) for k in widths}
    programs.update({("t_draft", k): (draft, dparams, k) for k in dwidths})
    samples = {key: [] for key in programs}
    for _ in range(config.cost_rounds):
        for key, (model, params, k) in programs.items():
            samples[key].extend(call_cost(model, params, k, **kw).samples)
    out = {"t_target": {}, "t_draft": {}, "median": {"t_target": {}, "t_draft": {}}}
    for (kind, k), values in samples.items():
        out[kind][k] = float(np.min(values))
        out["median"][kind][k] = float(np.median(values))
    for kind in ("t_target", "t_draft"):
        _log(
            f"  {kind} ms (fastest): "
            + ", ".join(f"{k}: {v * 1e3:.3f}" for k, v in out[kind].items())
        )
    jax.clear_caches()
    return out


def draft_cost_fn(t_draft: dict):
    """width -> T_draft(width), linear interpolation between measured widths."""
    ks = np.array(sorted(t_draft), dtype=np.float64)
    ts = np.array([t_draft[int(k)] for k in ks])
    return lambda width: float(np.interp(width, ks, ts))


def tree_cost(tree, t_target: dict, draft_cost) -> float:
    """Seconds per iteration the cost model charges a tree: T(n) + its draft calls."""
    return t_target[tree.num_nodes] + sum(draft_cost(w) for w in draft_call_widths(tree))
