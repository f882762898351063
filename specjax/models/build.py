"""Building models from config sections: one model config, random weights, a draft by kind.

    from specjax.models import build
    target, tparams = build.init_model(dict(num_layers=4, embed_dim=128, ...), 259, key)
    draft, dparams = build.build_draft("truncated:2", target, tparams)
    bigram, bparams = build.build_draft("bigram", target, tparams, tokens=corpus_tokens)

Loading trained weights is `specjax.checkpoint.load_model(path)` (a checkpoint carries its own
model config); this module stays below checkpoints and never reads files.
"""

from __future__ import annotations

import dataclasses

import jax

from specjax.models.config import TransformerConfig
from specjax.models.interface import init_params
from specjax.models.ngram import NgramLM, UniformLM, fit_ngram
from specjax.models.prompt_lookup import PromptLookupLM
from specjax.models.transformer import TransformerLM

FAMILIES = ("gpt2", "llama")
DRAFT_KINDS = (
    "transformer",
    "truncated:K",
    "bigram",
    "unigram",
    "uniform",
    "prompt_lookup",
    "self",
    "none",
)

# The parameters a truncated draft shares with its target besides the first K blocks.
_SHARED_TOP_LEVEL = frozenset({"embed", "final_norm", "pos_embed", "head"})


def model_config(
    fields, vocab_size: int, *, family: str = "gpt2", where: str = "config.model", **overrides
) -> TransformerConfig:
    """Builds a `TransformerConfig` from a config section's fields.

    Args:
      fields: mapping of `TransformerConfig` fields (num_layers, num_heads, embed_dim, mlp_dim,
        max_len, ...), optionally with "family" ("gpt2" or "llama") and "size" (a size's name:
        documentation only, dropped).
      vocab_size: the tokenizer's vocabulary size.
      family: the family when `fields` names none.
      where: the section's name in error messages ("config.target").
      **overrides: fields set on top of `fields` (e.g. max_len, dtype).

    Returns:
      The frozen model config.
    """
    fields = dict(fields)
    family = fields.pop("family", family)
    if family not in FAMILIES:
        raise ValueError(f"{where}.family must be one of {FAMILIES}, got {family!r}")
    fields.pop("size", None)
    fields.update(overrides)
    make = TransformerConfig.gpt2 if family == "gpt2" else TransformerConfig.llama
    return make(vocab_size, **fields)


def init_model(fields, vocab_size: int, key: jax.Array, **kwargs):
    """A `TransformerLM` built by `model_config` and its random parameters.

    Args:
      fields, vocab_size: as for `model_config`.
      key: PRNG key of the initialisation.
      **kwargs: `model_config`'s keyword arguments (family, where, overrides).

    Returns:
      (TransformerLM, params).
    """
    model = TransformerLM(model_config(fields, vocab_size, **kwargs))
    return model, init_params(model, key)


def truncated(target: TransformerLM, target_params, num_layers: int):
    """The target's first `num_layers` blocks with its embeddings, final norm and head.

    The draft shares the target's arrays (no copy); its config is the target's with fewer layers.

    Args:
      target: a `TransformerLM`.
      target_params: its parameters.
      num_layers: blocks kept, 1 <= num_layers <= the target's.

    Returns:
      (TransformerLM, params).
    """
    total = target.config.num_layers
    if not 1 <= num_layers <= total:
        raise ValueError(f"truncated:K needs 1 <= K <= {total}, got {num_layers}")
    draft = TransformerLM(dataclasses.replace(target.config, num_layers=num_layers))
    keep = {f"block_{i}" for i in range(num_layers)} | _SHARED_TOP_LEVEL
    return draft, {n: v for n, v in target_params.items() if n in keep}


def build_draft(
    kind: str,
    target,
    target_params,
    *,
    fields=None,
    key: jax.Array | None = None,
    tokens=None,
    smoothing: float = 0.1,
    max_ngram: int = 3,
    min_ngram: int = 1,
    where: str = "config.draft",
):
    """A draft model for `target` and its parameters.

    Args:
      kind: one of `DRAFT_KINDS`: "transformer" (random weights from `fields` and `key`),
        "truncated:K" (the target's first K blocks, shared weights), "bigram"/"unigram"
        (fitted on `tokens`), "uniform", "prompt_lookup" (`max_ngram` down to `min_ngram`),
        "self" (the target) or "none".
      target: the target model (its vocabulary is the draft's).
      target_params: its parameters.
      fields: the transformer draft's config fields (see `model_config`).
      key: PRNG key of the transformer draft's initialisation.
      tokens: 1-D token ids (or a list of documents) the n-gram drafts are fitted on.
      smoothing: additive smoothing of the n-gram fit.
      max_ngram, min_ngram: prompt lookup's n-gram lengths.
      where: the draft's config section, for error messages.

    Returns:
      (model, params), or None for "none".
    """
    vocab_size = target.vocab_size
    if kind == "none":
        return None
    if kind == "self":
        return target, target_params
    if kind.startswith("truncated:"):
        return truncated(target, target_params, int(kind.split(":", 1)[1]))
    if kind == "transformer":
        if fields is None or key is None:
            raise ValueError("a transformer draft needs its config fields and a PRNG key")
        return init_model(fields, vocab_size, key, where=where)
    if kind in ("bigram", "unigram"):
        if tokens is None:
            raise ValueError(f"a {kind} draft needs the tokens to fit it on")
        order = 2 if kind == "bigram" else 1
        return NgramLM(vocab_size, order), fit_ngram(tokens, vocab_size, order, smoothing)
    if kind == "uniform":
        return UniformLM(vocab_size), {}
    if kind == "prompt_lookup":
        return PromptLookupLM(vocab_size, max_ngram, min_ngram), {}
    raise ValueError(f"draft kind must be one of {DRAFT_KINDS}, got {kind!r}")
