"""Theory mode: tables and a plot of the expected speedup of speculative decoding.

Prints, for each alpha in the config, the expected tokens per iteration and the walltime speedup
over gamma = 1..gamma_max from the paper's formula (Leviathan et al. 2023, Theorem 3.8), and the
same from our measured-cost model (scoring k tokens costs T_target(k), not one step). Writes
`theory.json` (all numbers) and `theory_speedup.png` to the workdir. See configs/theory.py.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
from absl import logging

from specjax import plotting, theory

# Upper end of the search for the unrestricted optimal gamma (beyond the table's gamma_max).
_GAMMA_SEARCH_MAX = 256


def _finite_or_none(values):
    """Nested lists with inf/nan replaced by None, since JSON has no infinity."""
    if isinstance(values, list):
        return [_finite_or_none(v) for v in values]
    return values if math.isfinite(values) else None


def compute(config) -> dict:
    """Computes every number of the theory report.

    Args:
      config: ConfigDict with alphas, c, gamma_max, t_target (list of ms for k = 1..K, or empty)
        and t_draft (ms); see configs/theory.py.

    Returns:
      A JSON-ready dict (see the keys below); arrays are nested lists indexed [alpha, gamma].
    """
    alphas = np.asarray(list(config.alphas), dtype=np.float64)  # [A]
    if alphas.ndim != 1 or alphas.size == 0:
        raise ValueError(f"config.alphas must be a non-empty list, got {config.alphas!r}")
    if not np.all((alphas >= 0) & (alphas <= 1)):
        raise ValueError(
            f"config.alphas (options alpha= / alphas=) must lie in [0, 1]: an acceptance rate; "
            f"got {alphas.tolist()}"
        )
    if not 0 <= config.c:
        raise ValueError(f"config.c (option c=) must be >= 0: a cost ratio; got {config.c!r}")
    gamma_max = config.gamma_max
    if isinstance(gamma_max, bool) or not isinstance(gamma_max, int) or gamma_max < 1:
        raise ValueError(f"config.gamma_max must be an integer >= 1, got {gamma_max!r}")
    gammas = np.arange(1, gamma_max + 1)  # [G]

    table = theory.gamma_table(alphas, [config.c], gammas)
    result = {
        "paper": "Leviathan, Kalman & Matias 2023, arXiv:2211.17192",
        "alphas": alphas.tolist(),
        "c": float(config.c),
        "gammas": gammas.tolist(),
        # Equation (1): expected tokens per iteration. [A, G]
        "tokens_per_iteration": table.tokens_per_iteration.tolist(),
        "formula": {
            "speedup": table.speedup[:, 0].tolist(),  # [A, G], Theorem 3.8
            "optimal_gamma": table.best_gamma[:, 0].tolist(),  # [A], within 1..gamma_max
            "best_speedup": table.best_speedup[:, 0].tolist(),  # [A]
            "optimal_gamma_unrestricted": theory.optimal_gamma(
                alphas, config.c, gamma_max=_GAMMA_SEARCH_MAX
            ).tolist(),
            "oracle_bound": _finite_or_none(theory.oracle_bound(alphas).tolist()),
        },
        "measured": None,
    }

    t_target = list(config.get("t_target") or [])
    if t_target:
        curve = theory.cost_curve(t_target)  # [K] ms for k = 1..K
        if curve.size < 2:
            raise ValueError(f"config.t_target needs at least 2 entries, got {t_target}")
        t_draft = float(config.t_draft)
        m_gammas = np.arange(1, min(gamma_max, curve.size - 1) + 1)  # [G']
        speedup = theory.measured_speedup(alphas[:, None], m_gammas[None, :], curve, t_draft)
        best = np.argmax(speedup, axis=-1)  # [A]
        c_eff = t_draft / curve[0]
        opt_eff = theory.optimal_gamma(alphas, c_eff, gamma_max=int(m_gammas[-1]))  # [A]
        result["measured"] = {
            "t_target_ms": curve.tolist(),
            "t_draft_ms": t_draft,
            # The c the paper's formula would use for the same draft and target.
            "c_effective": c_eff,
            "gammas": m_gammas.tolist(),
            "speedup": speedup.tolist(),  # [A, G']
            "optimal_gamma": m_gammas[best].tolist(),  # [A]
            "best_speedup": speedup[np.arange(alphas.size), best].tolist(),  # [A]
            "formula_at_c_effective": {
                "optimal_gamma": opt_eff.tolist(),
                "best_speedup": theory.walltime_improvement(alphas, opt_eff, c_eff).tolist(),
            },
        }
    return result


def format_report(result: dict) -> str:
    """Renders `compute`'s result as terminal tables."""
    alphas, gammas = result["alphas"], result["gammas"]
    formula = result["formula"]
    out = [
        f"Speculative decoding theory ({result['paper']})",
        "",
        "Expected tokens per iteration, (1 - alpha^(gamma+1)) / (1 - alpha)  [Eq. 1]",
        theory.format_grid(alphas, gammas, result["tokens_per_iteration"]),
        "",
        f"Walltime speedup, paper formula [Thm 3.8], c = {result['c']:g}; * = best gamma",
        theory.format_grid(alphas, gammas, formula["speedup"], formula["optimal_gamma"]),
        "",
        "alpha  best gamma  speedup  best gamma (<= 256)  bound 1/(1-alpha)",
    ]
    for i, a in enumerate(alphas):
        bound = formula["oracle_bound"][i]  # None stands for infinity (alpha = 1)
        unrestricted = formula["optimal_gamma_unrestricted"][i]
        # At the search limit the optimum may lie further out (e.g. alpha = 1: gamma -> inf).
        unrestricted = f">={unrestricted}" if unrestricted == _GAMMA_SEARCH_MAX else unrestricted
        out.append(
            f"{a:5.2f}  {formula['optimal_gamma'][i]:10d}  {formula['best_speedup'][i]:7.3f}"
            f"  {unrestricted:>19}  {'inf' if bound is None else f'{bound:.3f}':>17}"
        )
    measured = result["measured"]
    if measured is not None:
        t = ", ".join(f"{v:g}" for v in measured["t_target_ms"])
        out += [
            "",
            f"Measured-cost model: T_target(k = 1..) = [{t}] ms,",
            f"T_draft = {measured['t_draft_ms']:g} ms, c_eff = T_draft / T_target(1) = "
            f"{measured['c_effective']:.4f}; * = best gamma",
            theory.format_grid(
                alphas, measured["gammas"], measured["speedup"], measured["optimal_gamma"]
            ),
            "",
            f"alpha  measured: best gamma  speedup  |  paper formula at c_eff, gamma <= "
            f"{measured['gammas'][-1]}: best gamma  speedup",
        ]
        eff = measured["formula_at_c_effective"]
        for i, a in enumerate(alphas):
            out.append(
                f"{a:5.2f}  {measured['optimal_gamma'][i]:20d}  {measured['best_speedup'][i]:7.3f}"
                f"  |  {eff['optimal_gamma'][i]:44d}  {eff['best_speedup'][i]:7.3f}"
            )
    return "\n".join(out)


def plot(result: dict, path: str) -> str:
    """Writes speedup vs gamma, one colour per alpha, the optimum starred; returns `path`."""
    series = []
    measured = result["measured"]
    for i, a in enumerate(result["alphas"]):
        color = f"C{i % 10}"
        series.append(
            plotting.Series(
                x=result["gammas"],
                y=result["formula"]["speedup"][i],
                label=f"alpha = {a:g}",
                color=color,
                highlight_x=result["formula"]["optimal_gamma"][i],
            )
        )
        if measured is not None:
            series.append(
                plotting.Series(
                    x=measured["gammas"],
                    y=measured["speedup"][i],
                    color=color,
                    linestyle="--",
                    marker="s",
                    highlight_x=measured["optimal_gamma"][i],
                )
            )
    style = [("-", f"paper formula, c = {result['c']:g}")]
    if measured is not None:
        style.append(
            (
                "--",
                f"measured CPU cost, T_draft = {measured['t_draft_ms']:g} ms "
                f"(c_eff = {measured['c_effective']:.3f})",
            )
        )
    return plotting.save_line_plot(
        path,
        series,
        xlabel="gamma (drafted tokens per iteration)",
        ylabel="expected walltime speedup",
        title="Speculative decoding: expected speedup vs gamma (star = best gamma)",
        hline=1.0,
        style_legend=style,
    )


def run(config, workdir: str) -> dict:
    """Theory mode entry point: prints the tables, writes theory.json and theory_speedup.png.

    Args:
      config: see `compute`.
      workdir: output directory (created if missing).

    Returns:
      The result dict that was written to theory.json.
    """
    os.makedirs(workdir, exist_ok=True)
    result = compute(config)
    print(format_report(result), flush=True)
    json_path = os.path.join(workdir, "theory.json")
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump({"config": config.to_dict(), **result}, f, indent=1)
    png_path = plot(result, os.path.join(workdir, "theory_speedup.png"))
    logging.info("Wrote %s and %s", json_path, png_path)
    return result
