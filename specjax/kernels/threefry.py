"""jax.random's Threefry-2x32 hash as one CPU kernel call (`threefry.cc`), the same bits.

    from specjax import kernels
    kernels.install_threefry()   # True: CPU programs traced from now on call the kernel

JAX lowers its `threefry2x32` primitive on CPU to a rolled loop of 20 rounds of adds, rotations
and xors. A decoding program draws a dozen times per iteration (Gumbels, uniforms, key splits
and fold-ins), so each draw is a while loop with its own small fusions. `install_threefry`
registers, for the CPU platform only, a lowering that broadcasts the four operands to one shape
and makes one FFI call: the decoding fixture's programs compile 7-19 % faster (medians of 5
alternating compiles), and a test file that samples millions of rows ran 91 -> 69 s. The hash
is a fixed function of its inputs, so every key, every random number and every decoded token
is bit-for-bit what JAX's own lowering gives (tests/test_threefry_kernel.py: Random123's known
answers, an independent numpy hash, JAX's random functions; tests/test_decoding_fixture.py:
outputs recorded with JAX's lowering). Programs already compiled keep the lowering they were
traced with. `jax.export` (whose artifacts must load where specjax is not) gets JAX's own
lowering. Under a multi-device mesh the call is not partitioned (XLA's partitioner treats
it as one op on whole arrays, as it does JAX's own GPU threefry kernel): same bits, less
parallel.

`specjax.configure_cpu()` calls it. Where the kernels are not built it changes nothing.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.extend.random import threefry2x32_p
from jax.interpreters import mlir

from specjax.kernels.ops import _PREFIX, _load


def threefry2x32(key0, key1, x0, x1):
    """The hash through the kernel: uint32 operands broadcast to one shape -> (y0, y1).

    The kernel's own entry point, for tests and benchmarks; jax.random reaches it through the
    lowering `install_threefry` registers. Needs the built kernels (`kernels.available()`).
    """
    why = _load()
    if why is not None:
        raise RuntimeError(f"specjax's threefry kernel is not available: {why}")
    args = [jnp.asarray(a) for a in (key0, key1, x0, x1)]
    if any(a.dtype != jnp.uint32 for a in args):
        raise TypeError(f"threefry2x32 takes uint32 operands, got {[a.dtype for a in args]}")
    shape = jnp.broadcast_shapes(*(a.shape for a in args))
    if 0 in shape:  # nothing to hash (an FFI buffer of size 0 is legal, but skip the call)
        zeros = jnp.zeros(shape, jnp.uint32)
        return zeros, zeros
    out = jax.ShapeDtypeStruct(shape, jnp.uint32)
    call = jax.ffi.ffi_call(_PREFIX + "threefry2x32", (out, out), vmap_method="sequential")
    y0, y1 = call(*(jnp.broadcast_to(a, shape) for a in args))
    return y0, y1


@functools.lru_cache(maxsize=1)
def _rule():
    """The kernel call, except under `jax.export`: JAX's own CPU lowering there (an exported
    artifact must load where specjax is not, and export refuses unregistered custom calls).
    None if this JAX keeps its lowering elsewhere."""
    try:
        from jax._src.random.threefry2x32 import _threefry2x32_cpu_lowering_rule as jax_rule
    except ImportError:
        return None
    kernel = mlir.lower_fun(threefry2x32, multiple_results=True)

    def rule(ctx, *args):
        params = getattr(ctx.module_context, "lowering_parameters", None)
        exporting = bool(getattr(params, "for_export", False))
        return (jax_rule if exporting else kernel)(ctx, *args)

    return rule


_installed = False


def install_threefry() -> bool:
    """Makes jax.random's threefry hash one kernel call in CPU programs traced from now on.

    Idempotent; process-wide (it replaces JAX's CPU lowering of `threefry2x32`, not the GPU
    or TPU ones). The random bits are unchanged.

    Returns:
      Whether the kernel lowering is in effect (False where the kernels are not built:
      `kernels.status()` says why; or where this JAX has moved its own lowering, which the
      rule keeps for `jax.export`).
    """
    global _installed
    if _installed:
        return True
    if _load() is not None or _rule() is None:
        return False
    mlir.register_lowering(threefry2x32_p, _rule(), platform="cpu")
    _installed = True
    return True


def threefry_installed() -> bool:
    """Whether `install_threefry` has put the kernel lowering in effect in this process."""
    return _installed


__all__ = ["install_threefry", "threefry2x32", "threefry_installed"]
