"""Reading a local Hugging Face checkpoint directory: config.json and the weight files.

Supported layouts (what `save_pretrained` writes and what the hub serves):
  model.safetensors                       one safetensors file
  model.safetensors.index.json + shards   sharded safetensors
  pytorch_model.bin                       one PyTorch pickle (needs torch)
  pytorch_model.bin.index.json + shards   sharded PyTorch pickles
Safetensors are preferred when both exist. Nothing is ever downloaded: `path` must be a local
directory (`huggingface-cli download ... --local-dir DIR` gives one).
"""

from __future__ import annotations

import json
import os

import numpy as np

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_BIN = "pytorch_model.bin"
TORCH_BIN_INDEX = "pytorch_model.bin.index.json"


def check_dir(path) -> str:
    """Returns `path` as a string after checking it is a checkpoint directory with a config.

    Raises:
      ValueError: `path` is not a directory or lacks config.json.
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise ValueError(
            f"Hugging Face checkpoint path {path!r} is not a local directory; specjax never "
            "downloads weights: fetch them first (e.g. `huggingface-cli download NAME "
            "--local-dir DIR`) and pass DIR"
        )
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ValueError(f"Hugging Face checkpoint directory {path!r} has no config.json")
    return path


def read_config(path) -> dict:
    """Reads config.json of a checkpoint directory.

    Args:
      path: local checkpoint directory.

    Returns:
      The config as a plain dict.
    """
    path = check_dir(path)
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        return json.load(f)


def weight_files(path) -> list[str]:
    """The weight files of a checkpoint directory, safetensors first.

    Args:
      path: local checkpoint directory.

    Returns:
      Absolute file paths (one file, or every shard of an index).

    Raises:
      ValueError: no supported weight file is present.
    """
    path = check_dir(path)
    for single, index in ((SAFETENSORS, SAFETENSORS_INDEX), (TORCH_BIN, TORCH_BIN_INDEX)):
        if os.path.isfile(os.path.join(path, single)):
            return [os.path.join(path, single)]
        if os.path.isfile(os.path.join(path, index)):
            with open(os.path.join(path, index), encoding="utf-8") as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
            return [os.path.join(path, shard) for shard in shards]
    raise ValueError(
        f"no weights in {path!r}: expected one of {SAFETENSORS}, {SAFETENSORS_INDEX}, "
        f"{TORCH_BIN}, {TORCH_BIN_INDEX} (found {sorted(os.listdir(path))})"
    )


def _read_safetensors(file: str) -> dict:
    try:
        from safetensors import safe_open
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"reading {file} needs the `safetensors` package: pip install -e '.[hf]'"
        ) from e
    out = {}
    # framework="flax" rather than "numpy": numpy has no bfloat16, which most Llama-family
    # checkpoints are stored in; jax arrays convert to numpy (ml_dtypes.bfloat16) losslessly.
    with safe_open(file, framework="flax") as f:
        for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
            out[name] = np.asarray(f.get_tensor(name))
    return out


def _read_torch(file: str) -> dict:
    try:
        import torch
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"reading {file} (PyTorch weights) needs torch: pip install -e '.[hf]', or convert "
            "the checkpoint to safetensors"
        ) from e
    state = torch.load(file, map_location="cpu", weights_only=True)
    out = {}
    for name, tensor in state.items():
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.float()  # numpy cannot hold torch's bfloat16; float32 is exact
        out[name] = tensor.numpy()
    return out


def read_tensors(path) -> dict:
    """Reads every tensor of a checkpoint directory into host memory.

    Args:
      path: local checkpoint directory.

    Returns:
      {HF tensor name: numpy array} in the stored dtype (bfloat16 stays bfloat16 for
      safetensors and becomes float32 for PyTorch pickles; both are exact).
    """
    tensors = {}
    for file in weight_files(path):
        read = _read_safetensors if file.endswith(".safetensors") else _read_torch
        tensors.update(read(file))
    return tensors
