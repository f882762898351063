r"""The trees mode: models → T(N) (tree vs chain) → tokens per call and walltime of every decoder.

    python -m experiments.main --config=configs/trees.py --workdir=runs/trees

For each draft and temperature, autoregressive decoding, every chain γ and every tree decode
the same batch-1 prompts with the same key; all of them are timed in each round (round-robin:
drift and other processes hit all alike), medians over rounds, in wall-clock and process CPU
time. Tokens per target call are counted on more prompts than are timed. Writes
<workdir>/results.json (every figure) and results.md (tables and the analysis).
"""

from __future__ import annotations

import json
import os
import platform
import time

import jax
import numpy as np

from experiments.common import models as model_lib
from experiments.trees import report, shapes
from specjax.benchmark.costs import call_cost, tree_call_cost
from specjax.benchmark.timing import interleaved
from specjax.data import load_corpus
from specjax.data.batches import sample_prompts
from specjax.data.tokenizer import ByteTokenizer
from specjax.decoding import (
    AutoregressiveDecoder,
    SpeculativeDecoder,
    TokenTree,
    TreeSpeculativeDecoder,
    make_warper,
    raw_counts,
    summarize_stats,
)
from specjax.decoding import loop as decoding_loop


def _log(msg: str) -> None:
    print(msg, flush=True)


def tree_specs(config) -> list[dict]:
    """The trees to measure: {"name", "shape", "tree", "aliases"}, duplicates folded together.

    Chain controls come first, then each shape at each size, then `extra_trees`; a tree equal
    to an earlier one is not measured twice, its name is listed in the earlier one's aliases.
    """
    specs, seen = [], {}
    candidates = [("chain", n, None) for n in config.chain_trees]
    candidates += [(s, n, None) for n in config.sizes for s in config.shapes]
    candidates += [("branching", None, text) for text in config.extra_trees]
    for shape, n, text in candidates:
        if text is None:
            tree = shapes.build(shape, int(n), tuple(config.rank_prior))
            # "treechain": a chain run by the tree decoder (the chain decoder's rows are chainγ).
            name = f"{'treechain' if shape == 'chain' else shape}{n}"
        else:
            tree = TokenTree.parse(text)
            name = f"b{text.replace(',', '/')}"
        if tree.parents in seen:
            seen[tree.parents]["aliases"].append(name)
            continue
        spec = {"name": name, "shape": shape, "tree": tree, "aliases": []}
        seen[tree.parents] = spec
        specs.append(spec)
    return specs


def draft_widths(tree: TokenTree) -> list[int]:
    """Tokens fed per draft call when a TreeDrafter drafts `tree`: the root, then levels 1..D-1."""
    return [1] + [hi - lo for lo, hi in tree.levels[1:-1]]


def measure_costs(config, target, tparams, drafts, specs) -> dict:
    """T_chain(k) for every verification width, T_tree(N) per tree, T_draft(k) per draft.

    Every figure is an in-loop timing (`call_cost`, `tree_call_cost`); all of them are measured
    once per round for `cost_rounds` rounds (round-robin, so load from other processes and
    drift hit every N alike) and the median of the pooled samples is kept (the minimum too).

    Returns:
      {"t_chain": {k: s}, "t_tree": {tree name: s}, "t_draft": {draft: {k: s}}, "min": ...}.
    """
    kw = dict(
        context=config.cost_context,
        cache_len=config.cache_len,
        steps=config.cost_steps,
        repeats=config.cost_repeats,
    )
    widths = {1} | {g + 1 for g in config.gammas} | {s["tree"].num_nodes for s in specs}
    dwidths = {1} | {w for s in specs for w in draft_widths(s["tree"])}
    programs = {("t_chain", k): lambda k=k: call_cost(target, tparams, k, **kw) for k in widths}
    for s in specs:
        programs[("t_tree", s["name"])] = lambda t=s["tree"]: tree_call_cost(
            target, tparams, t, **kw
        )
    for name, (model, params, _) in drafts.items():
        for k in dwidths:
            programs[("t_draft", name, k)] = lambda m=model, p=params, k=k: call_cost(m, p, k, **kw)
    samples = {key: [] for key in programs}
    for _ in range(config.cost_rounds):
        for key, fn in programs.items():
            samples[key].extend(fn().samples)
    out = {"t_chain": {}, "t_tree": {}, "t_draft": {n: {} for n in drafts}, "min": {}}
    for key, values in sorted(samples.items(), key=lambda kv: str(kv[0])):
        kind, rest = key[0], key[1:]
        where = out[kind] if kind != "t_draft" else out["t_draft"][rest[0]]
        where[rest[-1]] = float(np.median(values))
        out["min"]["/".join(str(x) for x in key)] = float(np.min(values))
    out["t_chain"] = dict(sorted(out["t_chain"].items()))
    t_chain = out["t_chain"]
    _log("  T_chain(k) ms: " + ", ".join(f"{k}: {v * 1e3:.3f}" for k, v in t_chain.items()))
    for s in specs:
        n, v = s["tree"].num_nodes, out["t_tree"][s["name"]]
        _log(f"  T_tree({s['name']}, N={n}) {v * 1e3:.3f} ms = {v / t_chain[n]:.2f} x T_chain({n})")
    for name, d in out["t_draft"].items():
        out["t_draft"][name] = dict(sorted(d.items()))
        _log(f"  T_draft {name} ms: " + ", ".join(f"{k}: {v * 1e3:.3f}" for k, v in d.items()))
    jax.clear_caches()
    return out


def _decoders(config, target, draft, warper, specs) -> dict:
    """name -> (decoder, description dict) for one draft and temperature."""
    out = {}
    for g in config.gammas:
        dec = SpeculativeDecoder(target, draft, int(g), warper, cache_len=config.cache_len)
        out[f"chain{g}"] = (dec, {"kind": "chain", "gamma": int(g), "nodes": int(g) + 1})
    for s in specs:
        tree = s["tree"]
        # Greedy: children are the draft's top-k, which both rules verify alike; one child per
        # node: nothing to draw without replacement.
        rules = (None,) if warper.is_greedy or tree.max_branch == 1 else config.replacement
        for rule in rules:
            dec = TreeSpeculativeDecoder(
                target, draft, tree, warper, replacement=bool(rule), cache_len=config.cache_len
            )
            label = "top-k" if warper.is_greedy else ("with" if rule else "without")
            if tree.max_branch == 1 and not warper.is_greedy:
                label = "-"
            name = s["name"] if rule is None else f"{s['name']}/{label}"
            out[name] = (
                dec,
                {
                    "kind": "tree",
                    "tree": s["name"],
                    # A chain run by the tree decoder: a control of the tree machinery's cost.
                    "control": s["shape"] == "chain",
                    "aliases": list(s["aliases"]),
                    "shape": shapes.describe(tree),
                    "parents": list(tree.parents),
                    "rule": label,
                    "nodes": tree.num_nodes,
                    "depth": tree.max_depth,
                },
            )
    return out


def measure_temperature(config, target, tparams, draft, dparams, t, specs, prompts, stat_prompts):
    """Every decoder of one draft at temperature t: timings, tokens per call, statistics."""
    warper = make_warper(t)
    key = jax.random.PRNGKey(config.seed)
    ar = AutoregressiveDecoder(target, warper, cache_len=config.cache_len)
    decoders = {"ar": (ar, {"kind": "ar", "nodes": 1})}
    decoders.update(_decoders(config, target, draft, warper, specs))
    params = {
        n: (tparams,) if d[1]["kind"] == "ar" else (tparams, dparams) for n, d in decoders.items()
    }
    new = config.max_new_tokens

    def run_all(name, batch):
        dec = decoders[name][0]
        return [decoding_loop.generate(dec, params[name], [p], key, new) for p in batch]

    t0 = time.perf_counter()
    calls = {name: (lambda name=name: run_all(name, prompts)) for name in decoders}
    timed = interleaved(calls, config.repeats)
    seconds = time.perf_counter() - t0
    _log(f"    timed {len(decoders)} decoders x {config.repeats} rounds ({seconds:.0f} s)")
    rows = {}
    ar_out = None
    for name, (_, desc) in decoders.items():
        results = run_all(name, stat_prompts)
        outputs = [r.new_tokens()[0].tolist() for r in results]
        if name == "ar":
            ar_out = outputs
        summary = summarize_stats([r.stats for r in results])
        last = timed[name].output
        calls_timed = sum(int(r.stats.target_calls) for r in last)
        emitted_timed = sum(int(np.sum(r.stats.emitted)) for r in last)
        wall, cpu = timed[name].median, timed[name].cpu_median
        row = dict(desc)
        row.update(
            name=name,
            tokens_per_call=summary.get(
                "sampler_tokens_per_iteration", summary["tokens_per_iteration"]
            ),
            emitted_per_call=summary["tokens_emitted"] / max(summary["target_calls"], 1),
            wall_ms_per_token=wall * 1e3 / emitted_timed,
            cpu_ms_per_token=cpu * 1e3 / emitted_timed,
            wall_samples=list(timed[name].samples),
            iteration_ms=wall * 1e3 / max(calls_timed, 1),
            target_calls_timed=calls_timed,
            matches_ar=(outputs == ar_out) if warper.is_greedy else None,
            alpha_empirical=summary.get("alpha_empirical"),
            accepted_depth_histogram=summary.get("accepted_depth_histogram"),
            accepted_rank_by_depth=summary.get("accepted_rank_by_depth"),
            # The counts behind the per-call ratios (the statistics prompts, pooled).
            counts=raw_counts(summary),
        )
        rows[name] = row
    ar_row = rows["ar"]
    for row in rows.values():
        row["speedup_wall"] = ar_row["wall_ms_per_token"] / row["wall_ms_per_token"]
        row["speedup_cpu"] = ar_row["cpu_ms_per_token"] / row["cpu_ms_per_token"]
    return list(rows.values())


def add_cost_model(rows: list, costs: dict, draft_name: str, specs) -> None:
    """Adds T(N), the draft's cost, the model-calls prediction and the loop overhead to rows.

    prediction = tokens/call × T(1) / (T(N) + draft cost), the measured-cost model of
    `specjax.theory.measured_speedup` with tokens per call measured; overhead = measured
    iteration − T(N) − draft cost (sampling, acceptance, cache moves, bookkeeping, dispatch).
    """
    t_chain, t_draft = costs["t_chain"], costs["t_draft"][draft_name]
    trees = {s["name"]: s["tree"] for s in specs}
    t1 = t_chain[1]
    for row in rows:
        if row["kind"] == "ar":
            verify, draft = t1, 0.0
        elif row["kind"] == "chain":
            verify, draft = t_chain[row["gamma"] + 1], row["gamma"] * t_draft[1]
        else:
            verify = costs["t_tree"][row["tree"]]
            draft = sum(t_draft[w] for w in draft_widths(trees[row["tree"]]))
        row["t_verify_ms"] = verify * 1e3
        row["t_draft_ms"] = draft * 1e3
        row["predicted_speedup_calls"] = row["tokens_per_call"] * t1 / (verify + draft)
        row["overhead_ms"] = row["iteration_ms"] - (verify + draft) * 1e3


def run(config, workdir: str) -> dict:
    """Runs the whole pipeline; returns (and writes) every figure."""
    start = time.perf_counter()
    load_start = os.getloadavg()
    os.makedirs(workdir, exist_ok=True)
    specs = tree_specs(config)
    _log(f"[1/3] models (target {config.target}, drafts {list(config.drafts)})")
    loaded = model_lib.load_all(config, workdir, _log)
    target, tparams, tmeta = loaded["target"]
    drafts = loaded["drafts"]
    val = np.asarray(load_corpus(config.corpus, "validation", ByteTokenizer()))
    prompts = sample_prompts(
        val, config.walltime_prompts + config.stats_prompts, config.prompt_len, seed=config.seed + 1
    ).tokens
    prompts = [np.asarray(p) for p in prompts]
    timed_prompts = prompts[: config.walltime_prompts]
    stat_prompts = prompts[config.walltime_prompts :]

    _log(f"[2/3] verification cost T(N), chain vs tree mask ({len(specs)} trees)")
    costs = measure_costs(config, target, tparams, drafts, specs)

    _log("[3/3] tokens per target call and walltime, every chain and tree vs autoregressive")
    walltime = {}
    for name, (draft, dparams, _) in drafts.items():
        for t in config.temperatures:
            _log(f"  draft {name}, t={t:g}:")
            rows = measure_temperature(
                config,
                target,
                tparams,
                draft,
                dparams,
                float(t),
                specs,
                timed_prompts,
                stat_prompts,
            )
            add_cost_model(rows, costs, name, specs)
            for r in rows:
                _log(
                    f"    {r['name']:>16s} N={r['nodes']:2d} tok/call {r['tokens_per_call']:5.2f} "
                    f"speedup {r['speedup_wall']:.2f}x (cpu {r['speedup_cpu']:.2f}x, model "
                    f"{r['predicted_speedup_calls']:.2f}x) iter {r['iteration_ms']:.3f} ms"
                )
            walltime[f"t{float(t):g}/{name}"] = rows
            jax.clear_caches()  # one temperature's programs at a time (memory)

    results = {
        "config": config.to_dict(),
        "device": str(jax.devices()[0]),
        "host": {
            "cpus": os.cpu_count(),
            "machine": platform.machine(),
            "processor": platform.processor(),
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
        },
        "target": {
            "name": tmeta["config"]["name"],
            "params": int(target.config.num_params()),
            "eval": tmeta.get("eval", {}),
        },
        "drafts": {n: {"params": _num_params(m)} for n, (m, _, _) in drafts.items()},
        "trees": {
            s["name"]: {
                "parents": list(s["tree"].parents),
                "shape": shapes.describe(s["tree"]),
                "aliases": s["aliases"],
            }
            for s in specs
        },
        "costs": {
            "t_chain": {str(k): v for k, v in costs["t_chain"].items()},
            "t_tree": costs["t_tree"],
            "t_draft": {n: {str(k): v for k, v in d.items()} for n, d in costs["t_draft"].items()},
            "min": costs["min"],
        },
        "walltime": walltime,
        "seconds": time.perf_counter() - start,
    }
    with open(os.path.join(workdir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1, default=float)
    text = report.format_all(results)
    with open(os.path.join(workdir, "results.md"), "w", encoding="utf-8") as f:
        f.write(text)
    _log(text)
    _log(f"done in {results['seconds']:.0f} s; figures in {workdir}")
    return results


def _num_params(model) -> int:
    cfg = getattr(model, "config", None)
    return int(cfg.num_params()) if cfg is not None and hasattr(cfg, "num_params") else 0
