"""Unigram and bigram drafts fitted from a corpus' training split, saved as `.npz` files.

A run writes them next to its checkpoints (`<workdir>/ngrams/{unigram,bigram}.npz`) and into
the model cache (`ngram_cache_dir`), keyed by the corpus fingerprint: they depend on the data
only, so every run on the same corpus shares them.
"""

from __future__ import annotations

import os

import numpy as np

from specjax.models.ngram import NgramLM, fit_ngram
from specjax.training import zoo

NAMES = {1: "unigram", 2: "bigram"}


def ngram_cache_dir(corpus: str, corpus_fingerprint: str) -> str:
    """`<cache_root>/ngrams-<corpus>-<first 12 hex digits of the corpus fingerprint>`."""
    return os.path.join(zoo.cache_root(), f"ngrams-{corpus}-{corpus_fingerprint[:12]}")


def save_ngram(path: str, params: dict, order: int, **info) -> str:
    """Writes an n-gram table and its description to `path` (.npz); returns the path.

    Args:
      path: destination file.
      params: {"log_probs": [V] or [V, V]} from `fit_ngram`.
      order: 1 or 2.
      **info: strings recorded with the table (corpus, fingerprint, smoothing...).
    """
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp.npz"  # write then rename: a killed run leaves no half-written table
    np.savez(tmp, log_probs=np.asarray(params["log_probs"]), order=order, **info)
    os.replace(tmp, path)
    return path


def load_ngram(path: str) -> tuple[NgramLM, dict]:
    """Loads a table written by `save_ngram`.

    Args:
      path: the .npz file.

    Returns:
      (NgramLM, params) ready for the decoding loops and `specjax.alpha`.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no n-gram table at {path}")
    with np.load(path) as data:
        log_probs = np.asarray(data["log_probs"], np.float32)
        order = int(data["order"])
    return NgramLM(vocab_size=log_probs.shape[-1], order=order), {"log_probs": log_probs}


def fit_and_save(
    tokens, vocab_size: int, directories, corpus: str, fingerprint: str, smoothing: float = 0.1
) -> dict:
    """Fits unigram and bigram tables and writes both into every directory.

    Args:
      tokens: 1-D token ids of the training split.
      vocab_size: V.
      directories: where to write `unigram.npz` and `bigram.npz`.
      corpus: corpus name (recorded in the files).
      fingerprint: corpus fingerprint (recorded in the files).
      smoothing: additive smoothing of `fit_ngram`.

    Returns:
      {"unigram": [paths], "bigram": [paths]}.
    """
    tokens = np.asarray(tokens)
    written = {}
    for order, name in NAMES.items():
        params = fit_ngram(tokens, vocab_size, order, smoothing)
        written[name] = [
            save_ngram(
                os.path.join(d, f"{name}.npz"),
                params,
                order,
                corpus=corpus,
                fingerprint=fingerprint,
                smoothing=str(smoothing),
            )
            for d in directories
        ]
    return written
