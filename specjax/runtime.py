"""Process-wide settings specjax recommends but never imposes: the XLA:CPU copy-insertion flag,
and float32 matrix products computed in float32 on GPU/TPU.

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

On GPU and TPU, JAX's default precision computes float32 matrix products with TF32 or bfloat16
passes. The target's logits then depend on how many tokens one call scores (the products take
other shapes), so a verification pass and an autoregressive step disagree at near-ties.
Sampling stays exact for the law the verifier computes, but greedy speculative output is no
longer token-for-token the greedy autoregressive output (measured on an H100 with SmolLM2-135M:
every draft differed somewhere in 18 prompts x 64 tokens; all were identical with "highest").
`configure_accelerator()` asks for float32 products; `warn_if_inexact_matmuls`, called by the
decoders, warns once when an accelerator runs with JAX's unset default. Any precision the
application sets explicitly (`jax_default_matmul_precision`, e.g. "tensorfloat32" for speed)
is respected and silences the warning.
"""

from __future__ import annotations

import os
import sys
import warnings

FLAG = "--xla_cpu_copy_insertion_use_region_analysis"
OPT_OUT = "SPECJAX_NO_XLA_FLAGS"

_warned = False
_warned_precision = False


class CpuFlagWarning(UserWarning):
    """XLA:CPU runs without the copy-insertion flag (decoding loops copy their KV caches)."""


class PrecisionWarning(UserWarning):
    """An accelerator computes float32 matrix products in TF32/bfloat16 passes (JAX's default):
    greedy speculative output may differ from greedy autoregressive output at near-ties."""


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


def configure_cpu(threefry: bool = True) -> bool:
    """Sets the XLA:CPU copy-insertion flag in XLA_FLAGS, if it can still take effect.

    Idempotent. Does nothing to XLA_FLAGS with SPECJAX_NO_XLA_FLAGS=1 or when XLA_FLAGS already
    names the flag (an explicit `=false` is respected). Once JAX's backend has started, XLA_FLAGS
    is no longer read: then this warns (`CpuFlagWarning`), changes no flag and returns False.

    Args:
      threefry: also make jax.random's threefry hash one call of specjax's CPU kernel in CPU
        programs traced from now on (`specjax.kernels.install_threefry`: the same random bits,
        compiled faster; nothing changes where the kernels are not built). It may be called
        at any time, also after the backend started.

    Returns:
      Whether the flag is in effect for this process's XLA:CPU backend.
    """
    flag = _configure_flag()
    if threefry:
        from specjax.kernels import install_threefry

        install_threefry()
    return flag


def _configure_flag() -> bool:
    """`configure_cpu`'s XLA_FLAGS part."""
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
            stacklevel=3,
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


def configure_accelerator() -> bool:
    """Asks JAX for float32 matrix products computed in float32 ("highest") on GPU and TPU.

    Then a verification pass scores each token as an autoregressive step does (up to float32
    summation order), and greedy speculative decoding reproduces greedy decoding. Does nothing
    when the default backend is the CPU, where float32 products are float32 already (and
    changing the setting would only recompile programs). Programs traced afterwards use it;
    the setting is part of JAX's compilation key, so no stale program is reused. Starts JAX's
    backends: call `configure_cpu()` first.

    Returns:
      Whether the precision was set (an accelerator is the default backend).
    """
    import jax

    if jax.default_backend() == "cpu":
        return False
    jax.config.update("jax_default_matmul_precision", "highest")
    return True


def warn_if_inexact_matmuls() -> None:
    """Warns once per process when the default backend is an accelerator and JAX's float32
    matmul precision is its unset default (TF32 or bfloat16 passes); see the module docstring.
    Silent on CPU and once the application sets any precision explicitly."""
    global _warned_precision
    if _warned_precision:
        return
    import jax

    if jax.default_backend() == "cpu" or jax.config.jax_default_matmul_precision is not None:
        return
    _warned_precision = True
    warnings.warn(
        "float32 matrix products on this accelerator use JAX's default precision (TF32 or "
        "bfloat16 passes): a verification pass and an autoregressive step then round "
        "differently, so greedy speculative output can differ from greedy decoding at "
        "near-ties. Call specjax.configure_accelerator() for float32 products, or set "
        "jax_default_matmul_precision yourself to silence this.",
        PrecisionWarning,
        stacklevel=2,
    )


def check_process_settings() -> None:
    """The decoders' host-side check of the process settings above (each warns once)."""
    warn_if_cpu_unconfigured()
    warn_if_inexact_matmuls()
