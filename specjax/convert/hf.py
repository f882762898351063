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
    cfg, params = host_params_from_hf(hf_config, tensors, dtype)
    return cfg, jax.tree.map(jnp.asarray, params)


def host_params_from_hf(hf_config: dict, tensors: dict, dtype: str = "float32"):
    """`params_from_hf` with the params left as host (numpy) arrays.

    For loaders that still reshape the params (`with_matmul`'s packed layout): numpy does it
    in a fraction of the time eager jax ops take, and the params then move to the device once.
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
    return cfg, params


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

    Speculative decoding compares token ids: id i must mean the same string to both models.
    specjax does not translate between vocabularies (Hugging Face's "universal assisted
    generation" re-tokenizes text between different tokenizers; not implemented here).
    Output layers of different sizes are accepted when both tokenizers are present, identical,
    and fit in both (Qwen2.5 pads its tables to 151936 or 152064 rows around one tokenizer):
    `load_hf_pair` then resizes the draft's table, which changes only the proposals.

    Args:
      target_vocab_size, draft_vocab_size: rows of each model's output layer.
      target_tokenizer, draft_tokenizer: the shipped tokenizers, or None (then only the sizes
        are checked, with a warning).
    """
    if target_tokenizer is None or draft_tokenizer is None:
        if target_vocab_size != draft_vocab_size:
            raise ValueError(
                f"draft/target vocabulary mismatch: the target's output layer has "
                f"{target_vocab_size} rows, the draft's {draft_vocab_size}, and without both "
                "tokenizers (checkpoint tokenizer files plus `transformers` or `tokenizers`) "
                "specjax cannot tell padded tables of one tokenizer from different tokenizers. "
                "Speculative decoding needs one shared tokenizer: pick a draft from the "
                "target's family (e.g. Llama-3.2-1B for Llama-3.1-8B, gpt2 for gpt2-xl)"
            )
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
            f"({examples}). Drafted ids would be scored as other tokens; speculative decoding "
            "needs a draft trained with the target's tokenizer"
        )
    largest = max(t_strings)
    if largest >= min(target_vocab_size, draft_vocab_size):
        raise ValueError(
            f"the shared tokenizer has ids up to {largest}, but the output layers have "
            f"{target_vocab_size} (target) and {draft_vocab_size} (draft) rows"
        )


def resize_vocab(model: TransformerLM, params: dict, vocab_size: int):
    """A model whose embedding and head have `vocab_size` rows (zero rows added or cut).

    For a draft only: the target's distribution is untouched and speculative sampling is
    lossless for any proposal distribution, so extra zero rows (logit 0 for ids the tokenizer
    never produces) or dropped padding rows change acceptance, never the output.

    Args:
      model: the draft.
      params: its params.
      vocab_size: the target's vocab_size.

    Returns:
      (TransformerLM, params) of the resized draft.
    """
    old = model.vocab_size

    def fit(table, axis):  # table has `old` entries along `axis`
        if vocab_size <= old:
            return jax.lax.slice_in_dim(table, 0, vocab_size, axis=axis)
        pad = [(0, 0)] * table.ndim
        pad[axis] = (0, vocab_size - old)
        return jnp.pad(table, pad)

    params = dict(params)
    params["embed"] = {"embedding": fit(params["embed"]["embedding"], 0)}  # [vocab, embed]
    if "head" in params:
        params["head"] = {"kernel": fit(params["head"]["kernel"], 1)}  # [embed, vocab]
    return TransformerLM(dataclasses.replace(model.config, vocab_size=vocab_size)), params


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

    The vocabulary check (`check_vocab_match`) runs on config.json and the tokenizer files
    before any weights are read, so a mismatched pair fails fast. A draft whose table is padded
    to another size around the same tokenizer is resized to the target's (`resize_vocab`).

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
    if draft.vocab_size != target.vocab_size:
        draft, d_params = resize_vocab(draft, d_params, target.vocab_size)
    return HFPair(target, t_params, draft, d_params, t_tok)
