"""Hugging Face interop: local checkpoints (GPT-2, Llama, Mistral, Qwen2) as specjax models.

Weights load with `safetensors` (or torch for pytorch_model.bin); tokenizers need
`transformers` or `tokenizers`. All are in the optional extra: `pip install -e ".[hf]"`.
"""

from specjax.convert.checkpoint import read_config, read_tensors
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
    "load_hf_tokenizer",
    "params_from_hf",
    "read_config",
    "read_tensors",
    "resize_vocab",
]
