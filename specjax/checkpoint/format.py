"""What a checkpoint holds: its layout's names, its errors, checksums and the model config as JSON.

The pieces `checkpointer` (training runs) and `export` (models for inference) share.
"""

from __future__ import annotations

import dataclasses
import zlib

import jax
import numpy as np
import orbax.checkpoint as ocp

from specjax.models.config import RopeScaling, TransformerConfig

# Sub-directory of a run's workdir that holds its checkpoints.
CHECKPOINT_SUBDIR = "checkpoints"
# Prefix of a step directory moved aside because it failed to restore.
CORRUPT_PREFIX = "corrupt_"


class CheckpointError(RuntimeError):
    """A checkpoint could not be restored; the message names the path."""


class CheckpointMismatchError(CheckpointError, ValueError):
    """An intact checkpoint whose arrays have another layout than the one asked for (a changed
    model or optimizer config). A ValueError too: it is the caller's input, not damage, and
    the checkpoint is never moved aside for it."""


def tree_checksum(tree) -> str:
    """CRC32 over every leaf's dtype, shape and bytes, in tree order, as 8 hex digits.

    Not cryptographic: it detects damaged files, which is all a training run needs.

    Args:
      tree: a pytree of arrays.

    Returns:
      A hex string; equal trees give equal strings.
    """
    crc = 0
    for leaf in jax.tree.leaves(jax.device_get(tree)):
        arr = np.ascontiguousarray(leaf)
        crc = zlib.crc32(f"{arr.dtype}{arr.shape}".encode(), crc)
        crc = zlib.crc32(arr.tobytes(), crc)
    return f"{crc:08x}"


def model_config_to_dict(config: TransformerConfig) -> dict:
    """A JSON-ready dict of a `TransformerConfig` (inverse: `model_config_from_dict`)."""
    out = dataclasses.asdict(config)
    return {f.name: out[f.name] for f in dataclasses.fields(config) if f.init}


def model_config_from_dict(d: dict) -> TransformerConfig:
    """Rebuilds a `TransformerConfig` from `model_config_to_dict`'s output."""
    d = {k: v for k, v in d.items() if not k.startswith("_")}
    if d.get("rope_scaling") is not None:
        d["rope_scaling"] = RopeScaling(**d["rope_scaling"])
    return TransformerConfig(**d)


def item_handlers(with_opt_state: bool = True) -> dict:
    """orbax handlers of a step's items: params, meta and (training runs) opt_state."""
    handlers = {"params": ocp.StandardCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()}
    if with_opt_state:
        handlers["opt_state"] = ocp.StandardCheckpointHandler()
    return handlers


def verify_checksums(path: str, meta: dict, **trees) -> None:
    """Raises CheckpointError if a restored tree's checksum differs from the one in meta."""
    expected = meta.get("checksums") or {}
    for name, tree in trees.items():
        if name not in expected:
            raise CheckpointError(f"checkpoint {path} has no checksum for {name!r} in its meta")
        got = tree_checksum(tree)
        if got != expected[name]:
            raise CheckpointError(
                f"checkpoint {path}: {name} checksum {got} != saved {expected[name]} "
                "(the files were damaged after the save)"
            )


def error_cause(e: Exception, limit: int = 300) -> str:
    """`Type: message` of an orbax/TensorStore error, cut to its first line: their messages
    append the whole TensorStore spec (80 lines of JSON), which the chained traceback keeps."""
    lines = str(e).strip().splitlines()
    first = lines[0].split(" See full TensorStore details")[0] if lines else ""
    if len(first) > limit:
        first = first[: limit - 3] + "..."
    return f"{type(e).__name__}: {first}"
