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

Modules: `mesh` (meshes, the multi-process runtime), `rules` (logical-axis rules and their
checks), `layout` (NamedShardings of params, optimizer and decoding states, batch rows),
`transfer` (host <-> sharded arrays). Import from here.
"""

from specjax.sharding.layout import (
    abstract_like,
    axes_to_shardings,
    batch_sharding,
    fit_spec,
    logical_sharding,
    opt_state_shardings,
    param_shardings,
    replicated,
    state_shardings,
)
from specjax.sharding.mesh import (
    DEFAULT_AXES,
    initialize_distributed,
    make_mesh,
    mesh_from_config,
    resolve_mesh_shape,
)
from specjax.sharding.rules import (
    DEFAULT_RULES,
    LOGICAL_AXES,
    as_rule,
    check_rules,
    data_parallel_rules,
    declared_axes,
    rules_from_config,
)
from specjax.sharding.transfer import put, to_host

__all__ = [
    "DEFAULT_AXES",
    "DEFAULT_RULES",
    "LOGICAL_AXES",
    "abstract_like",
    "as_rule",
    "axes_to_shardings",
    "batch_sharding",
    "check_rules",
    "data_parallel_rules",
    "declared_axes",
    "fit_spec",
    "initialize_distributed",
    "logical_sharding",
    "make_mesh",
    "mesh_from_config",
    "opt_state_shardings",
    "param_shardings",
    "put",
    "replicated",
    "resolve_mesh_shape",
    "rules_from_config",
    "state_shardings",
    "to_host",
]
