"""The machine's memory bandwidth, as decoding at batch 1 meets it: a jitted matrix-vector product.

A decode step at batch 1 reads every weight once, so its floor is weight bytes / bandwidth. The
bandwidth is measured the way the weights are read, by a jitted float32 matvec over a matrix
far larger than the caches (8192 x 8192 = 256 MiB by default), and in the same run as what it
is compared with: on the VM the project is developed on it drifts between 20 and 40 GB/s within
minutes, so benchmarks time it round-robin with their own calls and compare per round.

    run, nbytes = matvec_runner()
    timing = interleaved({"matvec": run, ...})
    gb_per_s = nbytes / timing["matvec"].median / 1e9
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def matvec_runner(size: int = 8192, seed: int = 0):
    """(callable, bytes read per call): a jitted float32 [size, size] @ [size] product."""
    matrix = jax.random.normal(jax.random.PRNGKey(seed), (size, size), jnp.float32)
    vector = jnp.ones((size,), jnp.float32)
    product = jax.jit(jnp.matmul)
    jax.block_until_ready(product(matrix, vector))
    return (lambda: product(matrix, vector)), size * size * 4


def params_bytes(params) -> int:
    """Bytes of every array in a params pytree."""
    return int(sum(np.asarray(x.size) * x.dtype.itemsize for x in jax.tree.leaves(params)))
