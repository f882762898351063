"""Moving pytrees between the host and a sharded layout, in one process or many."""

from __future__ import annotations

import jax
import numpy as np


def put(tree, shardings):
    """Places host (or single-device) values onto a sharded layout, in one or many processes.

    Every process must pass the same values (same seeds, same data); each process then keeps
    only the shards of its own devices. `jax.make_array_from_callback` is the multi-process-safe
    way to build a global array from host data.

    Args:
      tree: a pytree of arrays (numpy, jax, or Python scalars).
      shardings: a matching pytree of NamedSharding.

    Returns:
      A pytree of global `jax.Array`s with those shardings.
    """

    def one(x, sharding):
        if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            # Typed PRNG keys: place the raw key data, then re-wrap it.
            data = one(jax.random.key_data(x), sharding)
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
        host = np.asarray(jax.device_get(x)) if isinstance(x, jax.Array) else np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree.map(one, tree, shardings)


def to_host(tree):
    """Fetches a pytree of (possibly multi-process) global arrays to host numpy arrays.

    Fully addressable arrays are fetched directly; arrays spread over other processes' devices
    are all-gathered first (every process must call this together).
    """
    from jax.experimental import multihost_utils

    def one(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(jax.device_get(x))

    return jax.tree.map(one, tree)
