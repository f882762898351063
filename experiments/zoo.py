"""Finding the trained zoo models for later experiments (benchmarks, notebooks).

    from experiments import zoo
    target, tparams, _ = zoo.load("target")                      # python corpus
    draft, dparams, _ = zoo.load("draft_m", distill="target")    # distilled from scratch
    draft, dparams, _ = zoo.load("draft_m", distill="target", init="data")  # fine-tuned
    bigram, bparams = zoo.load_ngram(2)
    dirs = zoo.tiny_pair_model_dirs()  # leviathan2023.py:tiny's trained target and distilled draft

Models are looked up in the model cache under the fingerprint of the config that trains them
(`configs/train.py`), so a changed recipe never silently loads stale weights: it reports the
command that trains the missing model instead.
"""

from __future__ import annotations

import os

from configs import train as train_config
from specjax import checkpoint
from specjax.data.corpora import load_corpus_info
from specjax.training import ngrams, zoo


def _options(model: str, corpus: str, distill, objective, init) -> str:
    arg = f"model={model},corpus={corpus}"
    if distill:
        arg += f",distill={distill},objective={objective}" + (f",init={init}" if init else "")
    return arg


def run_config(model: str, corpus: str = "python", distill=None, objective="tv", init=""):
    """The train-mode ConfigDict of a zoo model (as `configs/train.py:<options>` builds it)."""
    return train_config.get_config(_options(model, corpus, distill, objective, init))


def train_command(model: str, corpus: str = "python", distill=None, objective="tv", init="") -> str:
    """The shell command that trains this zoo model."""
    config = run_config(model, corpus, distill, objective, init)
    arg = _options(model, corpus, distill, objective, init)
    return (
        f"python -m experiments.main --config=configs/train.py:{arg} --workdir=runs/{config.name}"
    )


def model_dir(model: str, corpus: str = "python", distill=None, objective="tv", init="") -> str:
    """The cache directory the zoo model is exported to."""
    return zoo.model_cache_dir(run_config(model, corpus, distill, objective, init).to_dict())


def load(model: str, corpus: str = "python", distill=None, objective: str = "tv", init: str = ""):
    """Loads a trained zoo model.

    Args:
      model: a size of `specjax.training.zoo.MODEL_SIZES`.
      corpus: "python" or "shakespeare".
      distill: None for the data-trained model; a target size for the distilled draft.
      objective: the distillation objective (with `distill`).
      init: "data" for the distillation that fine-tunes the data-trained draft; "" from scratch.

    Returns:
      (TransformerLM, params, meta).

    Raises:
      FileNotFoundError: not trained yet; the message holds the command that trains it.
    """
    path = model_dir(model, corpus, distill, objective, init)
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"{model} ({corpus}{', distilled' if distill else ''}) is not in the model cache "
            f"({path}); train it with:\n  {train_command(model, corpus, distill, objective, init)}"
        )
    return checkpoint.load_model(path)


def load_ngram(order: int, corpus: str = "python"):
    """Loads the unigram (order 1) or bigram (order 2) draft of a corpus' training split.

    Returns:
      (NgramLM, params).
    """
    if order not in ngrams.NAMES:
        raise ValueError(f"order must be 1 or 2, got {order!r}")
    fingerprint = load_corpus_info(corpus, "train").fingerprint
    path = os.path.join(ngrams.ngram_cache_dir(corpus, fingerprint), f"{ngrams.NAMES[order]}.npz")
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"no {ngrams.NAMES[order]} table at {path}; any zoo run on {corpus} writes it, e.g.\n"
            f"  {train_command('draft_s', corpus)}"
        )
    return ngrams.load_ngram(path)


# The tiny pipeline, which trains (and caches) the models `tiny_pair_model_dirs` names.
TINY_PIPELINE = (
    "python -m experiments.main --config=configs/leviathan2023.py:tiny --workdir=runs/lev-tiny"
)


def tiny_pair_model_dirs() -> dict:
    """Where the tiny pipeline (`TINY_PIPELINE`) caches its trained target and distilled draft.

    Returns:
      {"target": dir, "draft": dir}: the model-cache directories of `mini_target` and
      `mini_draft_distilled` (python corpus) of configs/leviathan2023.py:tiny. They exist once
      `TINY_PIPELINE` has run on this machine (with this SPECJAX_CACHE); load them with
      `specjax.checkpoint.load_model(dir)`.
    """
    # Imported here: the pipeline's training configs are only needed to find the cache keys.
    from configs import leviathan2023 as lev_config
    from experiments.common import models as lev_models

    lev = lev_config.get_config("tiny")
    target_cfg = lev_models.train_config(lev.target, lev)
    draft_cfg = lev_models.train_config("mini_draft", lev, distill_from=target_cfg)
    return {
        "target": zoo.model_cache_dir(target_cfg.to_dict()),
        "draft": zoo.model_cache_dir(draft_cfg.to_dict()),
    }
