"""Loading Hugging Face checkpoints as specjax models, singly or as a draft/target pair.

    from specjax.convert import load_hf_model, load_hf_pair
    model, params, tokenizer = load_hf_model("/ckpt/gpt2")            # tokenizer may be None
    pair = load_hf_pair("/ckpt/Llama-3.1-8B", "/ckpt/Llama-3.2-1B")   # checks the vocabularies

Supported `model_type`s: gpt2, llama, mistral, qwen2 (see gpt2.py / llama.py for the mapping).
"""

from __future__ import annotations

import dataclasses
import warnings

import jax
import jax.numpy as jnp

from specjax.convert import checkpoint
from specjax.convert.gpt2 import gpt2_config, gpt2_params
from specjax.convert.llama import MODEL_TYPES as LLAMA_TYPES
from specjax.convert.llama import llama_config, llama_params
from specjax.convert.tokenizer import HFTokenizer, load_hf_tokenizer
from specjax.models.config import TransformerConfig
from specjax.models.transformer import TransformerLM

SUPPORTED_MODEL_TYPES = ("gpt2",) + LLAMA_TYPES


def _model_type(hf_config: dict) -> str:
    model_type = hf_config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"config.json has model_type={model_type!r}; specjax converts "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    return model_type


def config_from_hf(hf_config: dict, dtype: str = "float32") -> TransformerConfig:
    """The TransformerConfig of a parsed HF config.json.

    Args:
      hf_config: the parsed config.json.
      dtype: compute and parameter dtype ("float32" for exact parity, or "bfloat16").

    Returns:
      TransformerConfig.
    """
    if _model_type(hf_config) == "gpt2":
        return gpt2_config(hf_config, dtype)
    return llama_config(hf_config, dtype)


def params_from_hf(hf_config: dict, tensors: dict, dtype: str = "float32"):
    """Converts checkpoint tensors into specjax params.

    Args:
      hf_config: the parsed config.json.
      tensors: {HF tensor name: numpy array}.
      dtype: compute and parameter dtype.

    Returns:
      (TransformerConfig, params) with params as device arrays, checked against the shapes
      `TransformerLM(config).init_params` would produce.
    """
    cfg = config_from_hf(hf_config, dtype)
    if _model_type(hf_config) == "gpt2":
        params = gpt2_params(cfg, tensors)
    else:
        params = llama_params(cfg, tensors, hf_config)
    expected = jax.eval_shape(TransformerLM(cfg).init_params, jax.random.PRNGKey(0))
    got = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    if jax.tree.structure(got) != jax.tree.structure(expected) or got != expected:
        # A converter bug, not a user error: the tree must match the module exactly.
        raise AssertionError(f"converted params do not match TransformerLM({cfg})")
    return cfg, jax.tree.map(jnp.asarray, params)


def load_hf_model(path, dtype: str = "float32", tokenizer: bool = True):
    """Loads a local HF checkpoint directory as a specjax model.

    Args:
      path: directory with config.json and safetensors or PyTorch weights.
      dtype: compute and parameter dtype ("float32": logits within 1e-4 of HF's float32).
      tokenizer: also load the shipped tokenizer (needs `transformers` or `tokenizers`).

    Returns:
      (TransformerLM, params, HFTokenizer or None).
    """
    hf_config = checkpoint.read_config(path)
    cfg, params = params_from_hf(hf_config, checkpoint.read_tensors(path), dtype)
    tok = load_hf_tokenizer(path, hf_config) if tokenizer else None
    return TransformerLM(cfg), params, tok


def check_vocab_match(
    target_vocab_size: int,
    draft_vocab_size: int,
    target_tokenizer: HFTokenizer | None,
    draft_tokenizer: HFTokenizer | None,
) -> None:
    """Raises ValueError unless a draft and a target share one tokenizer.

    Speculative decoding compares token ids: id i must mean the same string to both models,
    and both output layers must have the same number of rows. specjax does not translate
    between vocabularies (Hugging Face's "universal assisted generation" re-tokenizes text
    between different tokenizers; that is lossy in general and not implemented here).

    Args:
      target_vocab_size, draft_vocab_size: rows of each model's output layer.
      target_tokenizer, draft_tokenizer: the shipped tokenizers, or None (then only the sizes
        are checked, with a warning).
    """
    if target_vocab_size != draft_vocab_size:
        raise ValueError(
            f"draft/target vocabulary mismatch: the target's output layer has "
            f"{target_vocab_size} rows, the draft's {draft_vocab_size}. Speculative decoding "
            "needs one shared tokenizer and equal vocab_size (pick a draft from the target's "
            "family, e.g. Llama-3.2-1B for Llama-3.1-8B, or gpt2 for gpt2-xl); checkpoints "
            "whose tokenizers agree but whose embedding tables are padded to different sizes "
            "are not supported either"
        )
    if target_tokenizer is None or draft_tokenizer is None:
        warnings.warn(
            "cannot compare draft and target tokenizers (one is missing or no tokenizer "
            "package is installed); only vocab_size was checked",
            stacklevel=2,
        )
        return
    # id -> string on each side; an id absent on one side (None) differs too.
    t_strings = {i: s for s, i in target_tokenizer.vocab().items()}
    d_strings = {i: s for s, i in draft_tokenizer.vocab().items()}
    differ = [
        i for i in sorted(set(t_strings) | set(d_strings)) if t_strings.get(i) != d_strings.get(i)
    ]
    if differ:
        examples = ", ".join(
            f"id {i}: target {t_strings.get(i)!r} vs draft {d_strings.get(i)!r}" for i in differ[:3]
        )
        raise ValueError(
            f"draft/target tokenizer mismatch: {len(differ)} token ids mean different strings "
            f"({examples}). Both output layers have {target_vocab_size} rows, but drafted ids "
            "would be scored as other tokens; use a draft trained with the target's tokenizer"
        )


@dataclasses.dataclass(frozen=True)
class HFPair:
    """A converted draft/target pair with a checked shared vocabulary.

    Attributes:
      target, draft: TransformerLM models.
      target_params, draft_params: their params.
      tokenizer: the target's tokenizer (the draft's is identical) or None.
    """

    target: TransformerLM
    target_params: dict
    draft: TransformerLM
    draft_params: dict
    tokenizer: HFTokenizer | None


def load_hf_pair(target_path, draft_path, dtype: str = "float32") -> HFPair:
    """Loads a target and a draft checkpoint after checking they share a tokenizer.

    The vocabulary check runs on config.json and the tokenizer files before any weights are
    read, so a mismatched pair fails fast.

    Args:
      target_path, draft_path: local checkpoint directories.
      dtype: compute and parameter dtype of both models.

    Returns:
      HFPair.
    """
    t_cfg, d_cfg = checkpoint.read_config(target_path), checkpoint.read_config(draft_path)
    t_tok = load_hf_tokenizer(target_path, t_cfg)
    d_tok = load_hf_tokenizer(draft_path, d_cfg)
    check_vocab_match(t_cfg["vocab_size"], d_cfg["vocab_size"], t_tok, d_tok)
    target, t_params, _ = load_hf_model(target_path, dtype, tokenizer=False)
    draft, d_params, _ = load_hf_model(draft_path, dtype, tokenizer=False)
    return HFPair(target, t_params, draft, d_params, t_tok)
