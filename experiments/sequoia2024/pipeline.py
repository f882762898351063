r"""The sequoia2024 mode: acceptance by rank → T(k) → tokens per call vs tree size → walltime.

    python -m experiments.main --config=configs/sequoia2024.py --workdir=runs/sequoia-python

For each temperature:
  1. the positional and conditional acceptance vectors by rank (with and without replacement)
     on text the target generates, beside α (`specjax.rank_acceptance`);
  2. for every method (`methods.py`) and tree size n: tokens per target call measured on a batch
     of prompts and predicted by `expected_accepted` from that vector; greedy rows must equal
     autoregressive decoding token for token;
  3. walltime: AR, every chain γ, the Sequoia trees and the tree `hardware_aware_tree` picks
     from the measured T(k), timed round-robin at batch 1; and the tree it would pick on an
     accelerator's flat T(k) (predicted).
Writes <workdir>/results.json (every figure), results.csv (experiment 1 rows), results.md and
PNG plots (`report.py`, `plots.py`).
"""

from __future__ import annotations

import json
import os
import platform
import time

import jax
import numpy as np

from experiments.common import models as model_lib
from experiments.sequoia2024 import methods, plots, report
from specjax.benchmark.alpha_generated import generate_reference
from specjax.benchmark.costs import call_cost, iteration_cost
from specjax.benchmark.timing import interleaved
from specjax.data import load_corpus
from specjax.data.batches import sample_prompts
from specjax.data.tokenizer import ByteTokenizer
from specjax.decoding import (
    AutoregressiveDecoder,
    SpeculativeDecoder,
    TokenTree,
    TreeSpeculativeDecoder,
    expected_accepted,
    hardware_aware_tree,
    make_warper,
    summarize_stats,
)
from specjax.decoding import loop as decoding_loop
from specjax.decoding.trees.search import draft_call_widths
from specjax.rank_acceptance import rank_acceptance_on_sequences


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


def measure_acceptance(config, target, tparams, draft, dparams, prompts, t: float) -> dict:
    """Acceptance by rank on text the target generates at t (rules "with" and "without")."""
    sequences = generate_reference(
        target,
        tparams,
        np.stack(prompts),
        t,
        config.reference_tokens,
        config.cache_len,
        seed=config.seed,
    )
    return rank_acceptance_on_sequences(
        target,
        tparams,
        draft,
        dparams,
        sequences,
        config.prompt_len,
        make_warper(t),
        config.ranks,
        rules=("with", "without"),
        samples=config.rank_samples,
        seed=config.seed,
    )


def method_decoder(config, target, draft, warper, method: str, tree):
    """The decoder of one method's tree (the chain decoder for chains)."""
    if tree.max_branch == 1:  # a chain, whatever the method: the chain decoder
        return SpeculativeDecoder(
            target, draft, tree.num_nodes - 1, warper, cache_len=config.cache_len
        )
    replacement = methods.REPLACEMENT[method]
    # With replacement, children are sampled even from a greedy draft (SpecInfer's rule: at
    # t = 0 they repeat one token); without, a greedy draft gives its top-k.
    children = "sample" if replacement else "auto"
    return TreeSpeculativeDecoder(
        target,
        draft,
        tree,
        warper,
        replacement=replacement,
        children=children,
        cache_len=config.cache_len,
    )


def _stats_run(dec, params, prompts, key, new):
    result = decoding_loop.generate(dec, params, prompts, key, new)
    return result, summarize_stats([result.stats])


def tokens_per_call(config, target, tparams, draft, dparams, t, acceptance, prompts) -> list:
    """Experiment 1 at temperature t: one row per (method, n), measured and expected."""
    warper = make_warper(t)
    key = jax.random.PRNGKey(config.seed + 1)
    new = config.max_new_tokens
    ar = AutoregressiveDecoder(target, warper, cache_len=config.cache_len)
    ar_result = decoding_loop.generate(ar, (tparams,), prompts, key, new)
    ar_tokens = np.asarray(ar_result.tokens)
    depth_cap = config.max_depth or None
    rows, done = [], {}
    for n in config.sizes:
        for method in config.methods:
            rule = methods.ACCEPTANCE_RULE[method]
            positional = acceptance[rule]["positional"]
            if n == 1:
                rows.append(dict(method=method, n=1, depth=0, measured=1.0, expected=1.0))
                continue
            tree = methods.build(method, n, positional, config.kchains, depth_cap)
            # A chain is a chain under either sibling rule (one child per node).
            replacement = methods.REPLACEMENT[method]
            ident = tree.parents if tree.max_branch == 1 else (tree.parents, replacement)
            if ident in done:  # the same tree, decoder and rule as another method's: reused
                row = dict(done[ident], method=method, same_as=done[ident]["method"])
                row["expected"] = 1.0 + expected_accepted(tree, positional)
                rows.append(row)
                continue
            dec = method_decoder(config, target, draft, warper, method, tree)
            result, summary = _stats_run(dec, (tparams, dparams), prompts, key, new)
            measured = summary.get("sampler_tokens_per_iteration", summary["tokens_per_iteration"])
            row = dict(
                method=method,
                n=n,
                depth=tree.max_depth,
                parents=list(tree.parents),
                measured=float(measured),
                expected=1.0 + expected_accepted(tree, positional),
                accepted_depth_histogram=summary.get("accepted_depth_histogram"),
                matches_ar=bool(np.array_equal(np.asarray(result.tokens), ar_tokens))
                if warper.is_greedy
                else None,
            )
            done[ident] = row
            rows.append(row)
            _log(
                f"    {method:>8s} n={n:2d} depth {row['depth']:2d}: tokens/call measured "
                f"{row['measured']:.3f}, expected {row['expected']:.3f} "
                f"({row['measured'] / row['expected'] - 1:+.1%})"
            )
        jax.clear_caches()
    return rows


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
        dec = method_decoder(config, target, draft, warper, "sequoia", c["tree"])
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
    t_target, draft_cost = costs["t_target"], draft_cost_fn(costs["t_draft"])
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
        decoders[name] = (method_decoder(config, target, draft, warper, "sequoia", tree), tree)
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
        cost = t_target[1] if tree is None else tree_cost(tree, t_target, draft_cost)
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


def _trained_pair(config, workdir: str):
    """The byte-level pair of experiments/common/models.py and validation-split prompts."""
    loaded = model_lib.load_all(config, workdir, _log)
    target, tparams, tmeta = loaded["target"]
    draft_name = config.drafts[0]
    draft, dparams, _ = loaded["drafts"][draft_name]
    val = np.asarray(load_corpus(config.corpus, "validation", ByteTokenizer()))
    counts = (config.stats_prompts, config.walltime_prompts)
    drawn = sample_prompts(val, sum(counts), config.prompt_len, seed=config.seed + 1).tokens
    drawn = [np.asarray(p, np.int32) for p in drawn]
    stats, wall = drawn[: counts[0]], drawn[counts[0] :]
    return target, tparams, draft, dparams, stats, wall, tmeta["config"]["name"], draft_name


def run(config, workdir: str) -> dict:
    """Runs the whole pipeline; returns (and writes) every figure."""
    start = time.perf_counter()
    load_start = os.getloadavg()
    os.makedirs(workdir, exist_ok=True)
    if config.get("pretrained"):  # a real target: experiments/sequoia2024/real.py
        from experiments.sequoia2024 import real

        _log(f"[1/4] models (target {config.pretrained}, draft {config.draft_head})")
        models = real.load(config, _log)
    else:
        _log(f"[1/4] models (target {config.target}, draft {config.drafts[0]}, {config.corpus})")
        models = _trained_pair(config, workdir)
    target, tparams, draft, dparams, stat_prompts, wall_prompts, target_name, draft_name = models
    # The acceptance vectors are measured on the target's own continuations of the prompts
    # whose tokens per call are counted: what differs between the two is the model, not the text.
    ref_prompts = stat_prompts

    _log("[2/4] verification cost T(k) of the target, T_draft(k) of the draft")
    costs = measure_costs(config, target, tparams, draft, dparams)

    per_t = {}
    for t in config.temperatures:
        t = float(t)
        _log(f"[3/4] t={t:g}: acceptance by rank on the target's text, tokens per call")
        acceptance = measure_acceptance(config, target, tparams, draft, dparams, ref_prompts, t)
        for rule, a in acceptance.items():
            _log(
                f"    {rule:>7s}: alpha {a['alpha']:.3f}, P "
                + " ".join(f"{x:.3f}" for x in a["positional"])
            )
        rows = tokens_per_call(config, target, tparams, draft, dparams, t, acceptance, stat_prompts)
        _log(f"[4/4] t={t:g}: walltime, round-robin over {config.repeats} rounds")
        wall = walltime(config, target, tparams, draft, dparams, t, acceptance, costs, wall_prompts)
        for r in wall["rows"]:
            _log(
                f"    {r['name']:>10s} n={r['nodes']:2d} tok/call {r['tokens_per_call']:5.2f} "
                f"{r['ms_per_token']:.3f} ms/token speedup {r['speedup']:.2f}x "
                f"(model {r['predicted_speedup']:.2f}x)"
            )
        per_t[f"{t:g}"] = {"acceptance": acceptance, "tokens_per_call": rows, "walltime": wall}

    results = {
        "config": config.to_dict(),
        "device": str(jax.devices()[0]),
        "host": {
            "cpus": os.cpu_count(),
            "machine": platform.machine(),
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
        },
        "target": {"name": target_name, "params": int(target.config.num_params())},
        "draft": {"name": draft_name, "params": int(draft.config.num_params())},
        "costs": {
            "t_target": {str(k): v for k, v in costs["t_target"].items()},
            "t_draft": {str(k): v for k, v in costs["t_draft"].items()},
            "median": {
                kind: {str(k): v for k, v in d.items()} for kind, d in costs["median"].items()
            },
        },
        "temperatures": per_t,
        "seconds": time.perf_counter() - start,
    }
    with open(os.path.join(workdir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1, default=float)
    report.write_csv(results, os.path.join(workdir, "results.csv"))
    text = report.format_all(results)
    with open(os.path.join(workdir, "results.md"), "w", encoding="utf-8") as f:
        f.write(text)
    written = plots.write_all(results, workdir)
    _log(text)
    _log(f"done in {results['seconds']:.0f} s; figures in {workdir} ({', '.join(written)})")
    return results
