"""`Checkpointer`: a training run's checkpoints, kept N deep, resumed from the newest good step.

See the package docstring (`specjax/checkpoint/__init__.py`) for the directory layout and what
happens to a damaged or mismatched step.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import orbax.checkpoint as ocp
from absl import logging

from specjax.checkpoint.format import (
    CORRUPT_PREFIX,
    CheckpointError,
    CheckpointMismatchError,
    error_cause,
    item_handlers,
    tree_checksum,
    verify_checksums,
)


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
            self.directory, options=options, item_handlers=item_handlers()
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
            raise CheckpointError(f"checkpoint {path} cannot be read: {error_cause(e)}") from e
        params, opt_state, meta = restored["params"], restored["opt_state"], restored["meta"]
        verify_checksums(path, meta, params=params, opt_state=opt_state)
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
