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

Modules: `format` (the layout's names, errors, checksums, the model config as JSON),
`checkpointer` (`Checkpointer`, for training runs), `export` (`export_model`, `load_model`,
`load_params`). Import from here.
"""

from specjax.checkpoint.checkpointer import Checkpointer
from specjax.checkpoint.export import export_model, load_model, load_params
from specjax.checkpoint.format import (
    CHECKPOINT_SUBDIR,
    CORRUPT_PREFIX,
    CheckpointError,
    CheckpointMismatchError,
    model_config_from_dict,
    model_config_to_dict,
    tree_checksum,
)

__all__ = [
    "CHECKPOINT_SUBDIR",
    "CORRUPT_PREFIX",
    "CheckpointError",
    "CheckpointMismatchError",
    "Checkpointer",
    "export_model",
    "load_model",
    "load_params",
    "model_config_from_dict",
    "model_config_to_dict",
    "tree_checksum",
]
