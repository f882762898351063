"""The sequoia2024 walltime experiment: AR, chains and trees timed round-robin at batch 1.

`walltime` times AR, every chain γ, the Sequoia trees and the trees the hardware-aware size
picks: from the cost model's measured T(k) (`costs.py`), from whole measured loop iterations
(`loop_choice`), and, predicted only, on an accelerator's flat T(k).
"""

from __future__ import annotations

import jax
import numpy as np

from experiments.sequoia2024 import costs as costs_lib
from experiments.sequoia2024 import methods
from specjax.benchmark.costs import iteration_cost
from specjax.benchmark.timing import interleaved
from specjax.decoding import (
    AutoregressiveDecoder,
    SpeculativeDecoder,
    TokenTree,
    hardware_aware_tree,
    make_warper,
    summarize_stats,
)
from specjax.decoding import loop as decoding_loop


def _log(msg: str) -> None:
    print(msg, flush=True)


def loop_choice(config, target, tparams, draft, dparams, warper, candidates, prompt) -> dict:
    """Re-ranks the cost model's best tree of each size by whole measured loop iterations.

    Sequoia's hardware model charges model calls only; on a CPU with a small model the loop's
    own work per iteration (sampling, acceptance, cache compaction) is of the same order
    (experiments/trees/RESULTS.md). Here every size's best DP tree (by the model) runs its
    decoder's whole `step` in a device loop (`costs.iteration_cost`, fastest of the rounds,
    round-robin with AR), and the predicted speedup is E[tokens/call] × iter(AR) / iter(tree).

    Returns:
      {"rows": [{nodes, depth, parents, tokens_per_call, iteration_ms, predicted_speedup}],
       "best": the best row, "ar_iteration_ms": float}.
    """
    best_by_size = {}
    for c in candidates:  # sorted best first
        if c["nodes"] > 1:
            best_by_size.setdefault(c["nodes"], c)
    shortlist = [best_by_size[n] for n in sorted(best_by_size)]
    programs = {"ar": (AutoregressiveDecoder(target, warper, cache_len=config.cache_len), None)}
    for c in shortlist:
        dec = methods.method_decoder(config, target, draft, warper, "sequoia", c["tree"])
        programs[c["nodes"]] = (dec, c)
    samples = {k: [] for k in programs}
    kw = dict(steps=config.cost_steps, repeats=config.cost_repeats)
    for _ in range(config.cost_rounds):
        for k, (dec, c) in programs.items():
            params = (tparams,) if c is None else (tparams, dparams)
            samples[k].extend(iteration_cost(dec, params, [prompt], **kw).samples)
    t_ar = float(np.min(samples["ar"]))
    rows = []
    for c in shortlist:
        t_iter = float(np.min(samples[c["nodes"]]))
        rows.append(
            dict(
                nodes=c["nodes"],
                depth=c["depth"],
                parents=list(c["tree"].parents),
                tokens_per_call=c["tokens_per_call"],
                iteration_ms=t_iter * 1e3,
                predicted_speedup=c["tokens_per_call"] * t_ar / t_iter,
            )
        )
    jax.clear_caches()
    return {
        "rows": rows,
        "best": max(rows, key=lambda r: r["predicted_speedup"]),
        "ar_iteration_ms": t_ar * 1e3,
    }


def walltime(config, target, tparams, draft, dparams, t, acceptance, costs, prompts):
    """Experiment 3 at temperature t: AR, chains, Sequoia trees, the hardware-chosen trees."""
    warper = make_warper(t)
    positional = acceptance["without"]["positional"]
    t_target, draft_cost = costs["t_target"], costs_lib.draft_cost_fn(costs["t_draft"])
    chosen, candidates = hardware_aware_tree(positional, t_target, draft_cost)
    by_loop = loop_choice(config, target, tparams, draft, dparams, warper, candidates, prompts[0])
    loop_tree = TokenTree(tuple(by_loop["best"]["parents"]))
    _log(
        f"    hardware choice: model calls {chosen.num_nodes} nodes (depth {chosen.max_depth}), "
        f"whole iterations {loop_tree.num_nodes} nodes (depth {loop_tree.max_depth})"
    )
    flat = {n: t_target[1] for n in t_target}
    flat_tree, flat_candidates = hardware_aware_tree(positional, flat, costs["t_draft"][1])
    decoders = {"ar": (AutoregressiveDecoder(target, warper, cache_len=config.cache_len), None)}
    for g in config.gammas:
        decoders[f"chain{g}"] = (
            SpeculativeDecoder(target, draft, int(g), warper, cache_len=config.cache_len),
            methods.chain(int(g) + 1),
        )
    trees = {}
    for n in config.sizes:
        if n >= 4 and "sequoia" in config.methods:
            trees[f"sequoia{n}"] = methods.build("sequoia", n, positional, config.kchains)
    for name, tree in (("chosen", chosen), ("chosen_loop", loop_tree)):
        if tree.parents not in {tr.parents for tr in trees.values()} and tree.num_nodes > 1:
            trees[name] = tree
    for name, tree in trees.items():
        if tree.max_branch == 1 and tree.num_nodes - 1 in config.gammas:
            continue  # a chain: timed as the chain of that gamma
        decoders[name] = (
            methods.method_decoder(config, target, draft, warper, "sequoia", tree),
            tree,
        )
    key = jax.random.PRNGKey(config.seed)
    new = config.max_new_tokens

    def run_all(name):
        dec = decoders[name][0]
        params = (tparams,) if name == "ar" else (tparams, dparams)
        return [decoding_loop.generate(dec, params, [p], key, new) for p in prompts]

    timed = interleaved({n: (lambda n=n: run_all(n)) for n in decoders}, config.repeats)
    out = []
    for name, (_, tree) in decoders.items():
        last = timed[name].output
        emitted = sum(int(np.sum(r.stats.emitted)) for r in last)
        calls = sum(int(r.stats.target_calls) for r in last)
        summary = summarize_stats([r.stats for r in last])
        tpc = summary.get("sampler_tokens_per_iteration", 1.0)
        wall = timed[name].median
        cost = t_target[1] if tree is None else costs_lib.tree_cost(tree, t_target, draft_cost)
        out.append(
            dict(
                name=name,
                nodes=1 if tree is None else tree.num_nodes,
                depth=0 if tree is None else tree.max_depth,
                parents=None if tree is None else list(tree.parents),
                tokens_per_call=float(tpc),
                ms_per_token=wall * 1e3 / emitted,
                cpu_ms_per_token=timed[name].cpu_median * 1e3 / emitted,
                iteration_ms=wall * 1e3 / max(calls, 1),
                model_ms=cost * 1e3,
                predicted_speedup=float(tpc) * t_target[1] / cost,
                wall_samples=list(timed[name].samples),
            )
        )
    ar_ms = out[0]["ms_per_token"]
    for row in out:
        row["speedup"] = ar_ms / row["ms_per_token"]

    def name_of(tree):
        if tree.num_nodes == 1:
            return "ar"
        return next(
            n for n, (_, tr) in decoders.items() if tr is not None and tr.parents == tree.parents
        )

    chosen_name, loop_name = name_of(chosen), name_of(loop_tree)
    jax.clear_caches()
    return {
        "rows": out,
        "chosen": {
            "name": chosen_name,
            "parents": list(chosen.parents),
            "nodes": chosen.num_nodes,
            "depth": chosen.max_depth,
            "predicted_speedup": candidates[0]["speedup"],
        },
        "chosen_top5": [_candidate(c) for c in candidates[:5]],
        "chosen_loop": dict(by_loop["best"], name=loop_name),
        "loop_choice": by_loop,
        "flat": {
            "parents": list(flat_tree.parents),
            "nodes": flat_tree.num_nodes,
            "depth": flat_tree.max_depth,
            "predicted_speedup": flat_candidates[0]["speedup"],
            "top5": [_candidate(c) for c in flat_candidates[:5]],
        },
    }


def _candidate(c: dict) -> dict:
    return {k: v for k, v in c.items() if k != "tree"} | {"parents": list(c["tree"].parents)}
