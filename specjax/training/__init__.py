"""Training: optimizer, pure train/eval steps, distillation, the model zoo, n-gram drafts.

The checkpointed loop is `specjax.training.loop.train_and_evaluate` and data/tensor-parallel
steps are in `specjax.training.sharded`; neither is imported here, so that importing the steps
does not load orbax or the mesh code.
"""

from specjax.models.build import model_config
from specjax.training.ngrams import fit_and_save, load_ngram, ngram_cache_dir, save_ngram
from specjax.training.optim import learning_rate_schedule, make_optimizer
from specjax.training.steps import (
    TrainState,
    evaluate,
    init_train_state,
    make_eval_step,
    make_train_step,
    sequence_logits,
    token_nll,
)
from specjax.training.zoo import MODEL_SIZES, model_cache_dir, run_fingerprint

__all__ = [
    "MODEL_SIZES",
    "TrainState",
    "evaluate",
    "fit_and_save",
    "init_train_state",
    "learning_rate_schedule",
    "load_ngram",
    "make_eval_step",
    "make_optimizer",
    "make_train_step",
    "model_cache_dir",
    "model_config",
    "ngram_cache_dir",
    "run_fingerprint",
    "save_ngram",
    "sequence_logits",
    "token_nll",
]
