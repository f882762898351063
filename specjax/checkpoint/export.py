"""Models for inference: `export_model` writes one, `load_model` / `load_params` read any run,
checkpoint directory or export.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import orbax.checkpoint as ocp
from absl import logging

from specjax.checkpoint.format import (
    CHECKPOINT_SUBDIR,
    CheckpointError,
    error_cause,
    item_handlers,
    model_config_from_dict,
    tree_checksum,
    verify_checksums,
)
from specjax.models.transformer import TransformerLM


def export_model(directory: str, params, meta: dict) -> str:
    """Writes params and meta (no optimizer state) as a one-step checkpoint directory.

    Args:
      directory: destination (created; an existing export of the same step is replaced).
      params: parameter pytree.
      meta: JSON-serialisable dict with at least "model" (see `model_config_to_dict`) and "step".

    Returns:
      The absolute directory, loadable with `load_model`.
    """
    directory = os.path.abspath(directory)
    step = int(meta["step"])
    meta = dict(meta, checksums={"params": tree_checksum(params)})
    options = ocp.CheckpointManagerOptions(max_to_keep=1, create=True, cleanup_tmp_directories=True)
    with ocp.CheckpointManager(
        directory, options=options, item_handlers=item_handlers(with_opt_state=False)
    ) as manager:
        if step in manager.all_steps():
            manager.delete(step)
        manager.save(
            step,
            args=ocp.args.Composite(
                params=ocp.args.StandardSave(params), meta=ocp.args.JsonSave(meta)
            ),
            force=True,
        )
        manager.wait_until_finished()
    return directory


def _resolve_directory(path: str) -> str:
    """A run workdir has its checkpoints in a sub-directory; other paths are used as they are."""
    sub = os.path.join(path, CHECKPOINT_SUBDIR)
    return sub if os.path.isdir(sub) else path


def load_model(path: str, step: int | None = None) -> tuple[TransformerLM, Any, dict]:
    """Loads a trained transformer for inference: newest good step unless `step` is given.

    Args:
      path: a run workdir, its `checkpoints` directory, or an exported model directory.
      step: a specific step; None: the newest that passes its checksum (older ones are tried,
        with a warning, if the newest is damaged; nothing is moved or deleted).

    Returns:
      (model, params, meta): a `TransformerLM` rebuilt from the saved config, its parameters
      and the saved metadata (run config, data state, metrics).

    Raises:
      FileNotFoundError: no checkpoint under `path`.
      CheckpointError: none of the checkpoints can be restored.
    """
    directory = _resolve_directory(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"no checkpoint directory at {directory}")
    options = ocp.CheckpointManagerOptions(read_only=True, create=False)
    handlers = {"params": ocp.StandardCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()}
    with ocp.CheckpointManager(directory, options=options, item_handlers=handlers) as manager:
        steps = sorted(manager.all_steps())
        if not steps:
            raise FileNotFoundError(f"no checkpoint steps under {directory}")
        candidates = [step] if step is not None else list(reversed(steps))
        if step is not None and step not in steps:
            raise FileNotFoundError(f"no step {step} under {directory}; have {steps}")
        failures = []
        for s in candidates:
            spath = os.path.join(directory, str(s))
            try:
                meta = manager.restore(s, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))[
                    "meta"
                ]
                model = TransformerLM(model_config_from_dict(meta["model"]))
                abstract = jax.eval_shape(model.init_params, jax.random.PRNGKey(0))
                params = manager.restore(
                    s, args=ocp.args.Composite(params=ocp.args.StandardRestore(abstract))
                )["params"]
                verify_checksums(spath, meta, params=params)
            except Exception as e:
                msg = e if isinstance(e, CheckpointError) else error_cause(e)
                failures.append(f"checkpoint {spath} cannot be loaded: {msg}")
                logging.error("%s", failures[-1])
                continue
            if failures:
                logging.warning("Loaded the older checkpoint %s instead", spath)
            return model, params, meta
    raise CheckpointError("\n".join(failures))


def load_params(path: str, step: int | None = None):
    """The parameters of `load_model(path, step)` (see there)."""
    return load_model(path, step)[1]
