"""Device meshes, logical-axis rules, and `NamedSharding`s for params, optimizer state, caches.

The models name every parameter axis with a logical name (`vocab`, `embed`, `mlp`, `heads`,
`kv_heads`, `kv`); activations and caches add `batch` and `length`. A rule list in the config maps
logical names onto mesh axes (flax lm1b / t5x style), so one model runs data-parallel,
tensor-parallel or both by changing the config only:

    mesh = make_mesh((-1, 2), ("data", "model"))        # -1: all remaining devices
    shardings = param_shardings(model, params, mesh, DEFAULT_RULES)
    params = put(params, shardings)

A mesh axis that does not divide an array dimension (a 259-token byte vocabulary over 2 devices,
one KV head over 2 devices) is dropped for that array, which is then replicated along it: the
program stays correct, only that array is not split.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from specjax import checks
from specjax.models.interface import state_logical_axes
from specjax.models.kv_cache import CACHE_AXES  # noqa: F401  (its old home; now beside the cache)

DEFAULT_AXES = ("data", "model")

# Logical axis -> mesh axis. Batch rows go over `data`; the target's heads, MLP hidden units and
# vocabulary over `model` (Megatron-style: column-parallel in, row-parallel out, so each block
# needs one all-reduce after attention and one after the MLP). `embed` stays replicated so the
# residual stream never needs gathering; `kv` (head_dim) and `length` are never split.
DEFAULT_RULES = (
    ("batch", "data"),
    ("vocab", "model"),
    ("mlp", "model"),
    ("heads", "model"),
    ("kv_heads", "model"),
    ("embed", None),
    ("kv", None),
    ("length", None),
)


def resolve_mesh_shape(shape: Sequence[int], num_devices: int) -> tuple[int, ...]:
    """Fills in one `-1` entry so that the mesh uses exactly `num_devices` devices.

    Args:
      shape: mesh axis sizes, each >= 1 except at most one -1.
      num_devices: devices available.

    Returns:
      The concrete shape (a tuple of ints whose product is num_devices).
    """
    try:
        entries = tuple(shape)
    except TypeError:
        raise TypeError(f"mesh shape must be a sequence of axis sizes, got {shape!r}") from None
    if not all(checks.is_integer(s) for s in entries):
        raise TypeError(f"mesh shape entries must be integers, got {entries}")  # 1.9 was 1
    shape = tuple(int(s) for s in entries)
    if not checks.is_integer(num_devices) or num_devices < 1:
        raise ValueError(f"a mesh needs at least one device, got num_devices={num_devices!r}")
    if any(s == 0 or s < -1 for s in shape):
        raise ValueError(f"mesh shape entries must be >= 1 or -1, got {shape}")
    if shape.count(-1) > 1:
        raise ValueError(f"mesh shape may contain at most one -1, got {shape}")
    known = math.prod(s for s in shape if s != -1)
    if -1 in shape:
        if num_devices % known:
            raise ValueError(
                f"mesh shape {shape}: {num_devices} devices are not divisible by the fixed "
                f"axes' product {known}"
            )
        shape = tuple(num_devices // known if s == -1 else s for s in shape)
    if math.prod(shape) != num_devices:
        raise ValueError(
            f"mesh shape {shape} needs {math.prod(shape)} devices but {num_devices} are available"
        )
    return shape


def make_mesh(shape: Sequence[int], axes: Sequence[str] = DEFAULT_AXES, devices=None) -> Mesh:
    """A device mesh with auto-sharded axes (sharding propagation fills in the activations).

    Args:
      shape: axis sizes; one may be -1 (all remaining devices).
      axes: axis names, as many as `shape`.
      devices: devices to use (default: all global devices, every process's).

    Returns:
      A `jax.sharding.Mesh`.
    """
    try:
        shape = tuple(shape)  # make_mesh(4) failed unpacking an int
    except TypeError:
        raise TypeError(f"mesh shape must be a sequence of axis sizes, got {shape!r}") from None
    axes = tuple(axes)
    if len(axes) != len(shape):
        raise ValueError(f"mesh axes {axes} and shape {tuple(shape)} differ in length")
    if len(set(axes)) != len(axes):
        raise ValueError(f"mesh axis names must be distinct, got {axes}")
    devices = jax.devices() if devices is None else list(devices)
    if not devices:
        raise ValueError("devices is empty: a mesh needs at least one device")
    concrete = resolve_mesh_shape(shape, len(devices))
    # AxisType.Auto: GSPMD/Shardy-style propagation, what flax's logical partitioning targets
    # (jax.make_mesh would default to Explicit axes, whose typed shardings the models lack).
    return jax.make_mesh(concrete, axes, axis_types=(AxisType.Auto,) * len(axes), devices=devices)


def mesh_from_config(mesh_config, devices=None) -> Mesh:
    """`make_mesh(mesh_config.shape, mesh_config.axes)` (see configs/mesh.py)."""
    return make_mesh(tuple(mesh_config.shape), tuple(mesh_config.axes), devices)


def as_rule(rule):
    """A rule given as lists (a config's JSON form: ["batch", ["data", "model"]]) as the tuples
    flax reads; anything else unchanged, for `check_rules` to name."""
    if isinstance(rule, list | tuple) and len(rule) == 2:
        logical, target = rule
        return (logical, tuple(target) if isinstance(target, list) else target)
    return tuple(rule) if isinstance(rule, list) else rule


def rules_from_config(mesh_config) -> tuple:
    """The config's logical-axis rules as a hashable tuple of (logical, mesh axis or None)."""
    rules = []
    for rule in mesh_config.logical_axis_rules:
        if len(rule) != 2:
            raise ValueError(f"a logical axis rule is (logical_name, mesh_axis), got {rule!r}")
        logical, target = as_rule(rule)
        rules.append((str(logical), target))
    return tuple(rules)


def data_parallel_rules(rules: Sequence[tuple]) -> tuple:
    """The same rules with every parameter axis replicated: only `batch` stays split."""
    return tuple((name, target if name == "batch" else None) for name, target in rules)


# The logical axes specjax's own arrays declare (transformer params, KV caches, batch rows).
LOGICAL_AXES = frozenset(name for name, _ in DEFAULT_RULES)


def check_rules(mesh: Mesh, rules: Sequence[tuple], declared=None) -> None:
    """Raises ValueError for a rule that is not a (logical axis, mesh axes) pair, a rule that can
    never apply (an earlier one for its axis maps to None or to the same mesh axes), or a mesh
    axis the mesh lacks.

    Args:
      mesh: the Mesh.
      rules: (logical axis name, None | mesh axis name | tuple of them) pairs.
      declared: the logical axis names the arrays to shard declare (`declared_axes`), or None
        to skip that check. A rule for another name is refused: a misspelt one ("kv_head")
        would leave its arrays whole without a word.
    """
    earlier = {}  # logical axis -> the mesh axes of its earlier rules
    for rule in rules:
        if not (isinstance(rule, tuple) and len(rule) == 2 and isinstance(rule[0], str)):
            raise ValueError(
                f"rules: each rule is a (logical axis name, mesh axes) pair, got {rule!r}"
            )
        logical, target = rule
        targets = () if target is None else (target,) if isinstance(target, str) else target
        if not (isinstance(targets, tuple) and all(isinstance(a, str) for a in targets)):
            raise ValueError(
                f"rules: rule {rule!r} maps {logical!r} to {target!r}; give None, a mesh axis "
                "name or a tuple of them"
            )
        # Flax tries an axis's rules in order and takes the first whose mesh axes no other
        # dimension of the array holds yet (MaxText's fallbacks). A later rule is dead where
        # an earlier one always applies (None) or asks for the same mesh axes.
        before = earlier.setdefault(logical, [])
        if () in before or targets in before:
            why = "None, which always applies" if () in before else "the same mesh axes"
            raise ValueError(
                f"rules: rule {rule!r} can never apply: an earlier rule for {logical!r} maps it "
                f"to {why}"
            )
        before.append(targets)
        if declared is not None and logical not in declared:
            raise ValueError(
                f"rules: rule {rule!r} names logical axis {logical!r}, which none of these "
                f"arrays declares (they declare {sorted(declared)})"
            )
        for axis in targets:
            if axis not in mesh.axis_names:
                raise ValueError(
                    f"logical axis rule ({logical!r} -> {target!r}) names mesh axis {axis!r}, "
                    f"but the mesh has axes {mesh.axis_names}"
                )


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


def declared_axes(models) -> frozenset:
    """The logical axis names `models` declare: specjax's own (`LOGICAL_AXES`: transformer
    params, KV caches, batch rows) and those in each model's `logical_axes()`."""
    names = set(LOGICAL_AXES)
    is_spec = lambda x: isinstance(x, PartitionSpec)  # noqa: E731
    for model in models:
        if not hasattr(model, "logical_axes"):
            continue
        for spec in jax.tree.leaves(_logical_axes(model), is_leaf=is_spec):
            for entry in spec:
                names.update(() if entry is None else (entry,) if isinstance(entry, str) else entry)
    return frozenset(names)


@functools.lru_cache(maxsize=16)
def _logical_axes(model):
    """`model.logical_axes()`, memoized: it traces the model's init (models are hashable)."""
    return model.logical_axes()


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


def initialize_distributed(
    coordinator_address: str,
    num_processes: int,
    process_id: int,
    initialization_timeout: int = 120,
) -> None:
    """Starts JAX's own multi-process runtime (`jax.distributed.initialize`).

    On CPU the cross-process collectives go through gloo; on TPU pods and GPU clusters JAX picks
    the native transport (ICI/DCN, NCCL) and the arguments can usually be auto-detected (call
    `jax.distributed.initialize()` with none there). Must run before any other JAX call.

    Args:
      coordinator_address: "host:port" of process 0 (e.g. "127.0.0.1:12345").
      num_processes: total processes.
      process_id: this process's index in [0, num_processes).
      initialization_timeout: seconds to wait for every process to connect.
    """
    if not 0 <= process_id < num_processes:
        raise ValueError(f"process_id must lie in [0, {num_processes}), got {process_id}")
    # Only the CPU client reads this; on TPU/GPU it is harmless.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=initialization_timeout,
    )
