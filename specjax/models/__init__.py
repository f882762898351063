"""Models behind one decoding interface (see `interface.py`)."""

from specjax.models.config import RopeScaling, TransformerConfig
from specjax.models.interface import LanguageModel, check_pair
from specjax.models.kv_cache import KVCache, rollback
from specjax.models.ngram import NgramLM, UniformLM, fit_ngram
from specjax.models.prompt_lookup import PromptLookupLM
from specjax.models.transformer import Transformer, TransformerLM

__all__ = [
    "KVCache",
    "LanguageModel",
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
]

# Added for issue #13: whole-sequence logits of any model (was specjax.training.steps).
from specjax.models.sequence import sequence_logits  # noqa: E402

__all__ += ["sequence_logits"]
