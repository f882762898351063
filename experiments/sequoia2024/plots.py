"""PNG plots of the sequoia2024 results: tokens per call vs tree size, speedup vs tree size."""

from __future__ import annotations

import os

import numpy as np

from specjax.plotting import Series, save_line_plot

_COLORS = {
    "chain": "C0",
    "kchains": "C1",
    "binary": "C2",
    "sequoia": "C3",
    "kchains_wo": "C4",
    "binary_wo": "C5",
}


def write_all(results: dict, workdir: str) -> list:
    """Writes tokens_per_call_t<t>.png and speedup_t<t>.png per temperature; returns the names."""
    written = []
    corpus = results["config"]["corpus"]
    for t, block in results["temperatures"].items():
        series = []
        for method in results["config"]["methods"]:
            rows = sorted(
                (r for r in block["tokens_per_call"] if r["method"] == method),
                key=lambda r: r["n"],
            )
            x = np.log2([r["n"] for r in rows])
            color = _COLORS.get(method)
            series.append(Series(x, [r["measured"] for r in rows], method, color))
            series.append(
                Series(x, [r["expected"] for r in rows], None, color, linestyle="--", marker=None)
            )
        name = f"tokens_per_call_t{t}.png"
        save_line_plot(
            os.path.join(workdir, name),
            series,
            xlabel="log2 tree size n (tokens scored per target call)",
            ylabel="tokens per target call",
            title=f"{corpus}, t = {t}",
            style_legend=[("-", "measured"), ("--", "expected (positional model)")],
        )
        written.append(name)

        rows = block["walltime"]["rows"]
        series = []
        for label, prefix, color in (("chain", "chain", "C0"), ("sequoia", "sequoia", "C3")):
            picked = sorted(
                (r for r in rows if r["name"].startswith(prefix)), key=lambda r: r["nodes"]
            )
            if not picked:
                continue
            x = [r["nodes"] for r in picked]
            series.append(Series(x, [r["speedup"] for r in picked], label, color))
            predicted = [r["predicted_speedup"] for r in picked]
            series.append(Series(x, predicted, None, color, linestyle="--", marker=None))
        name = f"speedup_t{t}.png"
        save_line_plot(
            os.path.join(workdir, name),
            series,
            xlabel="tree size n (tokens scored per target call)",
            ylabel="walltime speedup over AR",
            title=f"{corpus}, t = {t}, batch 1",
            hline=1.0,
            style_legend=[("-", "measured"), ("--", "cost model")],
        )
        written.append(name)
    return written
