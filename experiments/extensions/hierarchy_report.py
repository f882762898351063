"""The hierarchical-speculation experiment's report (experiments/extensions/hierarchy.py).

`report(results)` renders the JSON results of `hierarchy.run` as markdown: per temperature, the
best γ of each configuration (target <- middle, target <- bigram, target <- middle <- bigram,
middle <- bigram) beside its predictions, then every row.
"""

from __future__ import annotations


def best(rows: list, kind: str) -> dict | None:
    """The fastest row of a kind (best γ found after the fact)."""
    rows = [r for r in rows if r["kind"] == kind]
    return max(rows, key=lambda r: r["tokens_per_s"]) if rows else None


def _fmt(x, spec=".2f") -> str:
    return "-" if x is None else format(x, spec)


def report(results: dict) -> str:
    """Markdown: per temperature, best γ of each configuration, then every row."""
    lines = ["## Hierarchical speculation: target <- middle <- small", ""]
    lines.append("Models: " + "; ".join(f"{k}: {v}" for k, v in results["models"].items()) + ".")
    cost = results["costs_ms"]
    lines.append(
        "In-loop call costs (ms): "
        + "; ".join(
            f"{role} " + ", ".join(f"T({k}) {v:.3f}" for k, v in d.items())
            for role, d in cost.items()
        )
        + "."
    )
    load0, load1 = results["load_avg_start"], results["load_avg_end"]
    lines.append(
        f"Load average (1/5/15 min) at start {load0[0]:.2f}/{load0[1]:.2f}/{load0[2]:.2f}, "
        f"at end {load1[0]:.2f}/{load1[1]:.2f}/{load1[2]:.2f}; {results['machine']}; "
        f"{results['seconds']:.0f} s."
    )
    lines.append("")
    for t, rows in results["tables"].items():
        ar = next(r for r in rows if r["kind"] == "ar")
        lines += [
            f"### {t}: best γ of each configuration "
            f"(autoregressive {ar['tokens_per_s']:.0f} tok/s)",
            "",
            "| configuration | best γ (outer/inner) | tokens/s | speedup | "
            "predicted (calls only) | predicted (composed) | α | tokens/iter |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for kind, label in (
            ("2L-middle", "target <- middle"),
            ("2L-small", "target <- bigram"),
            ("3L", "target <- middle <- bigram"),
            ("inner", "middle <- bigram (vs AR middle)"),
        ):
            r = best(rows, kind)
            if r is None:
                continue
            gam = f"{r.get('gamma', '-')}/{r.get('inner_gamma', '-')}"
            lines.append(
                f"| {label} | {gam} | {r['tokens_per_s']:.0f} | {r['speedup']:.2f}x | "
                f"{_fmt(r.get('predicted_speedup'))}x | "
                f"{_fmt(r.get('predicted_speedup_composed'))} | {_fmt(r['alpha'])} | "
                f"{r['tokens_per_iteration']:.2f} |"
            )
        lines += [
            "",
            "<details><summary>every row</summary>",
            "",
            "| decoder | tokens/s | speedup | predicted | predicted (inner calls) | "
            "predicted (composed) | α | tokens/iter | ms/iter | draft calls/iter | = AR |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r['name']} | {r['tokens_per_s']:.0f} | {r['speedup']:.2f}x | "
                f"{_fmt(r.get('predicted_speedup'))} | {_fmt(r.get('predicted_speedup_calls'))} | "
                f"{_fmt(r.get('predicted_speedup_composed'))} | "
                f"{_fmt(r['alpha'])} | {r['tokens_per_iteration']:.2f} | {r['iteration_ms']:.3f} | "
                f"{r['draft_calls_per_iteration']:.2f} | {_fmt(r.get('matches_ar'), '')} |"
            )
        lines += ["", "</details>", ""]
    return "\n".join(lines)
