"""Small matplotlib helpers that write PNG files (Agg canvas, no pyplot, no display needed).

Figures are built with `matplotlib.figure.Figure` and an explicit Agg canvas rather than pyplot,
so plotting never touches global backend state and works on headless machines and in tests.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D


@dataclasses.dataclass(frozen=True)
class Series:
    """One curve of a line plot.

    Attributes:
      x: [N] x values.
      y: [N] y values.
      label: legend entry; None leaves the curve out of the legend.
      color: any matplotlib color; None uses the axes' color cycle.
      linestyle: "-", "--", ":" ...
      marker: marker at every point, or None.
      highlight_x: x value (one of `x`) to mark with a large star, e.g. an optimum; None for none.
    """

    x: Sequence[float]
    y: Sequence[float]
    label: str | None = None
    color: str | None = None
    linestyle: str = "-"
    marker: str | None = "o"
    highlight_x: float | None = None


def _new_figure(figsize: tuple[float, float]) -> Figure:
    fig = Figure(figsize=figsize, dpi=120)
    FigureCanvasAgg(fig)  # attaches the Agg canvas that savefig renders with
    return fig


def _save(fig: Figure, path: str) -> str:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def save_line_plot(
    path: str,
    series: Sequence[Series],
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
    hline: float | None = None,
    style_legend: Sequence[tuple[str, str]] = (),
    integer_x: bool = True,
    figsize: tuple[float, float] = (7.0, 4.5),
) -> str:
    """Writes a PNG line plot of several curves.

    Args:
      path: output .png path (parent directories are created).
      series: the curves.
      xlabel: x-axis label.
      ylabel: y-axis label.
      title: figure title.
      hline: y value of a thin horizontal reference line (e.g. 1.0 for "no speedup"), or None.
      style_legend: extra (linestyle, text) legend entries in black explaining line styles,
        e.g. [("-", "paper formula"), ("--", "measured cost")].
      integer_x: put ticks at integer x only.
      figsize: figure size in inches.

    Returns:
      `path`.
    """
    if not series:
        raise ValueError("series must contain at least one curve")
    fig = _new_figure(figsize)
    ax = fig.add_subplot(1, 1, 1)
    for s in series:
        x = np.asarray(s.x, dtype=np.float64)  # [N]
        y = np.asarray(s.y, dtype=np.float64)  # [N]
        if x.shape != y.shape or x.ndim != 1:
            raise ValueError(
                f"series {s.label!r}: x and y must be 1-D of one length, got "
                f"{x.shape} and {y.shape}"
            )
        (line,) = ax.plot(
            x,
            y,
            linestyle=s.linestyle,
            marker=s.marker,
            markersize=3.5,
            color=s.color,
            label=s.label,
        )
        if s.highlight_x is not None:
            hit = np.flatnonzero(x == s.highlight_x)
            if hit.size == 0:
                raise ValueError(f"series {s.label!r}: highlight_x={s.highlight_x} not in x")
            ax.plot(
                x[hit[0]],
                y[hit[0]],
                marker="*",
                markersize=13,
                color=line.get_color(),
                markeredgecolor="black",
                linestyle="none",
            )
    if hline is not None:
        ax.axhline(hline, color="gray", linewidth=0.8, linestyle=":")
    if integer_x:
        ax.xaxis.get_major_locator().set_params(integer=True)
    handles, labels = ax.get_legend_handles_labels()
    for linestyle, text in style_legend:
        handles.append(Line2D([], [], color="black", linestyle=linestyle))
        labels.append(text)
    if handles:
        ax.legend(handles, labels, fontsize=8, loc="best")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    return _save(fig, path)


def save_bar_plot(
    path: str,
    labels: Sequence[str],
    values: Sequence[float],
    *,
    ylabel: str,
    title: str = "",
    errors: Sequence[float] | None = None,
    hline: float | None = None,
    figsize: tuple[float, float] = (7.0, 4.5),
) -> str:
    """Writes a PNG bar chart, one bar per label, with optional error bars and values printed.

    Args:
      path: output .png path (parent directories are created).
      labels: [N] bar names.
      values: [N] bar heights.
      ylabel: y-axis label.
      title: figure title.
      errors: optional [N] half-widths of error bars (e.g. standard errors).
      hline: y value of a thin horizontal reference line, or None.
      figsize: figure size in inches.

    Returns:
      `path`.
    """
    values = np.asarray(values, dtype=np.float64)  # [N]
    if values.ndim != 1 or len(labels) != values.size or values.size == 0:
        raise ValueError(
            f"labels and values must be non-empty and of one length, got "
            f"{len(labels)} labels and values of shape {values.shape}"
        )
    if errors is not None and np.shape(errors) != values.shape:
        raise ValueError(f"errors must have shape {values.shape}, got {np.shape(errors)}")
    fig = _new_figure(figsize)
    ax = fig.add_subplot(1, 1, 1)
    positions = np.arange(values.size)
    bars = ax.bar(positions, values, yerr=errors, capsize=3 if errors is not None else 0)
    ax.bar_label(bars, fmt="%.3g", fontsize=8)
    ax.set_xticks(
        positions,
        list(labels),
        rotation=30 if values.size > 6 else 0,
        ha="right" if values.size > 6 else "center",
    )
    if hline is not None:
        ax.axhline(hline, color="gray", linewidth=0.8, linestyle=":")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, path)
