"""Heads mode (`configs/heads.py`): build the feature data, train the head, report.

`run(config, workdir)` loads the target, builds (or loads the cached) self-distillation data and
trains the head with `specjax.training.head_run.train_head`, which resumes from `workdir`.
"""

from __future__ import annotations

import json
import os

import jax
import numpy as np
from absl import logging

from specjax.models import (
    EagleHead,
    MedusaHeads,
    TransformerConfig,
    TransformerLM,
    eagle3_layers,
    with_matmul,
)
from specjax.models.distilled_draft import DistilledDraft
from specjax.training.eagle import frequent_tokens
from specjax.training.features import FeatureData, generate_replies, score_features
from specjax.training.head_run import train_head

HEADS = ("eagle1", "eagle3", "medusa", "distilled")


def tiny_target(vocab: int = 29, seed: int = 0):
    """A random two-layer Llama-shaped target (tests, the `tiny` preset): (model, params)."""
    cfg = TransformerConfig(
        vocab_size=vocab, num_layers=2, num_heads=2, num_kv_heads=1, embed_dim=32, mlp_dim=64,
        max_len=128, norm="rmsnorm", positions="rope", mlp="swiglu", tie_embeddings=True,
    )  # fmt: skip
    model = TransformerLM(cfg)
    params = model.init_params(jax.random.PRNGKey(seed))
    # Logits larger than the 0.02 init gives, so the target's law is far from uniform.
    return model, jax.tree.map(lambda x: x * 8.0 if x.ndim == 2 else x, params)


def _tiny_data(model, params, config, layers: tuple = ()) -> FeatureData:
    """Replies of the tiny target to random token prompts, with their features (not cached;
    with `layers`, also those blocks' outputs, as an EAGLE-3 head reads them)."""
    rng = np.random.default_rng(config.data.seed)
    vocab = model.vocab_size
    sizes = rng.integers(2, 8, size=config.data.num_prompts)
    prompts = [rng.integers(1, vocab, size=int(n)) for n in sizes]
    seqs = generate_replies(
        model, params, prompts, max_new_tokens=config.data.max_new_tokens, temperature=1.0,
        seed=config.data.seed, eos_id=None, batch_size=config.data.batch_size, cache_len=64,
    )  # fmt: skip
    scored = score_features(model, params, seqs, layers=tuple(layers))
    feats, layer_feats = scored if layers else (scored, None)
    meta = {"fingerprint": f"tiny-{config.data.seed}-{config.data.num_prompts}"}
    if layers:
        meta["feature_layers"] = list(layers)
    return FeatureData.build(seqs, [len(p) for p in prompts], feats, meta, layer_feats)


def head_layers(config, model) -> tuple:
    """The target blocks an EAGLE-3 head reads: `config.feature_layers`, or EAGLE-3's low,
    middle and high (`eagle3_layers`, from 7 blocks on; a shallower target: its first, middle
    and last blocks, all of them up to three, e.g. both of the tiny two-layer target's); ()
    otherwise."""
    if config.head != "eagle3":
        return ()
    if config.get("feature_layers"):
        return tuple(int(i) for i in config.feature_layers)
    n = model.config.num_layers
    return eagle3_layers(n) if n >= 7 else tuple(sorted({0, (n - 1) // 2, n - 1}))


def load_target(name: str):
    """(model, params, tokenizer or None) of `config.target`."""
    if name == "tiny-random":
        return (*tiny_target(), None)
    from specjax.pretrained import load_pretrained

    return load_pretrained(name, "target")


def run(config, workdir: str) -> dict:
    """Trains the configured head (EAGLE-1, EAGLE-3, Medusa or a distilled draft); returns the
    run's summary (also in workdir/summary.json)."""
    if config.head not in HEADS:
        raise ValueError(f"config.head must be one of {HEADS}, got {config.head!r}")
    prompts_file = config.data.get("prompts_file", "")
    if prompts_file:  # a bad or leaking file fails before the target loads
        from experiments.heads.data import check_training_file

        check_training_file(prompts_file)
    model, params, tokenizer = load_target(config.target)
    layers = head_layers(config, model)
    if tokenizer is None:
        if prompts_file:
            raise ValueError(
                f"config.data.prompts_file={prompts_file!r}: the target {config.target!r} has "
                "no chat tokenizer to encode them (the tiny target trains on random ids)"
            )
        data = _tiny_data(model, params, config, layers)
    else:
        from experiments.heads.data import feature_data

        data = feature_data(
            model, params, tokenizer, num_prompts=config.data.num_prompts,
            max_new_tokens=config.data.max_new_tokens,
            temperatures=tuple(config.data.temperatures), seed=config.data.seed,
            batch_size=config.data.batch_size, layers=layers, prompts_file=prompts_file,
            prompt_set=config.data.get("prompt_set", "broad"), log=logging.info,
        )  # fmt: skip
    draft_ids = None
    if config.draft_vocab:
        if not 0 < config.draft_vocab <= model.vocab_size:
            raise ValueError(
                f"config.draft_vocab must be in [0, {model.vocab_size}], got {config.draft_vocab}"
            )
        draft_ids = tuple(frequent_tokens(data, config.draft_vocab).tolist())
    if config.head == "distilled":  # a model draft: trained in the "xla" layout
        if draft_ids is not None or config.train.reply_only:
            raise ValueError(
                "config.draft_vocab and config.train.reply_only: a distilled draft drafts over "
                "the full vocabulary and trains on every position (set both to 0/False)"
            )
        model, params = with_matmul(model, params, "xla")
        head = DistilledDraft(model, config.num_layers)
    elif config.head == "medusa":
        head = MedusaHeads(model, config.num_heads, draft_ids=draft_ids)
    else:
        head = EagleHead(model, draft_ids=draft_ids, feature_layers=layers)
    _, summary = train_head(head, params, data, workdir, log=logging.info, **dict(config.train))
    print(json.dumps({k: summary[k] for k in ("steps", "train_seconds", "final")}, indent=1))
    logging.info("head run in %s", os.path.abspath(workdir))
    return summary
