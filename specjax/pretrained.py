"""Loading a model and its tokenizer from a local path: a specjax run/export or an HF directory.

    model, params, tokenizer = load_pretrained("/ckpt/target")

A directory with a `config.json` is a Hugging Face checkpoint (converted by `specjax.convert`,
its own tokenizer; needs the `[hf]` extra). Anything else is a specjax training run, its
`checkpoints` directory or an exported model (`specjax.checkpoint.load_model`), tokenized by
the byte tokenizer. Nothing is downloaded: paths must exist on this machine.
"""

from __future__ import annotations

import os

from specjax.data.tokenizer import ByteTokenizer

HF_CONFIG = "config.json"


def is_hf_directory(path: str) -> bool:
    """True if `path` is a Hugging Face checkpoint directory (it has a config.json)."""
    return os.path.isfile(os.path.join(path, HF_CONFIG))


def check_path(path, name: str) -> str:
    """`path` as a string after checking it exists; the error names the argument `name`."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a local path (str), got {type(path).__name__}")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{name}={path!r} does not exist; give a specjax training run's workdir, its "
            "checkpoints directory, an exported model (e.g. under ~/.cache/specjax/models) or a "
            "local Hugging Face checkpoint directory (nothing is downloaded)"
        )
    return path


def load_pretrained(path, name: str = "path", *, dtype: str = "float32", step=None):
    """Loads one model for inference.

    Args:
      path: a specjax run/checkpoints/export directory or a local HF checkpoint directory.
      name: the argument's name, for error messages ("target", "draft").
      dtype: parameter/compute dtype of a converted HF model (specjax models keep their own).
      step: a specjax checkpoint step (None: the newest good one); ignored for HF directories.

    Returns:
      (model, params, tokenizer): tokenizer is a `ByteTokenizer` for specjax models, the
      checkpoint's `HFTokenizer` for HF directories, or None when an HF directory ships none.
    """
    path = check_path(path, name)
    if is_hf_directory(path):
        from specjax.convert import load_hf_model  # optional dependency: the [hf] extra

        return load_hf_model(path, dtype)
    from specjax.checkpoint import load_model  # orbax: only needed when a checkpoint loads

    model, params, _ = load_model(path, step)
    return model, params, ByteTokenizer()


def load_pretrained_pair(target, draft, *, dtype: str = "float32", step=None):
    """Loads a target and (optionally) a draft; two HF directories are checked for one tokenizer.

    Args:
      target: path of the target.
      draft: path of the draft, or None.
      dtype, step: as for `load_pretrained` (step applies to both specjax checkpoints).

    Returns:
      (target, target_params, draft, draft_params, tokenizer) with draft, draft_params None
      when no draft is given; the tokenizer is the target's.
    """
    target = check_path(target, "target")
    if draft is None:
        model, params, tokenizer = load_pretrained(target, "target", dtype=dtype, step=step)
        return model, params, None, None, tokenizer
    draft = check_path(draft, "draft")
    if is_hf_directory(target) and is_hf_directory(draft):
        from specjax.convert import load_hf_pair  # checks the tokenizers before the weights

        pair = load_hf_pair(target, draft, dtype)
        return pair.target, pair.target_params, pair.draft, pair.draft_params, pair.tokenizer
    t_model, t_params, tokenizer = load_pretrained(target, "target", dtype=dtype, step=step)
    d_model, d_params, _ = load_pretrained(draft, "draft", dtype=dtype, step=step)
    return t_model, t_params, d_model, d_params, tokenizer
