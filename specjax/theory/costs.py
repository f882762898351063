"""A measured cost model: scoring k tokens at once costs T(k), not one target step (beyond
the paper; e.g. CPU, where T(γ + 1) grows with γ)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from specjax.theory._checks import (
    _as_float,
    _check_alpha,
    _check_broadcast,
    _check_gamma,
    _check_nonnegative,
)
from specjax.theory.formulas import expected_tokens_per_iteration


def cost_curve(points: Mapping[int, float] | Sequence[float] | np.ndarray) -> np.ndarray:
    """Target scoring cost T(k) for k = 1..K as an array, from measurements.

    Args:
      points: either a 1-D sequence [T(1), T(2), ..., T(K)], or a dict {k: T(k)} with k = 1
        present; missing k between measured ones are interpolated linearly (no extrapolation).
        Any time unit works as long as the draft cost uses the same one.

    Returns:
      float64 array [K] with entry k - 1 holding T(k); all entries > 0.
    """
    if isinstance(points, Mapping):
        if not points:
            raise ValueError("t_target dict is empty")
        if not all(
            isinstance(k, (int, float, np.integer, np.floating)) and not isinstance(k, bool)
            for k in points
        ):
            raise ValueError(
                f"t_target keys must be integers k >= 1 including 1, got {list(points)}"
            )
        ks = np.array(sorted(points), dtype=np.float64)
        if np.any(ks != np.round(ks)) or ks[0] != 1:
            raise ValueError(
                f"t_target keys must be integers k >= 1 including 1, got {sorted(points)}"
            )
        values = _as_float([points[k] for k in sorted(points)], "t_target")
        curve = np.interp(np.arange(1, ks[-1] + 1), ks, values)  # [K]
    else:
        curve = _as_float(points, "t_target")
        if curve.ndim != 1 or curve.size == 0:
            raise ValueError(f"t_target must be a non-empty 1-D array, got shape {curve.shape}")
    if np.any(curve <= 0.0):
        raise ValueError(f"t_target values must be > 0, got {curve.tolist()}")
    return curve


def measured_speedup(alpha, gamma, t_target, t_draft) -> np.ndarray:
    """Expected speedup when scoring k tokens at once costs T_target(k) (beyond the paper).

    E[tokens/iter](alpha, gamma) * T_target(1) / (T_target(gamma + 1) + gamma * T_draft). With
    T_target(k) = T_target(1) for all k and T_draft = c T_target(1) this is Theorem 3.8.

    Args:
      alpha: mean acceptance rate(s) in [0, 1].
      gamma: drafted tokens per iteration, integers >= 1; needs T_target(gamma + 1).
      t_target: target cost curve, see `cost_curve` (1-D array [T(1)..T(K)] or dict {k: T(k)}).
      t_draft: time of one draft step (same unit), >= 0; broadcasts like `alpha`.

    Returns:
      float64 array of the broadcast shape of `alpha`, `gamma` and `t_draft`.
    """
    curve, gamma, time = iteration_time(t_target, gamma, t_draft)
    _check_broadcast(alpha=_check_alpha(alpha), gamma=gamma, t_draft=t_draft)
    return expected_tokens_per_iteration(alpha, gamma) * curve[0] / time


def iteration_time(t_curve, gamma, t_step, names=("t_target", "gamma", "t_draft", "T_target")):
    """One iteration's time, T(γ + 1) + γ t_step, with its arguments checked.

    Args:
      t_curve: the scoring model's cost curve, see `cost_curve`; needs T(γ + 1).
      gamma: drafted tokens per iteration, integers >= 1.
      t_step: time of one draft step (same unit), >= 0.
      names: the arguments' names in error messages (curve, γ, step, T).

    Returns:
      (curve [K], gamma as int64, the iteration time), broadcast like `gamma` and `t_step`.
    """
    curve_name, gamma_name, step_name, t_name = names
    curve = cost_curve(t_curve)  # [K]
    gamma = _check_gamma(gamma, gamma_name)
    t_step = _check_nonnegative(t_step, step_name)
    _check_broadcast(**{gamma_name: gamma, step_name: t_step})
    if np.max(gamma) + 1 > curve.size:
        raise ValueError(
            f"{curve_name} covers k = 1..{curve.size}, but {gamma_name} = {int(np.max(gamma))} "
            f"needs {t_name}({int(np.max(gamma)) + 1})"
        )
    return curve, gamma, curve[gamma] + gamma * t_step  # curve[gamma] is T(gamma + 1)


def measured_optimal_gamma(alpha, t_target, t_draft) -> np.ndarray:
    """The gamma in 1..K-1 maximising `measured_speedup` (ties go to the smallest gamma).

    Args:
      alpha: mean acceptance rate(s) in [0, 1].
      t_target: target cost curve with K >= 2 entries, see `cost_curve`.
      t_draft: draft step time(s), >= 0; broadcasts against `alpha`.

    Returns:
      int64 array of the broadcast shape of `alpha` and `t_draft`.
    """
    curve = cost_curve(t_target)
    if curve.size < 2:
        raise ValueError("t_target must cover at least k = 1, 2 to choose a gamma >= 1")
    alpha = _check_alpha(alpha)
    t_draft = _check_nonnegative(t_draft, "t_draft")
    _check_broadcast(alpha=alpha, t_draft=t_draft)
    gammas = np.arange(1, curve.size)  # [K - 1]
    speedup = measured_speedup(alpha[..., None], gammas, curve, t_draft[..., None])  # [..., K-1]
    return gammas[np.argmax(speedup, axis=-1)]
