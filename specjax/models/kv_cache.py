"""An explicit KV cache with a per-row length: writing any number of tokens, rollback by length.

Every row b holds `lengths[b]` valid positions. A forward pass writes T new entries per row at
positions lengths[b] .. lengths[b] + T - 1 and advances the row by its own `num_new[b]`; rolling
back after a rejected draft is just setting `lengths` (stale entries past the length are masked
out of attention and overwritten by the next write). After a token-tree verification, `select`
moves the accepted path's entries into consecutive slots; the rejected branches become stale.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from jax.sharding import PartitionSpec

# Logical axes of one layer's keys or values [batch, max_len, kv_heads, head_dim].
CACHE_AXES = ("batch", "length", "kv_heads", "kv")


@struct.dataclass
class KVCache:
    """Keys and values of every layer, plus per-row lengths.

    Attributes:
      keys: tuple (one per layer) of [batch, max_len, kv_heads, head_dim].
      values: tuple (one per layer) of [batch, max_len, kv_heads, head_dim].
      lengths: int32 [batch], valid positions per row.
    """

    keys: tuple
    values: tuple
    lengths: jax.Array

    @property
    def max_len(self) -> int:
        return self.keys[0].shape[1]

    @property
    def batch(self) -> int:
        return self.lengths.shape[0]

    def logical_axes(self) -> KVCache:
        """PartitionSpecs of logical axes: rows on `batch`, heads on `kv_heads`."""
        spec = PartitionSpec(*CACHE_AXES)
        return KVCache(
            keys=tuple(spec for _ in self.keys),
            values=tuple(spec for _ in self.values),
            lengths=PartitionSpec("batch"),
        )

    def select(self, starts: jax.Array, index: jax.Array) -> KVCache:
        """Moves entries starts[b] + index[b, j] to starts[b] + j in every layer (see select_rows).

        Lengths are left as they are: set them with `rollback` to what the caller keeps.
        """
        return self.replace(
            keys=tuple(select_rows(k, starts, index) for k in self.keys),
            values=tuple(select_rows(v, starts, index) for v in self.values),
        )


def init_kv_cache(num_layers, batch, max_len, kv_heads, head_dim, dtype=jnp.float32) -> KVCache:
    """An empty cache (all lengths 0)."""
    shape = (batch, max_len, kv_heads, head_dim)
    return KVCache(
        keys=tuple(jnp.zeros(shape, dtype) for _ in range(num_layers)),
        values=tuple(jnp.zeros(shape, dtype) for _ in range(num_layers)),
        lengths=jnp.zeros((batch,), jnp.int32),
    )


def write_rows(buffer: jax.Array, new: jax.Array, starts: jax.Array) -> jax.Array:
    """Writes new[b, :T] into buffer[b, starts[b] : starts[b] + T] for every row b.

    A scatter of batch x T entries, so a write costs what it writes, not the buffer: the earlier
    masked select over the whole buffer (`jnp.where(inside, new, buffer)`) read and wrote every
    cache slot on every step, which made a decode step's cost grow with `cache_len` even with
    length-aware attention (zoo target shape, cache 4096: see experiments/speed/ATTENTION.md).
    A per-row `dynamic_update_slice` made XLA:CPU copy each cache buffer several times per step;
    the scatter updates it in place (`tests/test_cache_copies.py` counts copies in loop bodies;
    the entry computation copies the zero-initialised buffers once per call). Entries that would
    land past the end of the buffer are dropped (callers check capacity on the host).

    Args:
      buffer: [batch, length, ...].
      new: [batch, T, ...] same trailing dims and dtype family.
      starts: int32 [batch].

    Returns:
      [batch, length, ...] the updated buffer.
    """
    batch, num_new = new.shape[:2]
    rows = jnp.arange(batch)[:, None]  # [batch, 1]
    cols = starts[:, None] + jnp.arange(num_new)[None, :]  # [batch, T]
    return buffer.at[rows, cols].set(new.astype(buffer.dtype), mode="drop")


def select_rows(buffer: jax.Array, starts: jax.Array, index: jax.Array) -> jax.Array:
    """Compacts chosen entries: buffer[b, starts[b] + j] = buffer[b, starts[b] + index[b, j]].

    For a token tree written at slots starts[b] + node (node 0 the root), index is the accepted
    path's node indices; it gathers K entries per row and writes them back with `write_rows`, so
    the cost is K entries, not the buffer. Index entries past a row's path may hold anything
    (clipped into the buffer); what they write lies past the row's kept length.

    Args:
      buffer: [batch, length, ...].
      starts: int32 [batch] slot of each row's node 0.
      index: int32 [batch, K] node offsets to keep, in order (index[b, j] >= j for in-place
        safety is not needed: the gather reads before the write).

    Returns:
      [batch, length, ...] the buffer with entries starts[b] .. starts[b] + K - 1 replaced.
    """
    length = buffer.shape[1]
    source = jnp.clip(starts[:, None] + index, 0, length - 1)  # [batch, K]
    source = source.reshape(source.shape + (1,) * (buffer.ndim - 2))
    picked = jnp.take_along_axis(buffer, source, axis=1)  # [batch, K, ...]
    return write_rows(buffer, picked, starts)


def rollback(state, lengths: jax.Array):
    """Sets the per-row lengths of any decoding state that has a `lengths` field."""
    return state.replace(lengths=lengths.astype(jnp.int32))
