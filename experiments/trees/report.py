"""Tables and the chain-vs-tree verdict of a trees run, from its results.json.

python -m experiments.trees.report runs/trees      # rewrites runs/trees/results.md
"""

from __future__ import annotations

import json
import os
import sys


def _x(v) -> str:
    return "—" if v is None else f"{v:.2f}×"


def cost_table(results: dict) -> str:
    """T(N) of a chain and of each tree shape of N nodes, and the tree mask's extra cost.

    Medians of the pooled samples, and beside them the fastest sample (least disturbed by
    other processes), when the run recorded it.
    """
    costs = results["costs"]
    t_chain = {int(k): v for k, v in costs["t_chain"].items()}
    low = costs.get("min", {})
    by_n = {}
    for name, info in results["trees"].items():
        by_n.setdefault(len(info["parents"]), []).append(name)
    lines = [
        "| N | T_chain(N) ms | T(N)/T(1) | fastest: T_chain(N) ms, T(N)/T(1) "
        "| trees: T_tree(N) ms | tree / chain | fastest: tree / chain |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in sorted(t_chain):
        trees = by_n.get(n, [])
        shapes = ", ".join(f"{t} {costs['t_tree'][t] * 1e3:.3f}" for t in trees) or "—"
        ratio = ", ".join(f"{costs['t_tree'][t] / t_chain[n]:.2f}" for t in trees) or "—"
        c_min, c1_min = low.get(f"t_chain/{n}"), low.get("t_chain/1")
        fast = "—" if c_min is None else f"{c_min * 1e3:.3f}, {c_min / c1_min:.2f}"
        fast_ratio = "—"
        if c_min is not None and trees:
            fast_ratio = ", ".join(f"{low[f't_tree/{t}'] / c_min:.2f}" for t in trees)
        lines.append(
            f"| {n} | {t_chain[n] * 1e3:.3f} | {t_chain[n] / t_chain[1]:.2f} | {fast} "
            f"| {shapes} | {ratio} | {fast_ratio} |"
        )
    return "\n".join(lines)


def add_min_speedup(rows: list) -> None:
    """speedup_min: AR's fastest round over the decoder's fastest round (wall clock).

    Every decoder emits the same tokens per round (no EOS), so this is a ratio of ms/token.
    Under load from other processes a round can only be slowed down, so the fastest of the
    rounds is the least disturbed estimate; the median is the main figure.
    """
    ar = min(next(r for r in rows if r["kind"] == "ar")["wall_samples"])
    for r in rows:
        r["speedup_min"] = ar / min(r["wall_samples"])


def rows_table(rows: list) -> str:
    """One line per decoder: shape, tokens per call, speedups, costs per iteration."""
    add_min_speedup(rows)
    lines = [
        "| decoder | N | depth | rule | nodes/depth | tok/call | speedup wall | min | speedup CPU "
        "| model calls | ms/token | iteration ms | T(N) ms | draft ms | overhead ms "
        "| greedy = AR |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        name = r["name"] + (f" (= {', '.join(r['aliases'])})" if r.get("aliases") else "")
        same = {None: "", True: "✓", False: "✗"}[r.get("matches_ar")]
        lines.append(
            f"| {name} | {r['nodes']} | {r.get('depth', r.get('gamma', 0))} | {r.get('rule', '')} "
            f"| {r.get('shape', '')} | {r['tokens_per_call']:.2f} | {r['speedup_wall']:.2f}× "
            f"| {r['speedup_min']:.2f}× "
            f"| {r['speedup_cpu']:.2f}× | {_x(r['predicted_speedup_calls'])} "
            f"| {r['wall_ms_per_token']:.3f} | {r['iteration_ms']:.3f} | {r['t_verify_ms']:.3f} "
            f"| {r['t_draft_ms']:.3f} | {r['overhead_ms']:.3f} | {same} |"
        )
    return "\n".join(lines)


def verdict(rows: list) -> dict:
    """Best chain vs best tree, by walltime speedup and by tokens per target call."""
    chains = [r for r in rows if r["kind"] == "chain"]
    # Chains run as trees are controls of the tree machinery, not trees that could win.
    trees = [r for r in rows if r["kind"] == "tree" and not r.get("control")]
    out = {}
    if not chains or not trees:
        return out
    add_min_speedup(rows)
    for key in ("speedup_wall", "speedup_min", "speedup_cpu", "tokens_per_call"):
        c = max(chains, key=lambda r: r[key])
        t = max(trees, key=lambda r: r[key])
        out[key] = {"chain": c["name"], "tree": t["name"], "ratio": t[key] / c[key]}
    out["trees_beating_best_chain"] = [
        r["name"] for r in trees if r["speedup_wall"] > max(c["speedup_wall"] for c in chains)
    ]
    pairs = {}
    for r in trees:
        if r.get("rule") in ("with", "without"):
            pairs.setdefault(r["tree"], {})[r["rule"]] = r
    both = [p for p in pairs.values() if len(p) == 2]
    out["without_beats_with_tokens"] = sum(
        p["without"]["tokens_per_call"] > p["with"]["tokens_per_call"] for p in both
    )
    out["rule_pairs"] = len(both)
    return out


def _why(rows: list, v: dict) -> str:
    """The cost decomposition of the best chain and the best tree (by walltime)."""
    by = {r["name"]: r for r in rows}
    c, t = by[v["speedup_wall"]["chain"]], by[v["speedup_wall"]["tree"]]
    tk = by[v["tokens_per_call"]["tree"]]
    ar = by["ar"]
    lines = [
        f"- Best chain {c['name']}: {c['tokens_per_call']:.2f} tokens/call, "
        f"{c['speedup_wall']:.2f}× (CPU time {c['speedup_cpu']:.2f}×). Best tree {t['name']} "
        f"(N={t['nodes']}, depth {t['depth']}): {t['tokens_per_call']:.2f} tokens/call, "
        f"{t['speedup_wall']:.2f}× (CPU {t['speedup_cpu']:.2f}×): "
        f"**{v['speedup_wall']['ratio']:.2f}** of the best chain's walltime speedup "
        f"(fastest rounds: best chain {v['speedup_min']['chain']}, best tree "
        f"{v['speedup_min']['tree']}, ratio {v['speedup_min']['ratio']:.2f}; CPU time: "
        f"{v['speedup_cpu']['chain']} vs {v['speedup_cpu']['tree']}, "
        f"{v['speedup_cpu']['ratio']:.2f}).",
        f"- Most tokens per call: {tk['name']} {tk['tokens_per_call']:.2f} vs the best chain's "
        f"{max(r['tokens_per_call'] for r in rows if r['kind'] == 'chain'):.2f} "
        f"(×{v['tokens_per_call']['ratio']:.2f}), at {tk['speedup_wall']:.2f}×.",
        "- Per iteration (ms): "
        + "; ".join(
            f"{r['name']}: measured {r['iteration_ms']:.3f} = T(N) {r['t_verify_ms']:.3f} + draft "
            f"{r['t_draft_ms']:.3f} + overhead {r['overhead_ms']:.3f}"
            for r in dict.fromkeys((ar["name"], c["name"], t["name"], tk["name"]))
            for r in [by[r]]
        ),
        "- Trees faster than the best chain: "
        f"{', '.join(v['trees_beating_best_chain']) or 'none'}.",
    ]
    if v.get("rule_pairs"):
        lines.append(
            f"- Without replacement gives more tokens/call than with replacement for "
            f"{v['without_beats_with_tokens']} of {v['rule_pairs']} trees."
        )
    return "\n".join(lines)


def format_all(results: dict) -> str:
    """The markdown report: setup, T(N), one table per draft and temperature, the verdict."""
    host = results.get("host", {})
    cfg = results["config"]
    out = [
        f"# Token trees vs chains: {results['target']['name']} "
        f"({results['target']['params']:,} params)",
        "",
        f"Device {results['device']}, {host.get('cpus')} CPUs, load average "
        f"{_load(host.get('loadavg_start'))} at start, {_load(host.get('loadavg_end'))} at end; "
        f"{cfg['walltime_prompts']} timed prompts × {cfg['max_new_tokens']} tokens, batch 1, "
        f"medians of {cfg['repeats']} round-robin rounds; tokens/call on "
        f"{cfg['stats_prompts']} further prompts. Run took {results['seconds']:.0f} s.",
        "",
        "## Verification cost T(N): one target call scoring N tokens (chain) or N tree nodes",
        "",
        cost_table(results),
        "",
    ]
    for key, rows in results["walltime"].items():
        t, draft = key.split("/", 1)
        out += [f"## {draft}, {t.replace('t', 't = ')}", "", rows_table(rows), ""]
        v = verdict(rows)
        if v:
            out += [_why(rows, v), ""]
    return "\n".join(out)


def _load(value) -> str:
    return "?" if not value else "/".join(f"{x:.1f}" for x in value)


def compare_runs(runs: dict) -> str:
    """Speedups of the same decoders in several runs (same config), one table per temperature.

    Tokens per call are deterministic (same prompts, same key), so only the timings differ
    between runs: the spread across runs is the measurement's noise.

    Args:
      runs: label -> results dict.
    """
    labels = list(runs)
    first = runs[labels[0]]
    out = []
    for key in first["walltime"]:
        per_run = {
            label: {r["name"]: r for r in runs[label]["walltime"].get(key, [])} for label in labels
        }
        for rows in per_run.values():
            if rows:
                add_min_speedup(list(rows.values()))
        head = " | ".join(f"wall {lb} | min {lb} | CPU {lb}" for lb in labels)
        out += [
            f"### {key.split('/', 1)[1]}, {key.split('/')[0].replace('t', 't = ')}",
            "",
            f"| decoder | N | depth | tok/call | {head} |",
            "|---|---|---|---|" + "---|" * (3 * len(labels)),
        ]
        for name, r in per_run[labels[0]].items():
            cells = []
            for label in labels:
                x = per_run[label].get(name)
                if x is None:
                    cells.append("— | — | —")
                    continue
                keys = ("speedup_wall", "speedup_min", "speedup_cpu")
                cells.append(" | ".join(f"{x[k]:.2f}×" for k in keys))
            depth = r.get("depth", r.get("gamma", 0))
            out.append(
                f"| {name} | {r['nodes']} | {depth} | {r['tokens_per_call']:.2f} | "
                + " | ".join(cells)
                + " |"
            )
        out.append("")
    return "\n".join(out)


def main(argv):
    workdirs = argv[1:] or ["runs/trees"]
    runs = {}
    for workdir in workdirs:
        with open(os.path.join(workdir, "results.json"), encoding="utf-8") as f:
            runs[os.path.basename(os.path.normpath(workdir))] = results = json.load(f)
        text = format_all(results)
        with open(os.path.join(workdir, "results.md"), "w", encoding="utf-8") as f:
            f.write(text)
        if len(workdirs) == 1:
            print(text)
    if len(workdirs) > 1:
        print(compare_runs(runs))


if __name__ == "__main__":
    main(sys.argv)
