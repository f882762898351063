"""Tables, CSV files and plots of the pipeline's results (from results.json alone).

`python -m experiments.leviathan2023.report runs/lev-tiny` regenerates them without rerunning.
"""

from __future__ import annotations

import csv
import json
import os
import sys

from specjax.plotting import Series, save_bar_plot, save_line_plot

# Acceptance bars of the harness (issue: measured vs theory).
TOKENS_TOL = 0.03
SPEEDUP_TOL = 0.10


# The paper's own figures (Leviathan et al. 2023, Tables 2 and 3) that our tables mirror:
# (setting, draft, α at t=0 / t=1, c, best γ, speedup at t=0 / t=1); None where not reported.
PAPER_ROWS = (
    ("GPT-like 97M target, lm1b", "unigram", ".03", None, None, None),
    ("GPT-like 97M target, lm1b", "bigram", ".05", None, None, None),
    ("GPT-like 97M target, lm1b", "6M transformer", ".88 / .89", None, None, None),
    ("T5-XXL (11B) EnDe", "T5-small (77M)", ".75 / .62", "0.02", "7", "3.4× / 2.6×"),
    ("T5-XXL (11B)", "T5-base", None, "0.04", None, None),
    ("T5-XXL (11B)", "T5-large", None, "0.11", None, None),
)


def format_paper() -> str:
    """The paper's figures beside which our tables stand (experiments/leviathan2023/README.md)."""
    head = f"{'paper setting':<27}{'draft':<16}{'α (t=0 / t=1)':<15}{'c':<6}{'γ':<3}speedup"
    lines = ["The paper's figures (Leviathan et al. 2023, Tables 2-3)", head]
    for setting, draft, alpha, c, gamma, speedup in PAPER_ROWS:
        cells = [alpha, c, gamma, speedup]
        alpha, c, gamma, speedup = ("" if v is None else v for v in cells)
        lines.append(f"{setting:<27}{draft:<16}{alpha:<15}{c:<6}{gamma:<3}{speedup}".rstrip())
    return "\n".join(lines)


def table3_rows(results: dict) -> list[dict]:
    """One row per draft: params, α at each temperature, c."""
    rows = []
    for name, info in results["drafts"].items():
        row = {"draft": name, "params": info["params"], "c": results["costs"]["c"][name]}
        for t, per_draft in results["alpha"].items():
            row[f"alpha_t{t}"] = per_draft[name]["alpha"]
        rows.append(row)
    return rows


def table2_rows(results: dict) -> list[dict]:
    """One row per (temperature, draft, γ) with measured and predicted figures and the checks."""
    rows = []
    for key, per_gamma in results["walltime"].items():
        temp, name = key.split("/", 1)
        best = max(per_gamma, key=lambda r: r["speedup"])["gamma"]
        for r in per_gamma:
            tok_err = r["tokens_per_iteration"] / r["predicted_tokens_per_iteration"] - 1
            pred = r.get("predicted_speedup_loop")  # absent in results from before the loop model
            spd_err = None if pred is None else r["speedup"] / pred - 1
            rows.append(
                {
                    "temperature": temp[1:],
                    "draft": name,
                    "gamma": r["gamma"],
                    "best": r["gamma"] == best,
                    "ar_ms_per_token": r["ar_ms_per_token"],
                    "spec_ms_per_token": r["spec_ms_per_token"],
                    "speedup": r["speedup"],
                    "predicted_paper": r["predicted_speedup_paper"],
                    "predicted_measured_cost": r["predicted_speedup_measured"],
                    "predicted_loop": pred,
                    "speedup_rel_err": spd_err,
                    "ar_iteration_ms": r.get("ar_iteration_ms"),
                    "spec_iteration_ms": r.get("spec_iteration_ms"),
                    "spec_overhead_ms": _overhead(results, name, r),
                    "alpha_empirical": r["alpha_empirical"],
                    "tokens_per_iteration": r["tokens_per_iteration"],
                    "predicted_tokens_per_iteration": r["predicted_tokens_per_iteration"],
                    "tokens_rel_err": tok_err,
                    "tokens_ok": abs(tok_err) <= TOKENS_TOL,
                    "speedup_ok": spd_err is not None and abs(spd_err) <= SPEEDUP_TOL,
                }
            )
    return rows


def _overhead(results: dict, draft: str, r: dict):
    """ms of a speculative iteration outside the model calls: I_spec − T(γ+1) − γ T_draft."""
    costs = results["costs"]
    t_target = costs["t_target"].get(str(r["gamma"] + 1), costs["t_target"].get(r["gamma"] + 1))
    if r.get("spec_iteration_ms") is None or t_target is None:
        return None
    return r["spec_iteration_ms"] - 1e3 * (t_target + r["gamma"] * costs["t_draft"][draft])


def _write_csv(path: str, rows: list[dict]) -> None:
    if not rows:
        return
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _f(x, spec=".3f"):
    return "—" if x is None else format(x, spec)


def format_table3(results: dict) -> str:
    rows = table3_rows(results)
    temps = list(results["alpha"])
    head = f"{'draft':<24}{'params':>10}" + "".join(f"{'α t=' + t:>10}" for t in temps)
    lines = [
        "Table 3 analogue: α on target-generated text, and c = T_draft / T_target",
        head + f"{'c':>9}",
    ]
    for r in rows:
        lines.append(
            f"{r['draft']:<24}{r['params']:>10,}"
            + "".join(f"{r['alpha_t' + t]:>10.3f}" for t in temps)
            + f"{r['c']:>9.4f}"
        )
    return "\n".join(lines)


def format_table2(results: dict) -> str:
    rows = table2_rows(results)
    lines = [
        "Table 2 analogue: walltime speedup (AR ms/token ÷ speculative ms/token); * = best γ",
        "predictions: paper = the paper's formula with measured α and c; calls = model calls"
        " only (T(γ+1) + γ T_draft); loop = whole loop iterations timed in-loop (checked, err);"
        " ovh = ms per iteration outside the model calls",
        f"{'t':>3} {'draft':<22}{'γ':>3}{'speedup':>9}{'paper':>7}{'calls':>7}{'loop':>7}{'err':>6}"
        f"{'ovh ms':>8}{'α':>7}{'tok/it':>8}{'pred':>7}{'err':>7}  checks",
    ]
    for r in rows:
        checks = (
            ("tok✓" if r["tokens_ok"] else "tok✗") + " " + ("spd✓" if r["speedup_ok"] else "spd✗")
        )
        err = r["speedup_rel_err"]
        lines.append(
            f"{r['temperature']:>3} {r['draft']:<22}{r['gamma']:>3}"
            f"{r['speedup']:>8.2f}{'*' if r['best'] else ' '}"
            f"{_f(r['predicted_paper'], '.2f'):>7}{_f(r['predicted_measured_cost'], '.2f'):>7}"
            f"{_f(r['predicted_loop'], '.2f'):>7}"
            f"{_f(None if err is None else 100 * err, '+.0f'):>5}%"
            f"{_f(r['spec_overhead_ms'], '.3f'):>8}"
            f"{r['alpha_empirical']:>7.3f}{r['tokens_per_iteration']:>8.3f}"
            f"{r['predicted_tokens_per_iteration']:>7.3f}"
            f"{100 * r['tokens_rel_err']:>+6.1f}%  {checks}"
        )
    ok_tok = sum(r["tokens_ok"] for r in rows)
    ok_spd = sum(r["speedup_ok"] for r in rows)
    lines.append(
        f"within {TOKENS_TOL:.0%} tokens/iteration: {ok_tok}/{len(rows)}; "
        f"within {SPEEDUP_TOL:.0%} of the loop model's speedup: {ok_spd}/{len(rows)}"
    )
    return "\n".join(lines)


def format_all(results: dict) -> str:
    t = results["costs"]["t_target"]
    curve = ", ".join(f"T({k})={float(v) * 1e3:.2f}" for k, v in t.items())
    return "\n\n".join(
        [format_table3(results), f"Verification cost (ms): {curve}", format_table2(results)]
    )


def plot_speedup_vs_gamma(path: str, curves, title: str) -> str:
    """Measured speedup by γ (dots) with the three predictions (lines), one colour per draft.

    Args:
      path: the PNG to write.
      curves: [(draft name, rows)], rows as `WalltimeRow.as_dict()` of each γ.
      title: the plot's title.

    Returns:
      `path`.
    """
    series = []
    for i, (name, per_gamma) in enumerate(curves):
        color = f"C{i}"
        g = [r["gamma"] for r in per_gamma]
        series.append(
            Series(
                g,
                [r["speedup"] for r in per_gamma],
                f"{name} measured",
                color=color,
                marker="o",
                linestyle="",
            )
        )
        loop = [r.get("predicted_speedup_loop") for r in per_gamma]
        if all(p is not None for p in loop):
            series.append(Series(g, loop, None, color=color, linestyle="--"))
        pred = [r["predicted_speedup_measured"] for r in per_gamma]
        if all(p is not None for p in pred):
            series.append(Series(g, pred, None, color=color, linestyle="-."))
        paper = [r["predicted_speedup_paper"] for r in per_gamma]
        series.append(Series(g, paper, None, color=color, linestyle=":"))
    save_line_plot(
        path,
        series,
        xlabel="γ",
        ylabel="speedup over autoregressive",
        hline=1.0,
        title=title,
        style_legend=(
            ("--", "loop model (measured iterations)"),
            ("-.", "model calls only"),
            (":", "paper formula"),
        ),
    )
    return path


def write_all(results: dict, workdir: str) -> None:
    """CSV tables and PNG plots next to results.json."""
    _write_csv(os.path.join(workdir, "table3.csv"), table3_rows(results))
    _write_csv(os.path.join(workdir, "table2.csv"), table2_rows(results))
    by_temp: dict = {}
    for key, per_gamma in results["walltime"].items():
        temp, name = key.split("/", 1)
        by_temp.setdefault(temp, []).append((name, per_gamma))
    for temp, curves in by_temp.items():
        title = f"Speculative speedup at {temp.replace('t', 't=')}"
        plot_speedup_vs_gamma(os.path.join(workdir, f"speedup_vs_gamma_{temp}.png"), curves, title)
    rows = table3_rows(results)
    labels, values = [], []
    for r in rows:
        for t in results["alpha"]:
            labels.append(f"{r['draft']}\nt={t}")
            values.append(r[f"alpha_t{t}"])
    save_bar_plot(
        os.path.join(workdir, "alpha_bars.png"),
        labels,
        values,
        ylabel="α",
        title="α per draft and temperature (target-generated text)",
    )


def main(argv) -> None:
    workdir = argv[1]
    with open(os.path.join(workdir, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    write_all(results, workdir)
    print(format_all(results))


if __name__ == "__main__":
    main(sys.argv)
