"""Where the extension parts get their trained models: by pipeline name, per corpus.

A name the leviathan2023 pipeline knows ("mini_target", "mini_draft", "mini_draft_distilled",
"tiny_target", ...) resolves to that model trained on `corpus` (from the model cache, trained
first if absent: minutes for the mini models); any other name is a directory under the model
cache root (`specjax.training.zoo.cache_root()`), e.g. "mini_target-python-b1c5c50bde14".
"""

from __future__ import annotations

import os
import tempfile

from configs import leviathan2023 as lev_config
from experiments.leviathan2023 import models as lev_models
from specjax.training.zoo import cache_root

PIPELINE_NAMES = ("mini_target", "mini_draft", "mini_draft_distilled", "tiny_target", "tiny_draft")


def model_path(name: str, corpus: str, log=print, option: str = "target") -> str:
    """The exported model directory of `name` on `corpus`; errors name the config `option`."""
    if name in PIPELINE_NAMES:
        lev = lev_config.get_config(f"tiny,corpus={corpus}")
        return lev_models.model_dir(name, lev, os.path.join(tempfile.gettempdir(), "ext"), log)
    path = os.path.join(cache_root(), name)
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"{option}={name!r}: no such model; use one of {PIPELINE_NAMES} (trained on the "
            f"config's corpus if not cached) or a directory name under {cache_root()}"
        )
    return path
