"""The interface every specjax model offers to the decoding loops, and pair checks.

A model is a small frozen (hashable) object, usable as a static `jax.jit` argument, with:

    vocab_size: int
    init_state(batch, max_len) -> state      # a pytree with an int32 `lengths` [batch] field
    apply(params, state, tokens, num_new, *, positions=None, mask=None) -> (logits, state)
        tokens    int32 [batch, T]   row b's tokens[b, :num_new[b]] are real, the rest padding
        num_new   int32 [batch]      the state's lengths advance by it
        positions int32 [batch, T]   position of each new token; None: lengths[b] + t (a chain)
        mask      bool  [batch, T, max_len]  which cache slots each new token attends to, the
                  new tokens' own slots (lengths[b] + t) included; None: the causal mask
                  (slot <= position). A token tree is a mask and depth-based positions, not a
                  different model (SpecInfer's topology-aware causal mask).
        logits    float32 [batch, T, vocab]  next-token logits after each fed token

and optionally

    forward(...same arguments...) -> ModelOutput(logits, state, hidden)
        hidden: the last hidden states [batch, T, embed] that feed the output layer (for drafts
        that read the target's features, EAGLE/Medusa style), or None for table models.
    max_positions: int | None
        the most positions it can read (a learned position table's size); absent or None: no
        bound. Decoders default their `cache_len` to it (`position_limit`).

Rollback is `rollback(state, lengths)` (`kv_cache.py`). A state may also offer
`select(starts, index)`: keep the entries at slots starts[b] + index[b, j] by moving them to
starts[b] + j (compacting an accepted tree path), and `logical_axes()`: a pytree like the state
of `PartitionSpec`s of logical axis names, which `specjax.sharding` maps onto a mesh. States
without it are treated as per-row arrays (`state_logical_axes`). Transformers, n-gram tables,
the uniform draft and prompt lookup all follow this, so any draft pairs with any target.
"""

from __future__ import annotations

from typing import Any, Protocol

import jax
import jax.numpy as jnp
from flax import struct
from jax.sharding import PartitionSpec


@struct.dataclass
class ModelOutput:
    """What a forward pass returns.

    Attributes:
      logits: float32 [batch, T, vocab].
      state: the updated decoding state (a transformer's KVCache).
      hidden: [batch, T, embed] final hidden states (input of the output layer), or None.
    """

    logits: jax.Array
    state: Any
    hidden: jax.Array | None = None

    @property
    def cache(self):
        """The updated state (its name before the interface covered every model kind)."""
        return self.state


class LanguageModel(Protocol):
    """Structural type of a decodable model (see the module docstring)."""

    vocab_size: int

    def init_state(self, batch: int, max_len: int) -> Any: ...

    def apply(self, params, state, tokens, num_new, *, positions=None, mask=None): ...


class ApplyFromForward:
    """Mixin: `apply` = `forward` without the hidden states (for models that define forward)."""

    def apply(self, params, state, tokens, num_new, *, positions=None, mask=None):
        """Forward pass; returns (logits float32 [batch, T, vocab], new state)."""
        out = self.forward(params, state, tokens, num_new, positions=positions, mask=mask)
        return out.logits, out.state


def chain_positions(starts: jax.Array, num_tokens: int) -> jax.Array:
    """int32 [batch, T]: positions starts[b] + t of T new tokens fed as a chain."""
    return starts[:, None] + jnp.arange(num_tokens)[None, :]


def causal_mask(positions: jax.Array, max_len: int) -> jax.Array:
    """bool [batch, T, max_len]: a token at position i sees cache slots 0..i.

    Slots past a token's position hold later new tokens or stale entries of a rolled-back
    draft; both are hidden.
    """
    return jnp.arange(max_len)[None, None, :] <= positions[:, :, None]


def position_limit(model) -> int | None:
    """Most positions `model` can read (its `max_positions`: a learned position table's size),
    or None when nothing bounds them (RoPE, n-gram tables, prompt lookup)."""
    limit = getattr(model, "max_positions", None)
    return None if limit is None else int(limit)


def state_logical_axes(state) -> Any:
    """Logical axes of a decoding state: its own `logical_axes()`, else rows on `batch`.

    Args:
      state: a model's decoding state (concrete, traced or abstract).

    Returns:
      A pytree like `state` whose leaves are PartitionSpecs of logical axis names.
    """
    if hasattr(state, "logical_axes"):
        return state.logical_axes()
    return jax.tree.map(lambda x: per_row_axes(x.ndim), state)


def per_row_axes(ndim: int) -> PartitionSpec:
    """PartitionSpec("batch", None, ...) for a per-row array of rank `ndim` (() for scalars)."""
    return PartitionSpec(*(("batch",) + (None,) * (ndim - 1))) if ndim else PartitionSpec()


def check_pair(target: LanguageModel, draft: LanguageModel) -> None:
    """Raises ValueError unless target and draft can be paired for speculative decoding."""
    for name, model in (("target", target), ("draft", draft)):
        for attr in ("vocab_size", "init_state", "apply"):
            if not hasattr(model, attr):
                raise TypeError(f"{name} model {model!r} lacks `{attr}` (see models/interface.py)")
    check_vocab(target, draft)


def check_vocab(target, draft) -> None:
    """Raises ValueError unless `target` and `draft` (models or drafters) share a vocabulary."""
    if target.vocab_size != draft.vocab_size:
        raise ValueError(
            f"vocab mismatch: target has vocab_size={target.vocab_size} but draft has "
            f"vocab_size={draft.vocab_size}; speculative decoding needs one shared tokenizer "
            "(token i must mean the same string to both models)"
        )
