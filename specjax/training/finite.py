"""A diverged run stops before it saves: non-finite metrics or parameters raise, by name.

A learning rate too high (or a NaN in a loss weight) turns the loss and then every parameter
into NaN. A loop that went on would write NaN checkpoints, and with keep-last-N they push the
last good ones out: the run's progress is lost, and the exit status says it succeeded. The
training loops call these checks where they already read values on the host (each logged
record) and before each save, so a healthy run pays no extra synchronisation per step.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np


class TrainingDivergedError(ValueError):
    """The loss or the parameters stopped being finite; nothing was saved at that step."""


def _advice(step: int, checkpoints: str) -> str:
    return (
        f"at step {step}; nothing was saved there, and the checkpoints in {checkpoints} are as "
        "they were: resume from the last one with a lower learning rate (or fix the loss), or "
        "start again in a new workdir"
    )


# The logged values a diverged run turns non-finite. Others may be NaN in a healthy run (a
# ratio over a batch without the tokens it counts); the parameters are checked at every save.
WATCHED = ("loss", "grad_norm")


def check_finite_record(record: dict, step: int, checkpoints: str) -> None:
    """Raises TrainingDivergedError if a logged loss or gradient norm is NaN or infinite."""
    bad = [k for k in WATCHED if k in record and not math.isfinite(float(record[k]))]
    if bad:
        shown = ", ".join(f"{k} = {record[k]}" for k in bad)
        raise TrainingDivergedError(f"training diverged ({shown}) {_advice(step, checkpoints)}")


def check_finite_params(params, step: int, checkpoints: str) -> None:
    """Raises TrainingDivergedError naming the first parameter that holds NaN or inf."""
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        value = np.asarray(jax.device_get(leaf))
        floating = jnp.issubdtype(value.dtype, jnp.floating)
        if floating and not np.isfinite(value.astype(np.float32)).all():
            name = jax.tree_util.keystr(path)
            raise TrainingDivergedError(
                f"training diverged: parameter {name} holds NaN or inf {_advice(step, checkpoints)}"
            )
