"""The experiments' trained models: train them (or reuse cached weights), fit n-grams, load.

The leviathan2023 pipeline's models, which the trees, sequoia2024, extensions and lossy
experiments and the generate mode reuse. Transformer weights come from specjax's training loop
and are cached by their training config (`specjax.training.zoo.model_cache_dir`), so a second
run only loads them. `model_path` resolves a model by pipeline name or model-cache directory
name; a distilled draft's data-trained base is trained (or loaded) before it.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from configs import leviathan2023 as lev_config
from configs import train as train_configs
from specjax.checkpoint import load_model
from specjax.data import load_corpus
from specjax.data.tokenizer import ByteTokenizer
from specjax.models.ngram import NgramLM, fit_ngram
from specjax.training import zoo
from specjax.training.loop import train_and_evaluate

DISTILLED_SUFFIX = "_distilled"


def train_config(size: str, config, distill_from=None):
    """The configs/train.py config of one pipeline model.

    A distilled draft starts from the same-size draft trained on data and is fine-tuned against
    the target with the total-variation objective (aimed at α) for a third of its steps: from
    scratch, distillation lost to data training at equal steps (experiments/leviathan2023/README).

    Args:
      size: a zoo size or one of `MINI_SIZES`.
      config: the pipeline config.
      distill_from: the target's train config when distilling, else None.

    Returns:
      A ConfigDict for `train_and_evaluate`.
    """
    mini = size in lev_config.MINI_SIZES
    base = "draft_s" if mini else size
    cfg = train_configs.get_config(f"model={base},corpus={config.corpus}")
    if mini:
        cfg.model.size = size
        for key, value in lev_config.MINI_SIZES[size].items():
            cfg.model[key] = value
        cfg.num_steps = config.mini_steps
        cfg.data.seq_len = config.mini_seq_len
        cfg.model.max_len = config.cache_len
        cfg.eval_every = max(cfg.num_steps // 3, 1)
        cfg.checkpoint_every = 100
        cfg.name = f"{size}-{config.corpus}"
        cfg.optim.peak_lr = 3e-3
    cfg.export = True
    cfg.ngrams = False
    if distill_from is not None:
        data_trained = train_config(size, config)
        cfg.distill.target = zoo.model_cache_name(distill_from.to_dict())
        cfg.distill.objective = "tv"
        cfg.distill.init = zoo.model_cache_name(data_trained.to_dict())
        cfg.num_steps = max(data_trained.num_steps // 3, 1)
        cfg.optim.warmup_steps = min(cfg.optim.warmup_steps, cfg.num_steps - 1)
        cfg.name = f"{cfg.name.split('-')[0]}-distill_tv_ft-{config.corpus}"
    return cfg


def ensure_model_dir(cfg, workdir: str, log=print) -> str:
    """The directory of the exported weights of `cfg`, training them first if not cached.

    The directory loads with `specjax.checkpoint.load_model` or
    `specjax.Pipeline.from_pretrained`.
    """
    cache_dir = zoo.model_cache_dir(cfg.to_dict())
    with zoo.cache_lock(cache_dir):  # another process training this model: wait for its export
        if os.path.isdir(cache_dir):
            log(f"  {cfg.name}: cached weights {cache_dir}")
            return cache_dir
        log(f"  {cfg.name}: training {cfg.num_steps} steps (resumable in {workdir}) ...")
        summary = train_and_evaluate(cfg, os.path.join(workdir, "train", cfg.name))
    if summary.get("stopped"):
        raise RuntimeError(f"training of {cfg.name} stopped early: {summary['stopped']}")
    evaluation = summary.get("eval", {})
    log(
        f"  {cfg.name}: trained in {summary['train_seconds']:.0f} s, "
        f"val bits/byte {evaluation.get('bits_per_byte', float('nan')):.3f}"
    )
    return summary["export_dir"]


def ensure_model(cfg, workdir: str, log=print):
    """Loads the exported weights of `cfg`, training them first if they are not cached.

    Returns:
      (TransformerLM, params, meta).
    """
    return load_model(ensure_model_dir(cfg, workdir, log))


def load_all(config, workdir: str, log=print) -> dict:
    """Every model the pipeline needs.

    Returns:
      {"target": (model, params, meta), "drafts": {name: (model, params, info)}}.
    """
    drafts_wanted = list(config.drafts)
    target_cfg = train_config(config.target, config)
    out = {"target": ensure_model(target_cfg, workdir, log), "drafts": {}}
    train_tokens = None
    for name in drafts_wanted:
        if name in ("unigram", "bigram"):
            if train_tokens is None:
                train_tokens = np.asarray(load_corpus(config.corpus, "train", ByteTokenizer()))
            order = 1 if name == "unigram" else 2
            params = fit_ngram(train_tokens, ByteTokenizer().vocab_size, order)
            out["drafts"][name] = (NgramLM(ByteTokenizer().vocab_size, order), params, {})
            log(f"  {name}: fitted on {train_tokens.size} training tokens")
            continue
        out["drafts"][name] = load_model(model_dir(name, config, workdir, log))
    return out


def model_dir(name: str, config, workdir: str, log=print) -> str:
    """The exported weights of one of the pipeline's transformers, trained first if not cached.

    Args:
      name: `config.target`, or a transformer draft of `config.drafts` ("<size>" or
        "<size>_distilled", distilled from `config.target`, fine-tuned from "<size>", which is
        trained first if it is not cached).
      config: the pipeline config.
      workdir: where training runs keep their checkpoints.

    Returns:
      A directory for `specjax.checkpoint.load_model` or `specjax.Pipeline.from_pretrained`.
    """
    distill = name.endswith(DISTILLED_SUFFIX)
    size = name[: -len(DISTILLED_SUFFIX)] if distill else name
    target_cfg = None
    if distill:  # fine-tuned from the data-trained draft of its size: that one first
        model_dir(size, config, workdir, log)
        target_cfg = train_config(config.target, config)
    return ensure_model_dir(train_config(size, config, distill_from=target_cfg), workdir, log)


# Names `model_path` resolves through the leviathan2023 pipeline (trained on the asked corpus).
PIPELINE_NAMES = ("mini_target", "mini_draft", "mini_draft_distilled", "tiny_target", "tiny_draft")


def model_path(name: str, corpus: str, log=print, option: str = "target") -> str:
    """The exported model directory of `name` on `corpus`; errors name the config `option`.

    A name the leviathan2023 pipeline knows (`PIPELINE_NAMES`) resolves to that model trained on
    `corpus` (from the model cache, trained first if absent: minutes for the mini models); any
    other name is a directory under the model cache root (`specjax.training.zoo.cache_root()`),
    e.g. "mini_target-python-b1c5c50bde14".
    """
    if name in PIPELINE_NAMES:
        lev = lev_config.get_config(f"tiny,corpus={corpus}")
        return model_dir(name, lev, os.path.join(tempfile.gettempdir(), "ext"), log)
    path = os.path.join(zoo.cache_root(), name)
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"{option}={name!r}: no such model; use one of {PIPELINE_NAMES} (trained on the "
            f"config's corpus if not cached) or a directory name under {zoo.cache_root()}"
        )
    return path
