"""CPU kernels behind `jax.ffi`: weight-streaming matrix products for small token counts.

    from specjax import kernels
    kernels.available()          # built and loadable on this machine (see `status()`)
    w = kernels.pack(kernel)     # [K, N] -> panels [ceil(N / 8), K, 8]
    y = kernels.packed_matmul(x, w, n)   # x [..., K] -> [..., n]

The C++ source (`packed_matmul.cc`) is compiled by `pip install` when a C++ compiler is
present (nothing is downloaded at run time). Without the build, or off the CPU, every function
here computes the same product with XLA (`jnp.einsum` on the packed layout), so a model in the
packed layout runs everywhere; `status()` says which path this process takes and why.
"""

from __future__ import annotations

from specjax.kernels.ops import (
    PANEL,
    available,
    cache_attention,
    fused_matmul,
    pack,
    packed_matmul,
    status,
    unpack,
)
from specjax.kernels.threefry import install_threefry, threefry2x32, threefry_installed

__all__ = [
    "PANEL",
    "available",
    "cache_attention",
    "fused_matmul",
    "install_threefry",
    "pack",
    "packed_matmul",
    "status",
    "threefry2x32",
    "threefry_installed",
    "unpack",
]
