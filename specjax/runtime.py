"""Process-wide settings specjax recommends but never imposes: the XLA:CPU copy-insertion flag.

Inside a `lax.while_loop`, XLA:CPU copies every KV-cache buffer once per decode step unless
`--xla_cpu_copy_insertion_use_region_analysis=true` is in `XLA_FLAGS` (measured: 4 cache-sized
copies per step for a 2-layer model, 0 with the flag; `tests/test_cache_copies.py`). XLA reads
`XLA_FLAGS` once, when JAX's backend starts, so the flag must be set before the first JAX
computation. Importing specjax changes nothing; an application (a launcher, a script, a Colab's
first cell) opts in:

    import specjax
    specjax.configure_cpu()   # before the first JAX computation

`SPECJAX_NO_XLA_FLAGS=1` turns `configure_cpu` into a no-op and silences the warning of
`warn_if_cpu_unconfigured`, which the decoders call on CPU when the flag is missing.
"""

from __future__ import annotations

import os
import sys
import warnings

FLAG = "--xla_cpu_copy_insertion_use_region_analysis"
OPT_OUT = "SPECJAX_NO_XLA_FLAGS"

_warned = False


class CpuFlagWarning(UserWarning):
    """XLA:CPU runs without the copy-insertion flag (decoding loops copy their KV caches)."""


def _flag_value(xla_flags: str) -> bool | None:
    """The flag's value in an XLA_FLAGS string: True/False if set, None if absent."""
    value = None
    for token in xla_flags.split():
        name, _, text = token.partition("=")
        if name == FLAG:
            value = text.lower() not in ("false", "0")
    return value


def _backend_started() -> bool:
    """Whether JAX's backends exist already (then XLA_FLAGS is read and fixed)."""
    if "jax" not in sys.modules:
        return False  # no JAX yet, so certainly no backend; importing it here would be wasted
    try:
        from jax._src import xla_bridge

        return xla_bridge.backends_are_initialized()
    except (ImportError, AttributeError):  # a JAX without this private helper: assume started
        return True


def configure_cpu() -> bool:
    """Sets the XLA:CPU copy-insertion flag in XLA_FLAGS, if it can still take effect.

    Idempotent. Does nothing with SPECJAX_NO_XLA_FLAGS=1 or when XLA_FLAGS already names the
    flag (an explicit `=false` is respected). Once JAX's backend has started, XLA_FLAGS is no
    longer read: then this warns (`CpuFlagWarning`), changes nothing and returns False.

    Returns:
      Whether the flag is in effect for this process's XLA:CPU backend.
    """
    current = os.environ.get("XLA_FLAGS", "")
    value = _flag_value(current)
    if value is not None:
        return value
    if os.environ.get(OPT_OUT):
        return False
    if _backend_started():
        warnings.warn(
            f"specjax.configure_cpu() was called after JAX's backend started, so {FLAG}=true "
            "cannot take effect in this process (XLA:CPU decoding loops will copy their KV "
            "caches every step). Call specjax.configure_cpu() before the first JAX computation "
            "(in a notebook: restart the kernel and call it first), or start the process with "
            f"XLA_FLAGS={FLAG}=true.",
            CpuFlagWarning,
            stacklevel=2,
        )
        return False
    os.environ["XLA_FLAGS"] = f"{current} {FLAG}=true".strip()
    return True


def warn_if_cpu_unconfigured() -> None:
    """Warns once per process when the default backend is CPU and the flag is not set.

    Meant for host-side entry points of decoding (not inside jit): after the first call it
    returns at once. Silent with SPECJAX_NO_XLA_FLAGS=1 or on accelerators.
    """
    global _warned
    if _warned:
        return
    _warned = True
    if os.environ.get(OPT_OUT) or _flag_value(os.environ.get("XLA_FLAGS", "")) is not None:
        return
    import jax

    if jax.default_backend() != "cpu":
        return
    warnings.warn(
        f"XLA_FLAGS lacks {FLAG}=true: on CPU the decoding loops copy every KV-cache buffer on "
        "every step (slower, same tokens). Call specjax.configure_cpu() before the first JAX "
        f"computation, or set {OPT_OUT}=1 to silence this.",
        CpuFlagWarning,
        stacklevel=2,
    )
