"""Argument checks shared by the theory modules (host-side numpy, float64)."""

from __future__ import annotations

import numpy as np

# Tolerance for "sums to one" on probability vectors: loose enough for float32 softmax outputs.
_PROB_SUM_ATOL = 1e-4


def _as_float(x, name: str) -> np.ndarray:
    """Converts `x` to a float64 array, rejecting booleans, strings and non-finite values."""
    arr = np.asarray(x)
    if arr.dtype == bool or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise TypeError(f"{name} must be a real number or array of them, got {x!r}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {x!r}")
    return arr


def _check_alpha(alpha, name: str = "alpha") -> np.ndarray:
    arr = _as_float(alpha, name)
    if np.any((arr < 0.0) | (arr > 1.0)):
        raise ValueError(f"{name} must lie in [0, 1], got {alpha!r}")
    return arr


def _check_nonnegative(x, name: str) -> np.ndarray:
    arr = _as_float(x, name)
    if np.any(arr < 0.0):
        raise ValueError(f"{name} must be >= 0, got {x!r}")
    return arr


def _check_gamma(gamma, name: str = "gamma") -> np.ndarray:
    """Returns gamma as an int64 array; integral floats (e.g. 3.0) are accepted."""
    arr = _as_float(gamma, name)
    if np.any(arr != np.round(arr)) or np.any(arr < 1):
        raise ValueError(f"{name} must be an integer >= 1 (or an array of them), got {gamma!r}")
    return arr.astype(np.int64)


def _check_positive_int(x, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {x!r}")
    return int(x)


def _check_distributions(p, q, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Validates two (batches of) probability vectors along `axis`."""
    p = _as_float(p, "p")
    q = _as_float(q, "q")
    try:
        np.broadcast_shapes(p.shape, q.shape)
    except ValueError:
        raise ValueError(
            f"p and q must have broadcastable shapes, got {p.shape} and {q.shape}"
        ) from None
    for name, arr in (("p", p), ("q", q)):
        if arr.ndim == 0:
            raise ValueError(f"{name} must have at least one axis (the vocabulary), got a scalar")
        if np.any(arr < 0.0):
            raise ValueError(f"{name} has negative probabilities (min {arr.min()})")
        sums = arr.sum(axis=axis)
        if not np.allclose(sums, 1.0, rtol=0.0, atol=_PROB_SUM_ATOL):
            worst = sums.flat[np.argmax(np.abs(sums - 1.0))]
            raise ValueError(f"{name} must sum to 1 along axis {axis}, found a sum of {worst}")
    return p, q
