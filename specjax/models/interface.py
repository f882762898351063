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

    forward(...same arguments..., return_layers=()) -> ModelOutput(logits, state, hidden, layers)
        hidden: the last hidden states [batch, T, embed] that feed the output layer (for drafts
        that read the target's features, EAGLE/Medusa style), or None for table models;
        layers: the residual stream after the blocks in `return_layers` (0-based, static), which
        layers a feature head reads being the model's business.
    max_positions: int | None
        the most positions it can read (a learned position table's size); absent or None: no
        bound. Decoders default their `cache_len` to it (`position_limit`).
    trained_context: int | None
        the longest context it was trained for where nothing enforces it (RoPE); going past it
        warns (`warn_beyond_trained_context`), it is not an error.

Rollback is `rollback(state, lengths)` (`kv_cache.py`). A state may also offer
`select(starts, index)`: keep the entries at slots starts[b] + index[b, j] by moving them to
starts[b] + j (compacting an accepted tree path), and `logical_axes()`: a pytree like the state
of `PartitionSpec`s of logical axis names, which `specjax.sharding` maps onto a mesh. States
without it are treated as per-row arrays (`state_logical_axes`). Transformers, n-gram tables,
the uniform draft and prompt lookup all follow this, so any draft pairs with any target.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping
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
      layers: [batch, T, len(return_layers), embed] the residual stream after each requested
        decoder block (`forward(..., return_layers=(i, j, k))`: low, middle and high features
        for an EAGLE-3 head), or None when none was asked for.
    """

    logits: jax.Array
    state: Any
    hidden: jax.Array | None = None
    layers: jax.Array | None = None


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


def trained_context(model) -> int | None:
    """Longest context `model` was trained for where nothing enforces it (its
    `trained_context`: a RoPE transformer's `max_len`), or None. Going past it is allowed but
    untested territory, so callers warn (`warn_beyond_trained_context`)."""
    limit = getattr(model, "trained_context", None)
    return None if limit is None else int(limit)


def warn_beyond_trained_context(cache_len: int, **models) -> None:
    """Warns, naming the model and its trained context, when `cache_len` goes beyond it.

    Args:
      cache_len: positions per row that decoding may reach.
      **models: the models by role ("target", "draft"); None entries are skipped.
    """
    for role, model in models.items():
        limit = None if model is None else trained_context(model)
        if limit is not None and cache_len > limit:
            warnings.warn(
                f"cache_len={cache_len} goes beyond the {role}'s trained context of {limit} "
                "positions (trained_context; e.g. a GGUF file's llama.context_length): RoPE has "
                "no hard limit, but the model never saw positions past it, so text there may "
                "degrade",
                stacklevel=3,
            )


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


# -- params against the model they are passed for ---------------------------------------------


@functools.lru_cache(maxsize=128)
def expected_params(model):
    """The params pytree `model` expects, as `jax.ShapeDtypeStruct` leaves (None: unknown).

    From `model.abstract_params()` if it has one, else `jax.eval_shape` of `model.init_params`
    (no arrays are allocated). Cached per (hashable) model, so checks cost nothing per call.
    """
    if hasattr(model, "abstract_params"):
        return model.abstract_params()
    if hasattr(model, "init_params"):
        return jax.eval_shape(model.init_params, jax.random.PRNGKey(0))
    return None


def _path_name(path) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path)


@functools.lru_cache(maxsize=128)
def _expected_layout(model):
    """(treedef, shapes, {path name: shape}) of `expected_params(model)`, or None."""
    abstract = expected_params(model)
    if abstract is None:
        return None
    leaves, treedef = jax.tree_util.tree_flatten_with_path(abstract)
    by_path = {_path_name(p): tuple(x.shape) for p, x in leaves}
    floating = frozenset(_path_name(p) for p, x in leaves if _is_floating(x))
    return treedef, tuple(by_path.values()), by_path, floating


def _is_floating(x) -> bool:
    """Whether a leaf holds floating-point values (a float dtype, or a Python float)."""
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return isinstance(x, float)
    return bool(jnp.issubdtype(dtype, jnp.floating))


def params_mismatch(model, params) -> str | None:
    """Why `params` do not fit `model` (the first differing parameter), or None if they fit.

    Compares the tree of parameter paths and shapes with `expected_params(model)` on the host
    (floating dtypes are free: bfloat16 weights fit a float32 model; an integer or bool leaf where
    the model has a float one does not fit). Models that cannot say what they
    expect are never flagged. A model made of several (a hierarchy's inner models) checks
    itself through its own `params_mismatch(params)` method.
    """
    own = getattr(model, "params_mismatch", None)
    if callable(own):
        return own(params)
    try:
        layout = _expected_layout(model)
    except TypeError:  # an unhashable model: not one the decoders take (they jit on it)
        return None
    if layout is None:
        return None
    treedef, shapes, by_path, floating = layout
    try:
        leaves, got_def = jax.tree_util.tree_flatten(params)
        if (
            got_def == treedef
            and tuple(tuple(_leaf_shape(x)) for x in leaves) == shapes
            and (not floating or all(_is_floating(x) for x in leaves))
        ):
            return None  # the fast path: one structure comparison (every leaf a float)
    except TypeError:
        pass
    if not isinstance(params, Mapping):
        return f"are a {type(params).__name__}, not a dict of parameters"
    with_path = jax.tree_util.tree_leaves_with_path(params)
    got = {_path_name(p): tuple(_leaf_shape(x)) for p, x in with_path}
    for path, shape in by_path.items():
        if path not in got:
            flax = (
                " (a Flax variables dict? pass variables['params'])" if "params" in params else ""
            )
            return f"lack {path!r}{flax}"
        if got[path] != shape:
            return f"hold {path!r} of shape {got[path]} where the model has {shape}"
    extra = sorted(set(got) - set(by_path))
    if extra:
        return f"hold {extra[0]!r}, which the model does not have"
    for p, x in with_path:  # e.g. raw quantized weights: they would decode to garbage
        name = _path_name(p)
        if name in floating and not _is_floating(x):
            dtype = getattr(x, "dtype", type(x).__name__)
            return (
                f"hold {name!r} of dtype {dtype} where the model computes in floating point "
                "(dequantize or cast the weights first)"
            )
    return None


def _leaf_shape(x) -> tuple:
    """The shape of an array-like leaf (arrays, ShapeDtypeStructs, Python scalars)."""
    shape = getattr(x, "shape", None)
    return tuple(shape) if shape is not None else ()


def describe_model(model) -> str:
    """A short description for messages: "gpt2 d=128 L=4" or the class name."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "embed_dim"):
        family = "gpt2" if getattr(config, "positions", "learned") == "learned" else "llama"
        return f"{family} d={config.embed_dim} L={config.num_layers}, vocab {config.vocab_size}"
    return type(model).__name__


_ROLES = {
    "target_params": "target",
    "tparams": "target",
    "draft_params": "draft",
    "dparams": "draft",
}


def check_params(models, params, names) -> None:
    """Raises ValueError naming the argument and the parameter when params do not fit models.

    Args:
      models: the models, one per params pytree (a decoder's `models`).
      params: the params pytrees, in the same order.
      names: the arguments' names ("target_params", "draft_params").
    """
    for i, (model, tree, name) in enumerate(zip(models, params, names, strict=True)):
        why = params_mismatch(model, tree)
        if why is None:
            continue
        swapped = [
            names[j]
            for j, other in enumerate(models)
            if j != i and other != model and params_mismatch(other, tree) is None
        ]
        hint = ""
        if swapped:
            other = _ROLES.get(swapped[0], swapped[0])
            hint = f"; they fit the {other} model: were the {other}'s params passed as {name}?"
        raise ValueError(
            f"{name} do not fit the model they are passed for ({describe_model(model)}): "
            f"the params {why}{hint}"
        )


# Jitted with the (hashable) model static: one compiled program per model config, reused across
# calls in one process, instead of one small eager dispatch per parameter.
@functools.partial(jax.jit, static_argnums=0)
def init_params(model, key: jax.Array):
    """Random parameters of `model` from its own initialisers (one jitted program).

    Args:
      model: any model with `init_params(key)` (hashable: it is a static argument).
      key: PRNG key.

    Returns:
      The parameter pytree.

    A model's own `init_params`, called with a concrete key, comes here: flax would otherwise
    initialise op by op, compiling every op for every new shape.
    """
    return model.init_params(key)
