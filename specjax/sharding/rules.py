"""Logical-axis rules: which mesh axes each logical array axis is split over, and their checks."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
from jax.sharding import Mesh, PartitionSpec

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
