"""Data: byte tokenizer, corpora (Python stdlib, Shakespeare) and deterministic batches."""

from specjax.data.batches import (
    Prompts,
    TrainBatches,
    batch_at,
    eval_batches,
    eval_windows,
    sample_prompts,
    spread_eval_batches,
    window_starts,
)
from specjax.data.corpora import CORPORA, SPLITS, load_corpus, load_corpus_info
from specjax.data.documents import Corpus
from specjax.data.shakespeare import ShakespeareNotFetchedError, fetch_shakespeare
from specjax.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    NUM_BYTES,
    PAD_ID,
    VOCAB_SIZE,
    ByteTokenizer,
    pad_batch,
)

__all__ = [
    "BOS_ID",
    "CORPORA",
    "EOS_ID",
    "NUM_BYTES",
    "PAD_ID",
    "SPLITS",
    "VOCAB_SIZE",
    "ByteTokenizer",
    "Corpus",
    "Prompts",
    "ShakespeareNotFetchedError",
    "TrainBatches",
    "batch_at",
    "eval_batches",
    "eval_windows",
    "fetch_shakespeare",
    "load_corpus",
    "load_corpus_info",
    "pad_batch",
    "sample_prompts",
    "spread_eval_batches",
    "window_starts",
]
