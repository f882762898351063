"""What every corpus shares: the `Corpus` record, the split rule and document joining."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Sequence

import numpy as np

# The two splits every corpus has.
SPLITS = ("train", "validation")


@dataclasses.dataclass(frozen=True)
class Corpus:
    """One split of a corpus, tokenized.

    Attributes:
      name: corpus name ("python", "shakespeare").
      split: "train" or "validation".
      tokens: uint16 [num_tokens]; each document is BOS, its tokens, EOS, and documents follow
        each other in `documents` order.
      documents: names of the documents in order (relative paths or file names).
      num_bytes: total size of the documents' raw bytes (without BOS/EOS).
      fingerprint: sha256 hex of the whole corpus (both splits) as read from disk; see each
        loader for what it covers. Record it with results so they say which data they used.
    """

    name: str
    split: str
    tokens: np.ndarray
    documents: tuple[str, ...]
    num_bytes: int
    fingerprint: str


def check_split(split: str) -> None:
    """Raises ValueError unless `split` is one of `SPLITS`."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")


def in_validation(key: str, validation_percent: int) -> bool:
    """Deterministic split rule: a document (or group of documents) goes to validation when the
    sha256 of its key, as an integer, mod 100 is below `validation_percent`.

    A hash rather than "every k-th" keeps the split of a key stable when other keys are added or
    removed (e.g. another Python version with a few more stdlib files).

    Args:
      key: the string that decides the side (relative path, play name).
      validation_percent: expected share of keys in validation, 0..100.

    Returns:
      True if `key` belongs to validation.
    """
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % 100 < validation_percent


def fingerprint(header: str, named_documents: Iterable[tuple[str, bytes]]) -> str:
    """sha256 hex over a header line, then each document's name, size and sha256, in order.

    A corpus records it with every split: it changes with any file, its name or the header
    (which names the corpus, its version and its split rule), never with the machine.

    Args:
      header: one line identifying the corpus and how it is split.
      named_documents: (name, raw bytes) pairs in a fixed order.

    Returns:
      64 hex digits.
    """
    h = hashlib.sha256()
    h.update(f"{header}\n".encode())
    for name, data in named_documents:
        h.update(f"{name}\t{len(data)}\t{hashlib.sha256(data).hexdigest()}\n".encode())
    return h.hexdigest()


def join_documents(docs: Sequence[bytes], tokenizer) -> np.ndarray:
    """Tokenizes documents and concatenates them as BOS doc EOS BOS doc EOS ...

    Args:
      docs: raw bytes of each document.
      tokenizer: has `encode_bytes(data, add_bos, add_eos)` and `vocab_size` <= 65536.

    Returns:
      uint16 [sum(len(doc) + 2)] token ids (uint16 halves the memory of int32; `batch_at` casts
      windows to int32).
    """
    if tokenizer.vocab_size > np.iinfo(np.uint16).max + 1:
        raise ValueError(f"vocab_size {tokenizer.vocab_size} does not fit uint16 token storage")
    if not docs:
        return np.zeros((0,), np.uint16)
    parts = [tokenizer.encode_bytes(d, add_bos=True, add_eos=True).astype(np.uint16) for d in docs]
    return np.concatenate(parts)
