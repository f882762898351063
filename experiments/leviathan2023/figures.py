"""The pipeline's plots: speedup vs γ beside the three predictions, and α per draft."""

from __future__ import annotations

import os

from specjax.plotting import Series, save_bar_plot, save_line_plot


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


def write_figures(results: dict, workdir: str, table3: list[dict]) -> None:
    """speedup_vs_gamma_<t>.png per temperature and alpha_bars.png (`table3`: Table 3's rows)."""
    by_temp: dict = {}
    for key, per_gamma in results["walltime"].items():
        temp, name = key.split("/", 1)
        by_temp.setdefault(temp, []).append((name, per_gamma))
    for temp, curves in by_temp.items():
        title = f"Speculative speedup at {temp.replace('t', 't=')}"
        plot_speedup_vs_gamma(os.path.join(workdir, f"speedup_vs_gamma_{temp}.png"), curves, title)
    labels, values = [], []
    for r in table3:
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
