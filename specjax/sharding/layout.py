"""`NamedSharding`s of whole pytrees (params, optimizer states, decoding states, batch rows)
from their logical axes and the rules."""

from __future__ import annotations

import math
from collections.abc import Sequence

import flax.linen as nn
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from specjax.models.interface import state_logical_axes
from specjax.sharding.rules import _logical_axes, check_rules


def fit_spec(spec: PartitionSpec, shape: Sequence[int], axis_sizes: dict) -> PartitionSpec:
    """Drops mesh axes that do not divide their array dimension (that dimension is replicated).

    Args:
      spec: a PartitionSpec of mesh axes (entries None, a name, or a tuple of names).
      shape: the array's shape.
      axis_sizes: mesh axis name -> size.

    Returns:
      A PartitionSpec with as many entries as `shape` whose every split divides evenly.
    """
    entries = list(spec) + [None] * (len(shape) - len(spec))
    if len(entries) > len(shape):
        raise ValueError(f"PartitionSpec {spec} has more entries than shape {tuple(shape)}")
    fitted = []
    for dim, entry in zip(shape, entries, strict=True):
        names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        size = math.prod(axis_sizes[n] for n in names)
        fitted.append(entry if names and dim % size == 0 else None)
    return PartitionSpec(*fitted)


def logical_sharding(logical: Sequence, shape: Sequence[int], mesh, rules) -> NamedSharding:
    """One array's NamedSharding from its logical axis names.

    Args:
      logical: logical axis names (or None) per dimension; may be a PartitionSpec.
      shape: the array's shape.
      mesh: the Mesh.
      rules: logical-axis rules.

    Returns:
      A NamedSharding on `mesh` (non-dividing splits dropped, see `fit_spec`).
    """
    mesh_axes = nn.logical_to_mesh_axes(tuple(logical), tuple(rules))
    return NamedSharding(mesh, fit_spec(mesh_axes, shape, dict(mesh.shape)))


def replicated(mesh: Mesh) -> NamedSharding:
    """A NamedSharding that keeps a full copy on every device."""
    return NamedSharding(mesh, PartitionSpec())


def param_shardings(model, params, mesh: Mesh, rules) -> dict:
    """Shardings of a model's parameters from its logical axes.

    Args:
      model: a specjax model; models with `logical_axes()` (transformers) are split by `rules`,
        others (n-gram tables, prompt lookup) are replicated.
      params: the parameters, or their abstract shapes (`jax.eval_shape`).
      mesh: the Mesh.
      rules: logical-axis rules (e.g. DEFAULT_RULES, or `data_parallel_rules(...)` to replicate).

    Returns:
      A pytree like `params` of NamedSharding.
    """
    check_rules(mesh, rules)
    if not hasattr(model, "logical_axes"):
        return jax.tree.map(lambda _: replicated(mesh), params)
    logical = _logical_axes(model)
    is_spec = lambda x: isinstance(x, PartitionSpec)  # noqa: E731
    if jax.tree.structure(logical, is_leaf=is_spec) != jax.tree.structure(params):
        raise ValueError(
            "params do not have the structure of model.logical_axes(); were they made by "
            f"{type(model).__name__}.init_params for this config?"
        )
    return jax.tree.map(
        lambda axes, leaf: logical_sharding(axes, leaf.shape, mesh, rules),
        logical,
        params,
        is_leaf=is_spec,
    )


def state_shardings(state, mesh: Mesh, rules):
    """Shardings of a decoding state (a model's KV cache, a loop state, ...).

    The state declares its logical axes (`logical_axes()`, e.g. a KV cache: rows on `batch`,
    heads on `kv_heads`); a state that does not is taken as per-row arrays, split by `batch`
    only (n-gram lengths, prompt-lookup history). See `models.interface.state_logical_axes`.

    Args:
      state: the state or its abstract shapes.
      mesh: the Mesh.
      rules: logical-axis rules.

    Returns:
      A pytree like `state` of NamedSharding.
    """
    check_rules(mesh, rules)
    return axes_to_shardings(state_logical_axes(state), state, mesh, rules)


def axes_to_shardings(axes, tree, mesh: Mesh, rules):
    """Maps a pytree of logical-axis PartitionSpecs (like `tree`) to NamedShardings.

    Args:
      axes: a pytree like `tree` whose leaves are PartitionSpecs of logical axis names.
      tree: the arrays (concrete, traced or abstract); their shapes decide which splits fit.
      mesh: the Mesh.
      rules: logical-axis rules.

    Returns:
      A pytree like `tree` of NamedSharding.
    """
    is_spec = lambda x: isinstance(x, PartitionSpec)  # noqa: E731
    return jax.tree.map(
        lambda spec, x: logical_sharding(tuple(spec), x.shape, mesh, rules),
        axes,
        tree,
        is_leaf=is_spec,
    )


def batch_sharding(mesh: Mesh, rules, shape: Sequence[int] | int) -> NamedSharding:
    """Sharding of a per-row array [batch, ...]: rows by the `batch` rule, the rest whole.

    Args:
      mesh: the Mesh.
      rules: logical-axis rules.
      shape: the array's shape (a non-dividing split is dropped), or just its rank when the
        shape is not known yet (a jit's in_shardings; the caller checks divisibility).

    Returns:
      A NamedSharding.
    """
    ndim = shape if isinstance(shape, int) else len(shape)
    logical = ("batch",) + (None,) * (ndim - 1)
    if isinstance(shape, int):
        return NamedSharding(mesh, nn.logical_to_mesh_axes(logical, tuple(rules)))
    return logical_sharding(logical, shape, mesh, rules)


def abstract_like(tree, shardings):
    """`jax.ShapeDtypeStruct`s of `tree` carrying `shardings`: the restore target for orbax.

    Restoring a checkpoint into this places every array straight into the new layout, so a
    checkpoint written under one mesh loads under any other (orbax reshards on read).
    """
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings
    )


def opt_state_shardings(opt_state, params, shardings, mesh: Mesh):
    """Shardings of an optimizer state: each moment like its parameter, the rest replicated.

    Optax states hold params-shaped subtrees (Adam's mu and nu) beside scalars (step counts).
    A leaf whose key path ends with a parameter's path and which has that parameter's shape gets
    the parameter's sharding, so the moments live next to the weights they update.

    Args:
      opt_state: the optimizer state or its abstract shapes.
      params: the parameters or their abstract shapes.
      shardings: `param_shardings(...)` of those parameters.
      mesh: the Mesh.

    Returns:
      A pytree like `opt_state` of NamedSharding.
    """
    by_path = {}
    for (path, leaf), sharding in zip(
        jax.tree_util.tree_flatten_with_path(params)[0], jax.tree.leaves(shardings), strict=True
    ):
        by_path[tuple(path)] = (tuple(leaf.shape), sharding)

    def pick(path, leaf):
        for start in range(len(path)):
            hit = by_path.get(tuple(path[start:]))
            if hit is not None and hit[0] == tuple(leaf.shape):
                return hit[1]
        return replicated(mesh)

    return jax.tree_util.tree_map_with_path(pick, opt_state)
