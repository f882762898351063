"""Train mode: trains (or distills) one model of the zoo; see configs/train.py.

    python -m experiments.main --config=configs/train.py:model=draft_m --workdir=runs/draft_m-python

With the launcher's default workdir (runs/default) the run goes to runs/<config.name> instead,
so every model of the zoo gets its own directory without spelling it out.
"""

from __future__ import annotations

import json
import os

from absl import logging

from specjax.training.loop import train_and_evaluate

# experiments/main.py's --workdir default; replaced by runs/<config.name> here.
_LAUNCHER_DEFAULT_WORKDIR = os.path.join("runs", "default")


def resolve_workdir(config, workdir: str) -> str:
    """`workdir`, or runs/<config.name> when the launcher's default was left in place."""
    if os.path.normpath(workdir) == _LAUNCHER_DEFAULT_WORKDIR:
        return os.path.join("runs", config.name)
    return workdir


def run(config, workdir: str) -> dict:
    """Train mode entry point: trains, evaluates, checkpoints, exports; prints the summary.

    Args:
      config: from configs/train.py.
      workdir: run directory; an existing one is resumed from its latest checkpoint.

    Returns:
      The run summary (also in <workdir>/summary.json).
    """
    workdir = resolve_workdir(config, workdir)
    logging.info("workdir %s", workdir)
    summary = train_and_evaluate(config, workdir)
    print(json.dumps(summary, indent=1), flush=True)
    return summary
