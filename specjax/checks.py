"""Argument checks shared by public entry points.

Shape and dtype checks run at trace time (shapes are static), so they cost nothing inside jit.
Value checks (NaN, range) need concrete arrays: they run when the caller passes concrete values
and are skipped for tracers, where a host sync would break the no-host-sync rule of the loops.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np


def is_concrete(x) -> bool:
    """True if `x` holds values (not a tracer inside jit/vmap)."""
    return not isinstance(x, jax.core.Tracer)


def check_rank(name: str, x, rank: int, layout: str) -> None:
    """Raises ValueError naming `name` unless `x.ndim == rank`."""
    if getattr(x, "ndim", None) != rank:
        shape = getattr(x, "shape", type(x).__name__)
        raise ValueError(f"{name} must have shape {layout} (rank {rank}); got shape {shape}")


def is_integer(x) -> bool:
    """A Python or NumPy integer, not a bool (which `int()` would read as 0 or 1)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def is_real(x) -> bool:
    """A Python or NumPy real number, not a bool."""
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(
        x, (bool, np.bool_)
    )


def is_finite_real(x, *, above_zero: bool = False) -> bool:
    """A finite Python or NumPy real number >= 0 (> 0 with `above_zero`), not a bool."""
    if not is_real(x) or not math.isfinite(x) or x < 0:
        return False
    return x > 0 or not above_zero


def check_finite_real(name: str, value, *, above_zero: bool = True) -> None:
    """Refuses, naming `name`, a value that is not a finite real number > 0 (>= 0 with
    `above_zero=False`): a time, a rate, a tolerance."""
    if not is_finite_real(value, above_zero=above_zero):
        bound = "> 0" if above_zero else ">= 0"
        raise ValueError(f"{name} must be a finite number {bound}; got {value!r}")


def check_count(name: str, value, low: int = 1, high: int | None = None) -> None:
    """Refuses a count that is not a Python or NumPy integer in [low, high], naming it (a bool,
    float or string would pass a comparison, or fail later deep in a trace, without a name)."""
    if not is_integer(value):
        raise TypeError(f"{name} must be an integer; got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be an integer {bound}; got {value}")


def check_key(key, name: str = "key") -> None:
    """Refuses anything but one PRNG key (typed, or raw uint32 key data), naming it. Works on
    tracers too: it reads the dtype and rank only."""
    dtype = getattr(key, "dtype", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        typed = True
    elif dtype == np.uint32 and getattr(key, "ndim", None) in (1, 2):
        typed = False
    else:
        raise TypeError(
            f"{name} must be a JAX PRNG key (jax.random.key(seed) or jax.random.PRNGKey(seed)); "
            f"got {key!r}"
        )
    if key.ndim != (0 if typed else 1):
        raise ValueError(f"{name} must be one PRNG key, not an array of them (shape {key.shape})")


def check_fill_value(value, name: str = "fill_value") -> None:
    """A rule's filler token: a Python or NumPy integer (a float would be truncated into a token
    id that cannot be told apart from emitted ones)."""
    if not is_integer(value):
        raise TypeError(f"{name} must be an integer (e.g. -1); got {value!r}")


def check_float(name: str, x) -> None:
    """Raises TypeError naming `name` unless `x` has a floating dtype."""
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"{name} must be a floating array; got dtype {x.dtype}")


def check_int(name: str, x) -> None:
    """Raises TypeError naming `name` unless `x` has an integer dtype."""
    if not jnp.issubdtype(x.dtype, jnp.integer):
        raise TypeError(f"{name} must be an integer array; got dtype {x.dtype}")


def check_finite(name: str, x) -> None:
    """Raises ValueError naming `name` if a concrete `x` holds NaN (or +inf for probabilities)."""
    if not is_concrete(x):
        return
    arr = np.asarray(jax.device_get(x)).astype(np.float32)
    if np.isnan(arr).any():
        where = np.argwhere(np.isnan(arr))[0].tolist()
        raise ValueError(f"{name} contains NaN (first at index {where}); shape {arr.shape}")
    if np.isposinf(arr).any():
        where = np.argwhere(np.isposinf(arr))[0].tolist()
        raise ValueError(f"{name} contains +inf (first at index {where}); shape {arr.shape}")


def check_probabilities(name: str, x, atol: float = 1e-2) -> None:
    """Raises ValueError naming `name` if a concrete `x` is not a probability vector per row."""
    if not is_concrete(x):
        return
    check_finite(name, x)
    arr = np.asarray(jax.device_get(x)).astype(np.float32)
    if (arr < 0).any():
        raise ValueError(f"{name} has negative entries (min {arr.min()}); expected probabilities")
    sums = arr.sum(-1)
    bad = np.abs(sums - 1) > atol
    if bad.any():
        where = np.argwhere(bad)[0].tolist()
        raise ValueError(
            f"{name} rows must sum to 1; row {where} sums to {sums[tuple(where)]:.6f} "
            "(pass probabilities, not logits)"
        )


def check_shape(name: str, x, shape: tuple, layout: str) -> None:
    """Raises ValueError naming `name` unless `x.shape == shape`."""
    got = tuple(getattr(x, "shape", ()))
    if got != tuple(shape):
        raise ValueError(f"{name} must have shape {layout} = {list(shape)}; got {list(got)}")


def check_distributions(
    name: str,
    x,
    leading: tuple,
    layout: str,
    vocab: int | None = None,
    *,
    require_mass: bool = False,
):
    """Checks a float [*leading, vocab] array of probabilities; raises naming `name`.

    Rows need not sum to 1 (the rules renormalise bfloat16 rounding away), but a concrete array
    must hold no negative entry, and with `require_mass` no all-zero row: renormalising cannot
    make either a distribution, and the rules would silently draw from garbage.

    Args:
      name: the argument's name in messages.
      x: the array.
      leading: its expected shape without the vocabulary axis.
      layout: the layout in words, e.g. "[batch, gamma, vocab]".
      vocab: the vocabulary it must share (None: not checked).
      require_mass: every row must have positive mass (a target's p; a draft's q may hold
        all-zero rows where nothing was drafted).

    Raises:
      ValueError: wrong rank or shape, a vocabulary mismatch, NaN, +inf, a negative entry or
        (with `require_mass`) an all-zero row (the last four for concrete values only).
      TypeError: a non-float dtype.
    """
    check_rank(name, x, len(leading) + 1, layout)
    check_float(name, x)
    if tuple(x.shape[:-1]) != tuple(leading):
        dims = ", ".join(str(d) for d in leading)
        raise ValueError(f"{name} must have shape {layout} = [{dims}, vocab]; got {tuple(x.shape)}")
    if vocab is not None and x.shape[-1] != vocab:
        raise ValueError(
            f"vocab mismatch: {name} has vocab {x.shape[-1]} but target_probs has vocab {vocab}; "
            "draft and target must share one vocabulary"
        )
    check_finite(name, x)
    if not is_concrete(x):
        return
    arr = np.asarray(jax.device_get(x)).astype(np.float32)
    if (arr < 0).any():
        where = np.argwhere(arr < 0)[0].tolist()
        raise ValueError(
            f"{name} has a negative entry ({arr[tuple(where)]:.6g} at index {where}); expected "
            "probabilities (softmax of logits, or the warper's probs)"
        )
    if require_mass:
        empty = arr.sum(-1) <= 0
        if empty.any():
            where = np.argwhere(empty)[0].tolist()
            raise ValueError(
                f"{name} row {where} is all zero; every {layout} row must be a distribution "
                "with positive mass"
            )


def value_range(x) -> tuple[int, int]:
    """(min, max) of a concrete integer array, computed on the host.

    On the host, not with `jnp.min`: inside a jit trace even a constant array's `jnp.min` is
    staged into the program and cannot be read.
    """
    arr = np.asarray(jax.device_get(x))
    return int(arr.min()), int(arr.max())
