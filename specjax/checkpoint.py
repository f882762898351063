"""Checkpoints of training runs (orbax), resuming from the latest good step, and loading models.

Layout of one checkpoint directory (a run keeps it at `<workdir>/checkpoints`):

    <step>/params      the parameters (orbax StandardSave)
    <step>/opt_state   the optimizer state (absent in exported models)
    <step>/meta        JSON: the run's config, model config, data iterator state, checksums

A save is atomic (orbax writes a temporary directory and renames it), so a run killed mid-save
leaves the previous checkpoints intact; the temporary directory is removed on the next start.
Silent corruption (a damaged file that still parses) is caught by checksums of every array,
stored in `meta` and compared after each restore. A corrupt step is moved aside to
`corrupt_<step>` and the next older step is tried, with a warning that names both paths.
A step that is intact but holds another layout than the restore asks for (the run's config
changed its model or optimizer) is not damage: `CheckpointMismatchError` names the differences
and every checkpoint stays where it is, so resuming with the original config still works.

`load_model(path)` is what inference users call: it accepts a run workdir, a checkpoint
directory or an exported model directory and returns (TransformerLM, params, meta).
"""

from __future__ import annotations

import dataclasses
import os
import zlib
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging

from specjax.models.config import RopeScaling, TransformerConfig
from specjax.models.transformer import TransformerLM

# Sub-directory of a run's workdir that holds its checkpoints.
CHECKPOINT_SUBDIR = "checkpoints"
# Prefix of a step directory moved aside because it failed to restore.
CORRUPT_PREFIX = "corrupt_"
_ITEMS = ("params", "opt_state", "meta")


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


def _handlers(with_opt_state: bool = True) -> dict:
    handlers = {"params": ocp.StandardCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()}
    if with_opt_state:
        handlers["opt_state"] = ocp.StandardCheckpointHandler()
    return handlers


class Checkpointer:
    """Saves (params, opt_state, meta) every few steps, keeps the last N, restores the newest
    good one.

    Args:
      directory: where the step directories live (created if missing).
      keep: how many of the newest checkpoints to keep (>= 1).
      async_save: write in a background thread while training continues; `wait()` blocks
        until the last save is on disk.
    """

    def __init__(self, directory: str, keep: int = 3, async_save: bool = True):
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be an integer >= 1, got {keep!r}")
        self.directory = os.path.abspath(directory)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep,
            create=True,
            # Removes the temporary directory of a save interrupted by a kill.
            cleanup_tmp_directories=True,
            enable_async_checkpointing=async_save,
        )
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_handlers=_handlers()
        )

    def step_path(self, step: int) -> str:
        """The directory of checkpoint `step`."""
        return os.path.join(self.directory, str(step))

    def all_steps(self) -> list[int]:
        """Completed checkpoint steps, oldest first."""
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        """The newest completed checkpoint step, or None."""
        return self._manager.latest_step()

    def save(self, step: int, params, opt_state, meta: dict) -> None:
        """Saves one checkpoint (asynchronously if so configured).

        Args:
          step: the number of completed training steps.
          params: parameter pytree.
          opt_state: optimizer state pytree.
          meta: JSON-serialisable dict; checksums of params and opt_state are added to it.
        """
        meta = dict(meta, step=int(step))
        meta["checksums"] = {"params": tree_checksum(params), "opt_state": tree_checksum(opt_state)}
        self._manager.save(
            int(step),
            args=ocp.args.Composite(
                params=ocp.args.StandardSave(params),
                opt_state=ocp.args.StandardSave(opt_state),
                meta=ocp.args.JsonSave(meta),
            ),
            force=True,
        )

    def wait(self) -> None:
        """Blocks until pending saves are finished."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        """Finishes pending saves and releases the manager."""
        self._manager.wait_until_finished()
        self._manager.close()

    def restore(self, step: int, abstract_params, abstract_opt_state) -> tuple[Any, Any, dict]:
        """Restores one step and verifies its checksums.

        Args:
          step: a completed step.
          abstract_params: pytree of `jax.ShapeDtypeStruct` (e.g. from `jax.eval_shape`).
          abstract_opt_state: same for the optimizer state.

        Returns:
          (params, opt_state, meta).

        Raises:
          CheckpointMismatchError: the step's saved arrays have other shapes or another
            structure than `abstract_params` / `abstract_opt_state` (read from its metadata,
            before any array is restored).
          CheckpointError: the step cannot be read or its arrays fail their checksums.
        """
        path = self.step_path(step)
        differences = self._layout_differences(step, abstract_params, abstract_opt_state)
        if differences:
            shown = "; ".join(differences[:4])
            more = f" (and {len(differences) - 4} more)" if len(differences) > 4 else ""
            raise CheckpointMismatchError(
                f"checkpoint {path} was saved by a run with another model or optimizer than this "
                f"one: {shown}{more}. It was left in place: resume with the config it was saved "
                "with, or start this config in a new workdir"
            )
        try:
            restored = self._manager.restore(
                step,
                args=ocp.args.Composite(
                    params=ocp.args.StandardRestore(abstract_params),
                    opt_state=ocp.args.StandardRestore(abstract_opt_state),
                    meta=ocp.args.JsonRestore(),
                ),
            )
        except Exception as e:  # orbax raises many types for damaged files
            raise CheckpointError(f"checkpoint {path} cannot be read: {_cause(e)}") from e
        params, opt_state, meta = restored["params"], restored["opt_state"], restored["meta"]
        _verify(path, meta, params=params, opt_state=opt_state)
        return params, opt_state, meta

    def read_meta(self, step: int) -> dict | None:
        """The step's meta alone (no arrays are read), or None where it cannot be read."""
        try:
            restored = self._manager.restore(
                step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())
            )
            meta = restored["meta"]
        except Exception:  # noqa: BLE001 - a damaged step is `restore`'s to report
            return None
        return meta if isinstance(meta, dict) else None

    def restore_latest(self, abstract_params, abstract_opt_state):
        """Restores the newest step that passes its checks, moving broken ones aside.

        Args:
          abstract_params, abstract_opt_state: see `restore`.

        Returns:
          (step, params, opt_state, meta), or None if there is no checkpoint at all.

        Raises:
          CheckpointError: checkpoints exist but none can be restored (naming each path).
        """
        steps = self.all_steps()
        if not steps:
            return None
        failures = []
        for step in reversed(steps):
            try:
                params, opt_state, meta = self.restore(step, abstract_params, abstract_opt_state)
            except CheckpointMismatchError:
                raise  # another run's layout, not damage: nothing is moved aside
            except CheckpointError as e:
                failures.append(str(e))
                moved = self._move_aside(step)
                logging.error("%s; moved it to %s and trying the previous checkpoint", e, moved)
                continue
            if failures:
                logging.warning(
                    "Fell back to checkpoint %s after %d corrupt newer checkpoint(s)",
                    self.step_path(step),
                    len(failures),
                )
            return step, params, opt_state, meta
        raise CheckpointError(
            f"no checkpoint under {self.directory} can be restored (damaged ones were moved to "
            f"{CORRUPT_PREFIX}<step>):\n  " + "\n  ".join(failures)
        )

    def _layout_differences(self, step: int, abstract_params, abstract_opt_state) -> list[str]:
        """How the step's saved arrays differ from the abstract trees, read from its metadata:
        each params leaf by path and shape, the optimizer state by its leaves' shapes (orbax
        stores optax's named tuples as dicts, so only the shapes compare). [] where they agree
        or the metadata cannot be read (then `restore` finds out whether the step is damaged)."""
        try:
            saved = self._manager.item_metadata(step)
            saved_params, saved_opt = saved["params"].tree, saved["opt_state"].tree
        except Exception:  # noqa: BLE001 - unreadable metadata is the restore's to report
            return []

        def shapes(tree) -> dict[str, tuple]:
            flat = jax.tree_util.tree_flatten_with_path(tree)[0]
            return {jax.tree_util.keystr(p): tuple(getattr(x, "shape", ())) for p, x in flat}

        found, wanted = shapes(saved_params), shapes(abstract_params)
        differences = [
            f"params{k} saved {found.get(k, 'absent')}, expected {wanted.get(k, 'absent')}"
            for k in sorted(found.keys() | wanted.keys())
            if found.get(k) != wanted.get(k)
        ]
        found_opt = sorted(shapes(saved_opt).values())
        wanted_opt = sorted(shapes(abstract_opt_state).values())
        if found_opt != wanted_opt:
            differences.append(
                f"opt_state holds {len(found_opt)} arrays, this run's optimizer "
                f"{len(wanted_opt)} (of other shapes where the counts agree)"
            )
        return differences

    def _move_aside(self, step: int) -> str:
        """Renames a broken step directory so the manager no longer sees it; returns the path."""
        src = self.step_path(step)
        dst = os.path.join(self.directory, f"{CORRUPT_PREFIX}{step}")
        suffix = 0
        while os.path.exists(dst):  # an older corrupt copy of the same step
            suffix += 1
            dst = os.path.join(self.directory, f"{CORRUPT_PREFIX}{step}.{suffix}")
        os.rename(src, dst)
        self._manager.reload()
        return dst


def _verify(path: str, meta: dict, **trees) -> None:
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
        directory, options=options, item_handlers=_handlers(with_opt_state=False)
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
                _verify(spath, meta, params=params)
            except Exception as e:
                msg = e if isinstance(e, CheckpointError) else _cause(e)
                failures.append(f"checkpoint {spath} cannot be loaded: {msg}")
                logging.error("%s", failures[-1])
                continue
            if failures:
                logging.warning("Loaded the older checkpoint %s instead", spath)
            return model, params, meta
    raise CheckpointError("\n".join(failures))


def _cause(e: Exception, limit: int = 300) -> str:
    """`Type: message` of an orbax/TensorStore error, cut to its first line: their messages
    append the whole TensorStore spec (80 lines of JSON), which the chained traceback keeps."""
    lines = str(e).strip().splitlines()
    first = lines[0].split(" See full TensorStore details")[0] if lines else ""
    if len(first) > limit:
        first = first[: limit - 3] + "..."
    return f"{type(e).__name__}: {first}"


def load_params(path: str, step: int | None = None):
    """The parameters of `load_model(path, step)` (see there)."""
    return load_model(path, step)[1]
