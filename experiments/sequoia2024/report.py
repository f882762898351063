"""Tables of the sequoia2024 results (a pure function of results.json) and the CSV.

python -m experiments.sequoia2024.report runs/sequoia-python   # tables again from results.json
"""

from __future__ import annotations

import csv
import json
import os
import sys

import numpy as np

from experiments.sequoia2024.methods import ACCEPTANCE_RULE

CSV_FIELDS = ("temperature", "method", "n", "depth", "measured", "expected", "ratio", "matches_ar")


def acceptance_table(acceptance: dict) -> str:
    """Positional P_k and conditional a_k by rank for both sibling rules, and α beside them."""
    lines = [
        "| rank k | P_k with | a_k with | P_k without | a_k without |",
        "|---:|---:|---:|---:|---:|",
    ]
    w, wo = acceptance["with"], acceptance["without"]
    for k in range(len(w["positional"])):
        lines.append(
            f"| {k + 1} | {w['positional'][k]:.4f} | {w['conditional'][k]:.4f} | "
            f"{wo['positional'][k]:.4f} | {wo['conditional'][k]:.4f} |"
        )
    lines.append(
        f"| Σ | {sum(w['positional']):.4f} | | {sum(wo['positional']):.4f} | |\n\n"
        f"α = {w['alpha']:.4f} on {w['positions']} generated positions; P_1 with replacement "
        f"{w['positional'][0]:.4f} (exact: must equal α), without {wo['positional'][0]:.4f} "
        f"(Monte-Carlo, or the draft's top-1 at t = 0)."
    )
    return "\n".join(lines)


def standard_error(row: dict) -> float:
    """Standard error of a row's measured tokens per call, from its per-iteration histogram.

    Iterations are treated as independent draws of the accepted count (0 for n = 1 rows).
    """
    hist = np.asarray(row.get("accepted_depth_histogram") or [], np.float64)
    if hist.sum() < 2:
        return 0.0
    d = np.arange(hist.size)
    mean = (hist * d).sum() / hist.sum()
    var = (hist * (d - mean) ** 2).sum() / (hist.sum() - 1)
    return float(np.sqrt(var / hist.sum()))


def agreement(rows: list) -> dict:
    """How many rows (n > 1, each tree once) agree with the expectation within 3 % and 2 SE."""
    seen, within3, within2se, total = set(), 0, 0, 0
    for r in rows:
        key = (tuple(r.get("parents") or ()), r["measured"])
        if r["n"] == 1 or key in seen:
            continue
        seen.add(key)
        total += 1
        within3 += abs(r["measured"] / r["expected"] - 1) <= 0.03
        within2se += abs(r["measured"] - r["expected"]) <= 2 * standard_error(r)
    return {"rows": total, "within_3pct": within3, "within_2se": within2se}


def tokens_table(rows: list, sizes, methods) -> str:
    """Measured tokens per call ± SE / `expected_accepted` + 1, by size and method."""
    cell = {(r["method"], r["n"]): r for r in rows}
    lines = ["| n | " + " | ".join(methods) + " |", "|---:|" + "---:|" * len(methods)]
    for n in sizes:
        cells = []
        for m in methods:
            r = cell.get((m, n))
            if r is None:
                cells.append("")
                continue
            text = f"{r['measured']:.2f}"
            if n > 1:
                text += f" ± {standard_error(r):.2f} / {r['expected']:.2f}"
                text += f" ({r['measured'] / r['expected'] - 1:+.1%})"
            else:
                text += f" / {r['expected']:.2f}"
            if r.get("matches_ar") is False:
                text += " **≠AR**"
            cells.append(text)
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def depth_profile(rows: list) -> dict | None:
    """The longest chain's conditional acceptance at each depth: reached(d) / reached(d - 1).

    Under the positional assumption every depth has the same rate (α); on real text it is not.
    """
    chains = [r for r in rows if r["method"] == "chain" and r.get("accepted_depth_histogram")]
    if not chains:
        return None
    r = max(chains, key=lambda r: r["n"])
    hist = np.asarray(r["accepted_depth_histogram"], np.float64)  # rows stopping at depth d
    reached = hist[::-1].cumsum()[::-1]  # reached[d] = rows that accepted >= d drafts
    rates = [float(reached[d] / reached[d - 1]) for d in range(1, len(reached)) if reached[d - 1]]
    return {"n": r["n"], "rates": rates, "reached": reached.tolist()}


def walltime_table(wall: dict) -> str:
    lines = [
        "| decoder | n | depth | tokens/call | ms/token | speedup | cost model | iteration ms | "
        "model calls ms | overhead ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in wall["rows"]:
        marks = []
        if r["name"] == wall["chosen"]["name"]:
            marks.append("model's pick")
        if r["name"] == wall.get("chosen_loop", {}).get("name"):
            marks.append("loop-aware pick")
        mark = f" ← {', '.join(marks)}" if marks else ""
        lines.append(
            f"| {r['name']}{mark} | {r['nodes']} | {r['depth']} | {r['tokens_per_call']:.2f} | "
            f"{r['ms_per_token']:.3f} | {r['speedup']:.2f}× | {r['predicted_speedup']:.2f}× | "
            f"{r['iteration_ms']:.3f} | {r['model_ms']:.3f} | "
            f"{r['iteration_ms'] - r['model_ms']:.3f} |"
        )
    return "\n".join(lines)


def verdict(wall: dict) -> dict:
    """Best chain, best tree, the hardware-chosen tree and their ratios (walltime speedup)."""
    rows = wall["rows"]
    chains = [r for r in rows if r["name"].startswith("chain")]
    trees = [r for r in rows if r["name"] != "ar" and not r["name"].startswith("chain")]
    best_chain = max(chains, key=lambda r: r["speedup"])
    out = {"best_chain": best_chain["name"], "best_chain_speedup": best_chain["speedup"]}
    if trees:
        best_tree = max(trees, key=lambda r: r["speedup"])
        out.update(best_tree=best_tree["name"], best_tree_speedup=best_tree["speedup"])
        out["best_tree_vs_best_chain"] = best_tree["speedup"] / best_chain["speedup"]
    for key in ("chosen", "chosen_loop"):
        pick = next((r for r in rows if r["name"] == wall.get(key, {}).get("name")), None)
        if pick is not None:
            out[key] = pick["name"]
            out[f"{key}_speedup"] = pick["speedup"]
            out[f"{key}_vs_best_chain"] = pick["speedup"] / best_chain["speedup"]
    return out


def _tree_text(entry: dict) -> str:
    return f"{entry['nodes']} nodes, depth {entry['depth']}"


def format_all(results: dict) -> str:
    """The whole report as markdown."""
    cfg = results["config"]
    sizes, methods = cfg["sizes"], list(cfg["methods"])
    out = [
        f"# sequoia2024 — {results['target']['name']} ({results['target']['params']:,} params) "
        f"with {results['draft']['name']} ({results['draft']['params']:,}), corpus {cfg['corpus']}",
        "",
        f"Device {results['device']}, {results['host']['cpus']} CPUs, load average "
        f"{results['host']['loadavg_start'][0]:.1f} at start, "
        f"{results['host']['loadavg_end'][0]:.1f} at end; {results['seconds']:.0f} s.",
        "",
        "T(k) ms (target, fastest of the rounds: the cost model's): "
        + ", ".join(f"{k}: {v * 1e3:.3f}" for k, v in results["costs"]["t_target"].items()),
        "",
        "T_draft(k) ms (fastest): "
        + ", ".join(f"{k}: {v * 1e3:.3f}" for k, v in results["costs"]["t_draft"].items()),
    ]
    for t, block in results["temperatures"].items():
        wall = block["walltime"]
        out += ["", f"## t = {t}", "", "### Acceptance by rank", ""]
        out.append(acceptance_table(block["acceptance"]))
        rules = ", ".join(f"{m}: {ACCEPTANCE_RULE[m]}" for m in methods)
        out += [
            "",
            "### Tokens per target call: measured ± SE / expected (1 + `expected_accepted`)",
            "",
            f"Expected from each method's positional vector ({rules}).",
            "",
            tokens_table(block["tokens_per_call"], sizes, methods),
        ]
        agree = agreement(block["tokens_per_call"])
        out += [
            "",
            f"Distinct trees within 3 % of the expectation: {agree['within_3pct']} of "
            f"{agree['rows']}; within two standard errors: {agree['within_2se']} of "
            f"{agree['rows']}.",
        ]
        profile = depth_profile(block["tokens_per_call"])
        if profile:
            rates = ", ".join(f"{x:.2f}" for x in profile["rates"][:12])
            out += [
                "",
                f"Positional assumption, the chain of n = {profile['n']}: acceptance rate at "
                f"depth 1, 2, … given the depth above was accepted: {rates} (the assumption: "
                "all equal to α).",
            ]
        v = verdict(wall)
        out += ["", "### Walltime (batch 1)", "", walltime_table(wall), ""]
        line = (
            f"Best chain {v['best_chain']} {v['best_chain_speedup']:.2f}×"
            + (
                f"; best tree {v['best_tree']} {v['best_tree_speedup']:.2f}× "
                f"({v['best_tree_vs_best_chain']:.2f} of the best chain)"
                if "best_tree" in v
                else ""
            )
            + (
                f"; the cost model's pick ({_tree_text(wall['chosen'])}) "
                f"{v['chosen_speedup']:.2f}× = {v['chosen_vs_best_chain']:.2f} × the best chain"
                if "chosen" in v
                else ""
            )
            + (
                f"; the loop-aware pick ({_tree_text(wall['chosen_loop'])}) "
                f"{v['chosen_loop_speedup']:.2f}× = {v['chosen_loop_vs_best_chain']:.2f} × the "
                "best chain"
                if "chosen_loop" in v
                else ""
            )
            + "."
        )
        if "loop_choice" in wall:
            lc = wall["loop_choice"]
            out += [
                "",
                f"Loop-aware choice: each size's best DP tree by the cost model, its decoder's "
                f"whole iteration timed in-loop (AR: {lc['ar_iteration_ms']:.3f} ms):",
                "",
                "| n | depth | expected tokens/call | iteration ms | predicted speedup |",
                "|---:|---:|---:|---:|---:|",
            ]
            out += [
                f"| {r['nodes']} | {r['depth']} | {r['tokens_per_call']:.2f} | "
                f"{r['iteration_ms']:.3f} | {r['predicted_speedup']:.2f}× |"
                for r in lc["rows"]
            ]
            out.append("")
        out += [
            line,
            "",
            f"On an accelerator's flat T(k) (T(k) = T(1), every draft call T_draft(1)), the same "
            f"vector picks {_tree_text(wall['flat'])}, predicted "
            f"{wall['flat']['predicted_speedup']:.2f}× (here the model picks "
            f"{_tree_text(wall['chosen'])}, predicted {wall['chosen']['predicted_speedup']:.2f}×).",
        ]
    return "\n".join(out) + "\n"


def write_csv(results: dict, path: str) -> None:
    """Experiment 1's rows, one per (temperature, method, n)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for t, block in results["temperatures"].items():
            for r in block["tokens_per_call"]:
                writer.writerow(
                    {
                        "temperature": t,
                        "method": r["method"],
                        "n": r["n"],
                        "depth": r["depth"],
                        "measured": f"{r['measured']:.4f}",
                        "expected": f"{r['expected']:.4f}",
                        "ratio": f"{r['measured'] / r['expected']:.4f}",
                        "matches_ar": r.get("matches_ar"),
                    }
                )


def main(argv) -> None:
    with open(os.path.join(argv[1], "results.json"), encoding="utf-8") as f:
        print(format_all(json.load(f)))


if __name__ == "__main__":
    main(sys.argv)
