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


# Largest gamma accepted: float64 holds every integer up to 2**53 exactly, and gamma + 1 must
# not overflow the int64 it is cast to (1e19 would wrap around to a negative gamma).
_GAMMA_MAX = 2**53


def _check_gamma(gamma, name: str = "gamma") -> np.ndarray:
    """Returns gamma as an int64 array; integral floats (e.g. 3.0) are accepted."""
    arr = _as_float(gamma, name)
    if np.any(arr != np.round(arr)) or np.any(arr < 1) or np.any(arr > _GAMMA_MAX):
        raise ValueError(
            f"{name} must be an integer in [1, 2**53] (or an array of them), got {gamma!r}"
        )
    return arr.astype(np.int64)


def _check_positive_int(x, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {x!r}")
    return int(x)


def _check_seed(seed, name: str = "seed") -> int:
    """A numpy generator seed: a Python or NumPy integer >= 0 (not a bool or a float)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {seed!r}")
    return int(seed)


def _check_nonempty(arr: np.ndarray, name: str) -> np.ndarray:
    """Refuses an empty array (a table or mean over nothing), naming it."""
    if arr.size == 0:
        raise ValueError(f"{name} must hold at least one value, got shape {arr.shape}")
    return arr


def _check_broadcast(**arrays) -> tuple:
    """The broadcast shape of the named arrays; a ValueError naming them if there is none."""
    shapes = {name: np.shape(arr) for name, arr in arrays.items()}
    try:
        return np.broadcast_shapes(*shapes.values())
    except ValueError:
        names = list(shapes)
        joined = ", ".join(names[:-1]) + " and " + names[-1]
        got = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ValueError(f"{joined} must broadcast together; got shapes {got}") from None


def _check_distributions(p, q, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Validates two (batches of) probability vectors along `axis`.

    They broadcast over the leading (position) axes only: both must have the vocabulary axis,
    of one size (a q over 1 token must not be stretched over p's vocabulary).
    """
    p = _as_float(p, "p")
    q = _as_float(q, "q")
    try:
        ndim = len(np.broadcast_shapes(p.shape, q.shape))
    except ValueError:
        raise ValueError(
            f"p and q must have broadcastable shapes, got {p.shape} and {q.shape}"
        ) from None
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an integer, got {axis!r}")
    if ndim and not -ndim <= axis < ndim:
        raise ValueError(f"axis={axis} is out of range for p {p.shape} and q {q.shape}")
    axes = {}  # each array's own index of the vocabulary axis (numpy aligns shapes right)
    for name, arr in (("p", p), ("q", q)):
        if arr.ndim == 0:
            raise ValueError(f"{name} must have at least one axis (the vocabulary), got a scalar")
        axes[name] = axis % ndim - (ndim - arr.ndim)
        if axes[name] < 0:
            raise ValueError(
                f"{name} {arr.shape} lacks the vocabulary axis {axis} of the other's shape"
            )
    if p.shape[axes["p"]] != q.shape[axes["q"]]:
        raise ValueError(
            f"p and q must have the same vocabulary size along axis {axis}; got p {p.shape} "
            f"and q {q.shape} (they broadcast over the leading axes only)"
        )
    for name, arr in (("p", p), ("q", q)):
        if np.any(arr < 0.0):
            raise ValueError(f"{name} has negative probabilities (min {arr.min()})")
        sums = arr.sum(axis=axes[name])
        if not np.allclose(sums, 1.0, rtol=0.0, atol=_PROB_SUM_ATOL):
            worst = sums.flat[np.argmax(np.abs(sums - 1.0))]
            raise ValueError(f"{name} must sum to 1 along axis {axis}, found a sum of {worst}")
    return p, q
