"""Models behind one decoding interface (see `interface.py`)."""

from specjax.models.config import RopeScaling, TransformerConfig
from specjax.models.eagle_head import EagleHead, eagle3_layers
from specjax.models.interface import LanguageModel, ModelOutput, check_pair, state_logical_axes
from specjax.models.kv_cache import KVCache, rollback, select_rows
from specjax.models.layout import with_matmul
from specjax.models.medusa_heads import MedusaHeads
from specjax.models.ngram import NgramLM, UniformLM, fit_ngram
from specjax.models.prompt_lookup import PromptLookupLM
from specjax.models.reduced_vocab import ReducedVocabLM, reduce_vocab
from specjax.models.sparse_ngram import SparseBigramLM, fit_sparse_bigram
from specjax.models.transformer import Transformer, TransformerLM

__all__ = [
    "EagleHead",
    "eagle3_layers",
    "MedusaHeads",
    "KVCache",
    "LanguageModel",
    "ModelOutput",
    "NgramLM",
    "PromptLookupLM",
    "ReducedVocabLM",
    "RopeScaling",
    "SparseBigramLM",
    "Transformer",
    "TransformerConfig",
    "TransformerLM",
    "UniformLM",
    "check_pair",
    "fit_ngram",
    "fit_sparse_bigram",
    "reduce_vocab",
    "rollback",
    "select_rows",
    "state_logical_axes",
    "with_matmul",
]

# Added for issue #13: the model builder, and whole-sequence logits of any model (they were
# in experiments/generate/, training/zoo.py, scaleout.py, scripts/ and training/steps.py).
from specjax.models import build  # noqa: E402
from specjax.models.build import build_draft, init_model, model_config  # noqa: E402
from specjax.models.sequence import sequence_logits  # noqa: E402

__all__ += ["build", "build_draft", "init_model", "model_config", "sequence_logits"]
