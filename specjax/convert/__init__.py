"""Pretrained checkpoints as specjax models: GGUF files and Hugging Face directories.

`load_gguf` reads llama-architecture GGUF files (llama.cpp's format) with the `gguf` package and
builds their tokenizer with `tokenizers` (both core requirements). Hugging Face directories
(GPT-2, Llama, Mistral, Qwen2) load with `safetensors` (or torch for pytorch_model.bin), and
their tokenizers need `transformers` or `tokenizers`: the optional extra
`pip install -e ".[hf]"`.
"""

from specjax.convert.checkpoint import read_config, read_tensors
from specjax.convert.gguf import load_gguf
from specjax.convert.hf import (
    SUPPORTED_MODEL_TYPES,
    HFPair,
    check_vocab_match,
    config_from_hf,
    load_hf_model,
    load_hf_pair,
    params_from_hf,
    resize_vocab,
)
from specjax.convert.tokenizer import HFTokenizer, load_hf_tokenizer

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "HFPair",
    "HFTokenizer",
    "check_vocab_match",
    "config_from_hf",
    "load_hf_model",
    "load_hf_pair",
    "load_gguf",
    "load_hf_tokenizer",
    "params_from_hf",
    "read_config",
    "read_tensors",
    "resize_vocab",
]
