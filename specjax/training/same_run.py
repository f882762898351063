"""A resumed run must be the run that wrote its checkpoint: the settings that differ, named.

`check_same_run` guards `train_and_evaluate` (the weight-relevant fields of a model or
distillation config, `zoo.fingerprint_fields`), `check_same_head_run` a head run (`head_run`:
all its settings); `config_diffs` is the comparison both make.
"""

from __future__ import annotations

from specjax.training import zoo


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def config_diffs(saved: dict, current: dict) -> list[str]:
    """ "key: <saved> in the checkpoint, <current> now" for every key whose values differ."""
    return [
        f"{k}: {saved.get(k, '<absent>')!r} in the checkpoint, {current.get(k, '<absent>')!r} now"
        for k in sorted(set(saved) | set(current))
        if saved.get(k) != current.get(k)
    ]


def check_same_run(saved_config: dict, config_dict: dict, path: str) -> None:
    """Raises ValueError if a checkpoint's config differs from ours in a weight-relevant field.

    Args:
      saved_config: the config stored in the checkpoint's meta.
      config_dict: the current run's config as a dict.
      path: the checkpoint path (for the message).
    """
    diffs = config_diffs(
        _flatten(zoo.fingerprint_fields(saved_config)),
        _flatten(zoo.fingerprint_fields(config_dict)),
    )
    if diffs:
        raise ValueError(
            f"checkpoint {path} was written by a different configuration:\n  "
            + "\n  ".join(diffs)
            + "\nUse another --workdir, or restore the old configuration to resume."
        )


def check_same_head_run(saved: dict, current: dict, path: str) -> None:
    """ValueError naming every setting where a head checkpoint's run differs from this one
    (`head_run`: every setting counts, the data's fingerprint among them)."""
    diffs = config_diffs(saved, current)
    if diffs:
        raise ValueError(
            f"checkpoint {path} was written by a different head run:\n  "
            + "\n  ".join(diffs)
            + "\nUse another workdir, or the old settings to resume."
        )
