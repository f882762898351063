"""Helpers shared by the GPT-2 and Llama converters: taking tensors by name, config fields.

Conversion is strict: every tensor the specjax model needs must be present with the expected
shape, and every tensor of the checkpoint must be used (apart from known non-parameter
buffers). A checkpoint of an architecture variant we do not model (extra norms, biases in
unexpected places) therefore fails loudly instead of loading into a silently different model.
"""

from __future__ import annotations

import numpy as np


class TensorSource:
    """The tensors of one checkpoint, addressed without the wrapper-model prefix.

    Attributes:
      tensors: {name without prefix: numpy array}.
      used: names already taken.
    """

    def __init__(self, tensors: dict, prefix: str, ignored_suffixes: tuple = ()):
        """Strips `prefix` (e.g. "model.") and drops non-parameter buffers.

        Args:
          tensors: {HF name: numpy array}.
          prefix: wrapper prefix present in some checkpoints and absent in others (a base
            model saved without its LM head has none).
          ignored_suffixes: names ending in one of these are buffers (causal masks, cached
            rotary frequencies), not parameters.
        """
        self.tensors = {}
        for name, value in tensors.items():
            if name.endswith(ignored_suffixes):
                continue
            self.tensors[name[len(prefix) :] if name.startswith(prefix) else name] = value
        self.used = set()

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def take(self, name: str, shape: tuple, dtype) -> np.ndarray:
        """Returns tensor `name` cast to `dtype` after checking its shape and values.

        Raises:
          ValueError: the tensor is missing, has another shape, or holds NaN or infinity (a
            damaged file: the model would compute NaN, or wrong text, from it).
        """
        if name not in self.tensors:
            raise ValueError(
                f"checkpoint lacks tensor {name!r} (has e.g. {sorted(self.tensors)[:8]})"
            )
        value = self.tensors[name]
        if tuple(value.shape) != tuple(shape):
            raise ValueError(
                f"checkpoint tensor {name!r} has shape {tuple(value.shape)}; the config implies "
                f"{tuple(shape)}"
            )
        self.used.add(name)
        out = np.asarray(value).astype(dtype, copy=False)
        check_finite_tensor(name, out)
        return out

    def check_all_used(self, architecture: str) -> None:
        """Raises ValueError naming the checkpoint tensors that no specjax parameter took."""
        unused = sorted(set(self.tensors) - self.used)
        if unused:
            raise ValueError(
                f"{len(unused)} checkpoint tensors have no place in specjax's {architecture} "
                f"model (an unsupported architecture variant?): {unused[:8]}"
            )


def check_finite_tensor(name: str, value: np.ndarray) -> None:
    """Raises ValueError naming checkpoint tensor `name` if it holds NaN or infinity.

    One pass: a float64 sum of float32 or bfloat16 weights (each below 3.4e38) cannot overflow,
    so it is non-finite exactly when an entry is; only then are the entries counted.
    """
    if value.dtype.kind != "f" and "float" not in value.dtype.name:  # ints: always finite
        return
    if np.isfinite(np.sum(value, dtype=np.float64)):
        return
    bad = int(np.count_nonzero(~np.isfinite(value.astype(np.float32))))
    raise ValueError(
        f"checkpoint tensor {name!r} holds {bad} NaN or infinite value(s) of {value.size}: the "
        "file is damaged or was saved from a diverged run"
    )


def head_params(src: TensorSource, cfg, embedding: np.ndarray) -> dict:
    """The output head's params: {} when tied, else {"head": {"kernel": [embed, vocab]}}.

    Args:
      src: the checkpoint's tensors.
      cfg: the TransformerConfig being built.
      embedding: [vocab, embed] the converted token embedding.

    Raises:
      ValueError: the config says tied but the checkpoint stores a different lm_head.weight.
    """
    shape = (cfg.vocab_size, cfg.embed_dim)
    if not cfg.tie_embeddings:
        return {"head": {"kernel": src.take("lm_head.weight", shape, cfg.weights_dtype).T}}
    # Some saves also store the tied copy; it may be dropped only if it is the embedding.
    if "lm_head.weight" in src:
        if not np.array_equal(src.take("lm_head.weight", shape, cfg.weights_dtype), embedding):
            raise ValueError(
                "config.json says tie_word_embeddings=true but lm_head.weight differs from the "
                "token embedding; set tie_word_embeddings=false in config.json"
            )
    return {}


def require_keys(hf_config: dict, keys: tuple, architecture: str) -> None:
    """Raises ValueError naming the first of `keys` the config.json lacks (not a KeyError)."""
    for key in keys:
        if key not in hf_config:
            raise ValueError(
                f"config.json lacks {key!r}, which a {architecture} config has (it needs "
                f"{', '.join(keys)}); is model_type right?"
            )


def require(hf_config: dict, key: str, expected, what: str) -> None:
    """Raises ValueError unless `hf_config.get(key, expected) == expected`.

    Args:
      hf_config: the parsed config.json.
      key: a field that specjax's model does not implement except at one value.
      expected: that value (also the default when the field is absent).
      what: a short explanation for the error message.
    """
    value = hf_config.get(key, expected)
    if value != expected:
        raise ValueError(
            f"config.json has {key}={value!r}; specjax supports only {key}={expected!r} ({what})"
        )


def first_id(value) -> int | None:
    """An id field that may be an int, a list of ints (Llama 3.1 EOS) or null -> int or None."""
    if isinstance(value, (list, tuple)):
        return int(value[0]) if value else None
    return None if value is None else int(value)
