"""Mesh and logical-axis-rule fields that any config can include as `config.mesh`.

    from configs import mesh as mesh_config
    config.mesh = mesh_config.get_config()            # data-parallel over every device
    config.mesh = mesh_config.get_config("model=2")   # 2-way tensor parallel, data fills the rest

Read by `specjax.sharding.mesh_from_config(config.mesh)` and `rules_from_config(config.mesh)`.
Override from the command line like any field: `--config.mesh.shape=(4,2)`.
"""

import ml_collections

from specjax import sharding


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """Mesh fields; `arg` is "data=N,model=M" (either optional; -1 means all remaining devices).

    Args:
      arg: comma-separated axis sizes, e.g. "model=2" or "data=4,model=2".

    Returns:
      A ConfigDict with shape, axes, logical_axis_rules and replicate_draft.
    """
    sizes = {"data": -1, "model": 1}
    for item in (arg or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep or name.strip() not in sizes:
            raise ValueError(f"mesh option must be data=N or model=N, got {item!r}")
        sizes[name.strip()] = int(value)

    config = ml_collections.ConfigDict()
    # Mesh axis names, outermost first: `data` spans hosts (slow links carry only gradients),
    # `model` stays within a host or a TPU board (fast links carry per-layer all-reduces).
    config.axes = sharding.DEFAULT_AXES
    # Axis sizes in the order of `axes`; one -1 is filled with the remaining devices.
    config.shape = (sizes["data"], sizes["model"])
    # Logical axis -> mesh axis (None: replicated). First matching rule wins per array.
    config.logical_axis_rules = sharding.DEFAULT_RULES
    # Keep a full copy of the draft on every device (small, latency-bound: no per-step
    # collectives) instead of splitting it like the target.
    config.replicate_draft = True
    return config
