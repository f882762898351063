"""Tables and CSV files of the pipeline's results, from results.json alone (plots: `figures`).

`python -m experiments.leviathan2023.report runs/lev-tiny` regenerates them without rerunning.
"""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
import sys

from experiments.leviathan2023 import figures
from specjax import theory
from specjax.benchmark.timing import judge_speedup, speedup_interval

# Acceptance bars of the harness (issue: measured vs theory).
TOKENS_TOL = 0.03
SPEEDUP_TOL = 0.10
# A measured tokens/iteration also agrees within this many standard errors of a run its length.
TOKENS_SE = 2.0

LEGEND = (
    "marks: * best γ of the curve; ~ the speedup's 95 % interval (from the paired repeats) "
    "includes 1.0: this row cannot tell speculative from autoregressive decoding on this "
    "machine",
    "checks: tok✓ the measured tokens/iteration is within "
    f"{TOKENS_TOL:.0%} (or {TOKENS_SE:g} standard errors of a run this long) of pred, "
    "predicted from Table 3's acceptance, measured on other prompts (held out); tok✗ "
    "outside (acceptance is not what the model assumes along the text, or this run's differs "
    "from the held-out one)",
    f"        spd✓ the measured speedup is within {SPEEDUP_TOL:.0%} of the loop model, or the "
    "loop model lies inside the speedup's 95 % interval (agreement within the noise); spd✗ "
    "neither",
)
# LEGEND[1] where Table 2 ran on Table 3's own prompts (results' "table2_held_out" false).
TOKENS_IN_SAMPLE = (
    "checks: tok✓ the measured tokens/iteration is within "
    f"{TOKENS_TOL:.0%} (or {TOKENS_SE:g} standard errors of a run this long) of pred, "
    "predicted from Table 3's acceptance on these same prompts (in-sample: each task of the "
    "prompts file has one prompt, so none was held out); tok✗ outside"
)


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


def tokens_standard_error(alpha: float, gamma: int, iterations: float) -> float:
    """Standard error of the mean tokens/iteration over `iterations` i.i.d. iterations.

    One iteration emits 1 + min(G, γ) tokens, G the run of accepted drafts (P(G >= k) = α^k).
    """
    alpha = min(max(alpha, 0.0), 1.0)
    probs = [alpha**j * (1 - alpha) for j in range(gamma)] + [alpha**gamma]
    mean = sum((j + 1) * p for j, p in enumerate(probs))
    var = sum((j + 1) ** 2 * p for j, p in enumerate(probs)) - mean**2
    return math.sqrt(max(var, 0.0) / max(iterations, 1.0))


def _emitted(results: dict) -> float | None:
    """Tokens one walltime measurement emits: prompts x max_new_tokens (no EOS)."""
    config = results.get("config", {})
    if "walltime_prompts" in config and "max_new_tokens" in config:
        return float(config["walltime_prompts"] * config["max_new_tokens"])
    return None


def table2_rows(results: dict) -> list[dict]:
    """One row per (temperature, draft, γ) with measured and predicted figures and the checks.

    Tokens/iteration is predicted from Table 3's α (held-out prompts) when the results have it,
    else (older results.json) from the row's own α. A speedup is judged against the loop model
    by a relative bar and, when the results hold one, by its 95 % interval.
    """
    rows = []
    emitted = _emitted(results)
    for key, per_gamma in results["walltime"].items():
        temp, name = key.split("/", 1)
        best = max(per_gamma, key=lambda r: r["speedup"])["gamma"]
        for r in per_gamma:
            held_out = r.get("predicted_tokens_per_iteration_heldout")
            alpha_pred = r.get("alpha_heldout")
            table3 = results.get("alpha", {}).get(temp[1:], {}).get(name)
            if held_out is None and table3 is not None:  # results.json of an older run
                alpha_pred = min(float(table3["alpha"]), 1.0)
                held_out = float(theory.expected_tokens_per_iteration(alpha_pred, r["gamma"]))
            pred_tok = r["predicted_tokens_per_iteration"] if held_out is None else held_out
            if alpha_pred is None:
                alpha_pred = r["alpha_empirical"]
            tok_err = r["tokens_per_iteration"] / pred_tok - 1
            tok_diff = abs(r["tokens_per_iteration"] - pred_tok)
            tok_se = None
            if emitted is not None:
                iterations = emitted / r["tokens_per_iteration"]
                tok_se = tokens_standard_error(alpha_pred, r["gamma"], iterations)
            tokens_ok = abs(tok_err) <= TOKENS_TOL or (
                tok_se is not None and tok_diff <= TOKENS_SE * tok_se
            )
            pred = r.get("predicted_speedup_loop")  # absent in results from before the loop model
            low, high = speedup_interval(r)
            verdict = judge_speedup(r["speedup"], low, high, pred, tol=SPEEDUP_TOL)
            rows.append(
                {
                    "temperature": temp[1:],
                    "draft": name,
                    "gamma": r["gamma"],
                    "best": r["gamma"] == best,
                    "ar_ms_per_token": r["ar_ms_per_token"],
                    "spec_ms_per_token": r["spec_ms_per_token"],
                    "speedup": r["speedup"],
                    "speedup_low": low,
                    "speedup_high": high,
                    "below_noise": verdict["below_noise"],
                    "ar_cv": r.get("ar_cv"),
                    "predicted_paper": r["predicted_speedup_paper"],
                    "predicted_measured_cost": r["predicted_speedup_measured"],
                    "predicted_loop": pred,
                    "speedup_rel_err": verdict["rel_err"],
                    "ar_iteration_ms": r.get("ar_iteration_ms"),
                    "spec_iteration_ms": r.get("spec_iteration_ms"),
                    "spec_overhead_ms": _overhead(results, name, r),
                    "alpha_empirical": r["alpha_empirical"],
                    "alpha_heldout": r.get("alpha_heldout"),
                    "tokens_per_iteration": r["tokens_per_iteration"],
                    "predicted_tokens_per_iteration": pred_tok,
                    "predicted_from": (
                        r.get("heldout_model", "held-out α")
                        if held_out is not None
                        else "this run's α"
                    ),
                    "tokens_rel_err": tok_err,
                    "tokens_standard_error": tok_se,
                    "tokens_ok": tokens_ok,
                    "speedup_in_interval": verdict["inside"],
                    "speedup_ok": verdict["ok"],
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
    width = max([24] + [len(r["draft"]) + 2 for r in rows])
    head = f"{'draft':<{width}}{'params':>12}" + "".join(f"{'α t=' + t:>10}" for t in temps)
    lines = [
        "Table 3 analogue: α on target-generated text, and c = T_draft / T_target",
        head + f"{'c':>9}",
    ]
    for r in rows:
        lines.append(
            f"{r['draft']:<{width}}{r['params']:>12,}"
            + "".join(f"{r['alpha_t' + t]:>10.3f}" for t in temps)
            + f"{r['c']:>9.4f}"
        )
    return "\n".join(lines)


def _interval(r: dict) -> str:
    if r["speedup_low"] is None:
        return "—"
    return f"{r['speedup_low']:.2f}-{r['speedup_high']:.2f}"


def noise_lines(rows: list[dict]) -> list[str]:
    """What the machine's noise allows: the AR baseline across rows and within a row."""
    ar = [r["ar_ms_per_token"] for r in rows]
    if len(ar) < 2:
        return []
    cv_rows = statistics.pstdev(ar) / statistics.fmean(ar)
    lines = [
        f"noise: the autoregressive baseline (the same computation in every row) measured "
        f"{min(ar):.3f}-{max(ar):.3f} ms/token across the {len(ar)} rows (CV {cv_rows:.0%})"
    ]
    within = [r["ar_cv"] for r in rows if r.get("ar_cv") is not None]
    widths = [
        (r["speedup_high"] - r["speedup_low"]) / (2 * r["speedup"])
        for r in rows
        if r["speedup_low"] is not None
    ]
    if within and widths:
        noisy = sum(r["below_noise"] for r in rows)
        lines[-1] += (
            f", {statistics.median(within):.0%} across one row's repeats (median); a row's "
            f"speedup is known to ±{statistics.median(widths):.0%} (median 95 % interval), so "
            "smaller differences between rows or from a prediction are noise; "
            f"{noisy}/{len(rows)} rows (~) cannot be told from 1.0x"
        )
    elif not widths:
        lines[-1] += "; no speedup intervals (one repeat per row, or results from an older run)"
    return lines


def format_table2(results: dict) -> str:
    rows = table2_rows(results)
    source = rows[0]["predicted_from"] if rows else "held-out α"
    lines = [
        "Table 2 analogue: walltime speedup (AR ms/token ÷ speculative ms/token)",
        "predictions: paper = the paper's formula with measured α and c; calls = model calls"
        " only (T(γ+1) + γ T_draft); loop = whole loop iterations timed in-loop (checked, err);"
        " ovh = ms per iteration outside the model calls; α run = this row's α; pred = tokens/"
        f"iteration from {source}",
        f"{'t':>3} {'draft':<22}{'γ':>3}{'speedup':>8}  {'95% CI':>12}{'paper':>7}{'calls':>7}"
        f"{'loop':>7}{'err':>6}{'ovh ms':>8}{'α run':>7}{'tok/it':>8}{'pred':>7}{'err':>7}"
        "  checks",
    ]
    for r in rows:
        checks = (
            ("tok✓" if r["tokens_ok"] else "tok✗") + " " + ("spd✓" if r["speedup_ok"] else "spd✗")
        )
        err = r["speedup_rel_err"]
        marks = ("*" if r["best"] else " ") + ("~" if r["below_noise"] else " ")
        lines.append(
            f"{r['temperature']:>3} {r['draft']:<22}{r['gamma']:>3}"
            f"{r['speedup']:>8.2f}{marks}{_interval(r):>12}"
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
    in_bar = sum(
        r["speedup_rel_err"] is not None and abs(r["speedup_rel_err"]) <= SPEEDUP_TOL for r in rows
    )
    in_sample = results.get("prompts", {}).get("table2_held_out") is False
    lines += [
        *((LEGEND[0], TOKENS_IN_SAMPLE, LEGEND[2]) if in_sample else LEGEND),
        f"agree: tokens/iteration {ok_tok}/{len(rows)}; speedup {ok_spd}/{len(rows)} "
        f"({in_bar} within {SPEEDUP_TOL:.0%} of the loop model, "
        f"{sum(r['speedup_in_interval'] for r in rows)} with the loop model inside the interval)",
        *noise_lines(rows),
    ]
    return "\n".join(lines)


def block_rows(results: dict) -> list[dict]:
    """One row per (temperature, draft, γ) of the block table: token-wise vs block."""
    rows = []
    for key, per_gamma in results.get("block", {}).items():
        temp, name = key.split("/", 1)
        for r in per_gamma:
            tw, bl = r["tokenwise"], r["block"]
            rows.append(
                {
                    "temperature": temp[1:],
                    "draft": name,
                    "gamma": r["gamma"],
                    "tokens_per_call_tokenwise": tw["tokens_per_call"],
                    "tokens_per_call_block": bl["tokens_per_call"],
                    "tokens_gain": bl["tokens_per_call"] / tw["tokens_per_call"] - 1,
                    "speedup_tokenwise": tw["speedup"],
                    "speedup_block": bl["speedup"],
                    "block_over_tokenwise_walltime": tw["spec_ms_per_token"]
                    / bl["spec_ms_per_token"],
                }
            )
    return rows


def format_block(results: dict) -> str:
    """The block-verification table (config.compare_block), or "" when absent."""
    rows = block_rows(results)
    if not rows:
        return ""
    lines = [
        "Block verification (Sun et al. 2024) vs token-wise, side by side in one run: tokens"
        " per target call (batched run) and speedup over AR (batch 1, medians)",
        f"{'t':>3} {'draft':<22}{'γ':>3}{'tok/call':>9}{'block':>8}{'gain':>7}"
        f"{'speedup':>9}{'block':>7}{'block/tw':>9}",
    ]
    for r in rows:
        lines.append(
            f"{r['temperature']:>3} {r['draft']:<22}{r['gamma']:>3}"
            f"{r['tokens_per_call_tokenwise']:>9.3f}{r['tokens_per_call_block']:>8.3f}"
            f"{100 * r['tokens_gain']:>+6.1f}%{r['speedup_tokenwise']:>8.2f}x"
            f"{r['speedup_block']:>6.2f}x{r['block_over_tokenwise_walltime']:>8.2f}x"
        )
    return "\n".join(lines)


def format_real_table3(table: dict) -> str:
    """One temperature of the real-target Table 3: α by draft position and by task, c."""
    rows = table["rows"]
    tasks = list(rows[0]["per_task_alpha"]) if rows else []
    lines = [
        f"γ = {table['gamma']}, {table['prompts']} prompts, up to {table['max_new_tokens']} new "
        f"tokens, AR {table['ar_ms_per_token']:.1f} ms/token; α = accepted / drafted in the loop",
        "| draft | α | α by position | " + " | ".join(f"α {t}" for t in tasks)
        + " | tokens / iteration | c | speedup (γ above) |",
        "|---" * (len(tasks) + 6) + "|",
    ]  # fmt: skip
    for r in rows:
        by_pos = " ".join(f"{a:.2f}" for a in r["alpha_by_position"])
        cells = " | ".join(f"{r['per_task_alpha'].get(t, float('nan')):.2f}" for t in tasks)
        name = r["draft"]
        if r.get("gamma", table["gamma"]) != table["gamma"]:
            name += f" at γ = {r['gamma']}"
        lines.append(
            f"| {name} | {r['alpha']:.3f} | {by_pos} | {cells} | "
            f"{r['tokens_per_iteration']:.2f} | {_f(r.get('c'))} | {r['speedup']:.2f}x |"
        )
    return "\n".join(lines)


def format_all(results: dict) -> str:
    t = results["costs"]["t_target"]
    curve = ", ".join(f"T({k})={float(v) * 1e3:.2f}" for k, v in t.items())
    accept = results.get("accept", "tokenwise")
    rule = (
        ""
        if accept == "tokenwise"
        else f"Table 2's acceptance rule: {accept}"
        + ("" if results.get("lossless", True) else " (LOSSY: does not sample the target)")
    )
    parts = [format_table3(results), f"Verification cost (ms): {curve}", rule]
    for t, table in results.get("real", {}).items():  # the real-target pipeline's Table 3
        parts.append(f"Table 3 at t = {t}, in full:\n" + format_real_table3(table))
    if "real" in results:
        parts.append(format_paper())
    parts += [format_table2(results), format_block(results)]
    return "\n\n".join(p for p in parts if p)


def write_all(results: dict, workdir: str) -> None:
    """CSV tables and PNG plots next to results.json."""
    _write_csv(os.path.join(workdir, "table3.csv"), table3_rows(results))
    _write_csv(os.path.join(workdir, "table2.csv"), table2_rows(results))
    if results.get("block"):
        _write_csv(os.path.join(workdir, "block.csv"), block_rows(results))
    figures.write_figures(results, workdir, table3_rows(results))


def save(results: dict, workdir: str, log=print) -> None:
    """Writes results.json, the CSV tables and plots into `workdir`, and logs the tables."""
    with open(os.path.join(workdir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1, default=float)
    write_all(results, workdir)
    log(format_all(results))
    log(f"done in {results['seconds']:.0f} s; figures in {workdir}")


def main(argv) -> None:
    workdir = argv[1]
    with open(os.path.join(workdir, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    write_all(results, workdir)
    print(format_all(results))


if __name__ == "__main__":
    main(sys.argv)
