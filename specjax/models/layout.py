"""Moving a transformer's params between weight layouts (`TransformerConfig.matmul`).

    model, params = with_matmul(model, params, "packed")   # for specjax's CPU kernels

Only the projections differ between layouts ("xla": q, k, v, out, gate, up, down kernels
[in..., out...]; "packed": qkv, out, gate_up, down kernels [ceil(out / 8), in, 8], see
`models/packed.py`); embeddings and norms are shared. The conversion is exact (a
permutation, a concatenation and zero padding), so a round trip returns the original values.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from specjax import kernels
from specjax.models.config import MATMULS
from specjax.models.packed import packed_block_params, xla_block_params


def convert_params(params, source_model, target_model):
    """Params of `source_model` laid out for `target_model` (configs equal but for `matmul`).

    Args:
      params: params of `source_model` (numpy or jax arrays).
      source_model, target_model: `TransformerLM`s whose configs differ at most in `matmul`.

    Returns:
      A params tree for `target_model`, in the array module of the input leaves.
    """
    src_cfg, dst_cfg = source_model.config, target_model.config
    if src_cfg.replace(matmul=dst_cfg.matmul) != dst_cfg:
        raise ValueError(
            "convert_params changes only the weight layout (TransformerConfig.matmul); the two "
            f"configs differ elsewhere: {src_cfg} vs {dst_cfg}"
        )
    if src_cfg.matmul == dst_cfg.matmul:
        return params
    xp = np if all(isinstance(x, np.ndarray) for x in jax.tree.leaves(params)) else jnp
    to_packed = dst_cfg.matmul == "packed"
    block = packed_block_params if to_packed else xla_block_params
    out = {}
    for name, value in params.items():
        if name.startswith("block_"):
            out[name] = block(dst_cfg, value, xp)
        elif name == "embed" and dst_cfg.tie_embeddings:
            table = value["embedding"]
            vocab = dst_cfg.vocab_size
            packed = kernels.pack(table.T, xp) if to_packed else kernels.unpack(table, vocab, xp).T
            out[name] = {"embedding": packed}
        elif name == "head":
            kernel = value["kernel"]
            vocab = dst_cfg.vocab_size
            out[name] = {
                "kernel": kernels.pack(kernel, xp)
                if to_packed
                else kernels.unpack(kernel, vocab, xp)
            }
        else:
            out[name] = value
    return out


def default_matmul(dtype: str = "float32") -> str:
    """The layout that decodes fastest here: "packed" for float32 where specjax's kernels run
    (a CPU backend with the compiled kernels), else "xla" (accelerators, bfloat16)."""
    return "packed" if dtype == "float32" and kernels.available() else "xla"


def resolve_matmul(matmul: str, dtype: str = "float32") -> str:
    """`matmul` checked, with "auto" resolved by `default_matmul(dtype)`."""
    if matmul == "auto":
        return default_matmul(dtype)
    if matmul not in MATMULS:
        raise ValueError(f"matmul must be 'auto' or one of {MATMULS}, got {matmul!r}")
    return matmul


def with_matmul(model, params, matmul: str):
    """(model, params) in the weight layout `matmul` ("xla" or "packed").

    Args:
      model: a `TransformerLM`, or a model with its own `with_matmul(params, matmul)` (an
        `EagleHead`), which this hands over to.
      params: its params.
      matmul: the layout wanted (`TransformerConfig.matmul`).

    Returns:
      (the model with `config.matmul = matmul`, its params).
    """
    if callable(getattr(model, "with_matmul", None)):
        return model.with_matmul(params, matmul)
    if matmul not in MATMULS:
        raise ValueError(f"matmul must be one of {MATMULS}, got {matmul!r}")
    target = type(model)(model.config.replace(matmul=matmul))
    return target, convert_params(params, model, target)
