"""Device meshes (auto-sharded axes) and JAX's multi-process runtime."""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
from jax.sharding import AxisType, Mesh

from specjax import checks

DEFAULT_AXES = ("data", "model")


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
