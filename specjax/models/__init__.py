"""Models behind one decoding interface (see `interface.py`)."""

from specjax.models.config import RopeScaling, TransformerConfig
from specjax.models.interface import LanguageModel, ModelOutput, check_pair, state_logical_axes
from specjax.models.kv_cache import KVCache, rollback, select_rows
from specjax.models.ngram import NgramLM, UniformLM, fit_ngram
from specjax.models.prompt_lookup import PromptLookupLM
from specjax.models.transformer import Transformer, TransformerLM

__all__ = [
    "KVCache",
    "LanguageModel",
    "ModelOutput",
    "NgramLM",
    "PromptLookupLM",
    "RopeScaling",
    "Transformer",
    "TransformerConfig",
    "TransformerLM",
    "UniformLM",
    "check_pair",
    "fit_ngram",
    "rollback",
    "select_rows",
    "state_logical_axes",
]
