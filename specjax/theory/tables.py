"""The paper's speedup formula on a grid of α x c x γ, and its text tables."""

from __future__ import annotations

import dataclasses

import numpy as np

from specjax.theory._checks import (
    _check_alpha,
    _check_gamma,
    _check_nonempty,
    _check_nonnegative,
)
from specjax.theory.formulas import expected_tokens_per_iteration, walltime_improvement


@dataclasses.dataclass(frozen=True)
class GammaTable:
    """Paper-formula speedups on a grid of alpha x c x gamma.

    Attributes:
      alphas: [A] acceptance rates.
      cs: [C] cost ratios.
      gammas: [G] drafted tokens per iteration.
      speedup: [A, C, G] `walltime_improvement`.
      tokens_per_iteration: [A, G] `expected_tokens_per_iteration`.
      best_gamma: [A, C] the gamma among `gammas` with the largest speedup.
      best_speedup: [A, C] that speedup.
    """

    alphas: np.ndarray
    cs: np.ndarray
    gammas: np.ndarray
    speedup: np.ndarray
    tokens_per_iteration: np.ndarray
    best_gamma: np.ndarray
    best_speedup: np.ndarray

    def to_dict(self) -> dict:
        """Returns the table as JSON-ready nested lists."""
        return {f.name: getattr(self, f.name).tolist() for f in dataclasses.fields(self)}

    def format(self) -> str:
        """Returns one text block per c: rows alpha, columns gamma, best gamma starred."""
        lines = []
        for j, c in enumerate(self.cs):
            lines.append(f"speedup (paper, Theorem 3.8), c = {c:g}; * = best gamma")
            lines.append(
                format_grid(self.alphas, self.gammas, self.speedup[:, j], self.best_gamma[:, j])
            )
        return "\n".join(lines)


def gamma_table(alphas, cs, gammas) -> GammaTable:
    """Evaluates the paper's speedup formula on every (alpha, c, gamma) combination.

    Args:
      alphas: 1-D acceptance rates in [0, 1], at least one.
      cs: 1-D draft/target cost ratios >= 0, at least one.
      gammas: 1-D integers >= 1 (need not be contiguous), at least one.

    Returns:
      A `GammaTable`.
    """
    alphas = np.atleast_1d(_check_alpha(alphas, "alphas"))  # [A]
    cs = np.atleast_1d(_check_nonnegative(cs, "cs"))  # [C]
    gammas = np.atleast_1d(_check_gamma(gammas, "gammas"))  # [G]
    for name, arr in (("alphas", alphas), ("cs", cs), ("gammas", gammas)):
        if arr.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
        _check_nonempty(arr, name)
    speedup = walltime_improvement(
        alphas[:, None, None], gammas[None, None, :], cs[None, :, None]
    )  # [A, C, G]
    best = np.argmax(speedup, axis=-1)  # [A, C]
    return GammaTable(
        alphas=alphas,
        cs=cs,
        gammas=gammas,
        speedup=speedup,
        tokens_per_iteration=expected_tokens_per_iteration(alphas[:, None], gammas[None, :]),
        best_gamma=gammas[best],
        best_speedup=np.take_along_axis(speedup, best[..., None], axis=-1)[..., 0],
    )


def format_grid(alphas, gammas, values, best_gamma=None, fmt: str = "{:.3f}") -> str:
    """Formats an [A, G] array as a text table, one row per alpha, starring each row's best gamma.

    Args:
      alphas: [A] row labels.
      gammas: [G] column labels.
      values: [A, G] numbers.
      best_gamma: optional [A] gamma to star in each row, each one of `gammas`.
      fmt: format of one number.

    Returns:
      The table as a multi-line string.
    """
    alphas, gammas, values = np.asarray(alphas), np.asarray(gammas), np.asarray(values)
    for name, arr in (("alphas", alphas), ("gammas", gammas)):
        if arr.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
        _check_nonempty(arr, name)
        if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
            raise TypeError(f"{name} must hold numbers, got {arr.tolist()!r}")
    if values.shape != (alphas.size, gammas.size):
        raise ValueError(
            f"values must have shape [len(alphas), len(gammas)] = [{alphas.size}, {gammas.size}]"
            f", got {list(values.shape)}"
        )
    if best_gamma is not None:
        best_gamma = np.asarray(best_gamma)
        if best_gamma.shape != alphas.shape:
            raise ValueError(
                f"best_gamma must have one gamma per alpha, shape {alphas.shape}; "
                f"got {best_gamma.shape}"
            )
        missing = [g for g in best_gamma.tolist() if g not in gammas.tolist()]
        if missing:
            raise ValueError(
                f"best_gamma must be among gammas {gammas.tolist()}; got {missing[0]!r}"
            )
    # A trailing space on unstarred cells keeps the decimal points aligned.
    cells = [[fmt.format(v) + " " for v in row] for row in values]
    if best_gamma is not None:
        for i, g in enumerate(best_gamma):
            col = int(np.flatnonzero(gammas == g)[0])
            cells[i][col] = cells[i][col][:-1] + "*"
    width = max(len(s) for row in cells for s in row) + 1
    width = max(width, max(len(f"g={g}") for g in gammas) + 1)
    header = "alpha |" + "".join(f"{f'g={g}':>{width}}" for g in gammas)
    rows = [header, "-" * len(header)]
    for a, row in zip(alphas, cells, strict=True):
        rows.append(f"{a:5.2f} |" + "".join(f"{s:>{width}}" for s in row))
    return "\n".join(rows)
