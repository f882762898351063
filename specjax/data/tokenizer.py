"""Byte-level tokenizer: UTF-8 bytes are the tokens, three special ids follow them.

Ids 0..255 are the bytes themselves (identity map), so any text round-trips exactly and no
vocabulary file is needed; PAD, BOS and EOS come after the bytes. A byte vocabulary keeps the
models tiny and makes every corpus (source code, old English) tokenizable the same way, which is
what speculative-decoding experiments need: draft and target share one vocabulary by
construction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

# Number of byte ids; byte b has id b.
NUM_BYTES = 256
# Padding; never produced by `encode`, skipped by `decode`.
PAD_ID = 256
# Beginning of a document.
BOS_ID = 257
# End of a document.
EOS_ID = 258
# Bytes plus the three specials.
VOCAB_SIZE = 259


def _as_id_array(ids, name: str, vocab_size: int = VOCAB_SIZE) -> np.ndarray:
    """Returns `ids` as a 1-D int64 array after checking its type, rank and range."""
    if isinstance(ids, str | bytes):  # np.asarray("72") is a 0-d string array
        raise TypeError(f"{name} must be a sequence of token ids, got {type(ids).__name__}")
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        return arr.astype(np.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= vocab_size:
        raise ValueError(f"{name} must lie in [0, {vocab_size}), got values in [{lo}, {hi}]")
    return arr


def pad_batch(
    sequences: Sequence,
    length: int | None = None,
    *,
    pad_id: int = PAD_ID,
    pad_left: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Stacks 1-D id sequences into one padded matrix.

    Args:
      sequences: 1-D integer arrays (or lists) of token ids.
      length: width of the result; None means the longest sequence. A sequence longer than
        `length` is an error (silently cutting a prompt would change an experiment).
      pad_id: id written into padding positions.
      pad_left: pad on the left (prompts for generation, so every row ends at the same column)
        instead of the right (training/eval targets).

    Returns:
      ids: int32 [batch, length], padded.
      lengths: int32 [batch], number of real tokens per row.
    """
    if isinstance(sequences, (str, bytes)) or not isinstance(sequences, Sequence):
        raise TypeError(f"sequences must be a sequence of id arrays, got {type(sequences)}")
    rows = [np.asarray(s) for s in sequences]
    for i, row in enumerate(rows):
        if row.ndim != 1:
            raise ValueError(f"sequences[{i}] must be 1-D, got shape {row.shape}")
        if row.size and not np.issubdtype(row.dtype, np.integer):
            raise TypeError(f"sequences[{i}] must hold integers, got dtype {row.dtype}")
    lengths = np.array([row.size for row in rows], dtype=np.int32)  # [batch]
    longest = int(lengths.max()) if rows else 0
    if length is None:
        length = longest
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    if longest > length:
        worst = int(lengths.argmax())
        raise ValueError(
            f"sequences[{worst}] has {longest} tokens, more than length={length}; "
            "truncate before padding"
        )
    ids = np.full((len(rows), length), pad_id, dtype=np.int32)  # [batch, length]
    for i, row in enumerate(rows):
        if row.size:
            if pad_left:
                ids[i, length - row.size :] = row
            else:
                ids[i, : row.size] = row
    return ids, lengths


@dataclasses.dataclass(frozen=True)
class ByteTokenizer:
    """UTF-8 byte tokenizer with PAD/BOS/EOS specials; frozen and hashable (usable as a static
    argument of `jax.jit`)."""

    @property
    def vocab_size(self) -> int:
        return VOCAB_SIZE

    @property
    def pad_id(self) -> int:
        return PAD_ID

    @property
    def bos_id(self) -> int:
        return BOS_ID

    @property
    def eos_id(self) -> int:
        return EOS_ID

    def encode_bytes(self, data: bytes, add_bos: bool = False, add_eos: bool = False) -> np.ndarray:
        """Tokenizes raw bytes (no decoding step, so any byte string is accepted).

        Args:
          data: the bytes.
          add_bos: prepend BOS.
          add_eos: append EOS.

        Returns:
          int32 [len(data) + add_bos + add_eos] token ids.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data must be bytes, got {type(data).__name__}")
        body = np.frombuffer(bytes(data), dtype=np.uint8).astype(np.int32)  # [len(data)]
        parts = [np.array([BOS_ID], np.int32)] if add_bos else []
        parts.append(body)
        if add_eos:
            parts.append(np.array([EOS_ID], np.int32))
        return np.concatenate(parts)

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> np.ndarray:
        """Tokenizes text as its UTF-8 bytes.

        Args:
          text: any str made of Unicode scalar values. Lone surrogates (e.g. "\\ud800") have no
            UTF-8 encoding and raise ValueError.
          add_bos: prepend BOS.
          add_eos: append EOS.

        Returns:
          int32 [num_utf8_bytes + add_bos + add_eos] token ids.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(
                f"text has a character with no UTF-8 encoding at position {e.start}: "
                f"{text[e.start : e.end]!r} (lone surrogate)"
            ) from e
        return self.encode_bytes(data, add_bos=add_bos, add_eos=add_eos)

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, **variables):
        """Refuses: byte-level models have no chat template (the method exists on every
        tokenizer specjax returns, so callers get this message rather than an AttributeError)."""
        del messages, add_generation_prompt, variables
        raise ValueError(
            "the byte tokenizer has no chat template (specjax's byte-level models are not chat "
            "models): give a raw prompt to generate() instead of messages"
        )

    def decode(self, ids, stop_at_eos: bool = False) -> str:
        """Turns ids back into text.

        Special ids (PAD, BOS, EOS) are dropped. The remaining bytes are decoded as UTF-8 with
        errors="replace": a model can emit byte sequences that are not valid UTF-8 (e.g. half a
        multi-byte character), and each maximal invalid piece then becomes U+FFFD instead of
        raising. For ids that came from `encode` the round trip is exact.

        Args:
          ids: 1-D integer ids in [0, vocab_size) (list, numpy or jax array).
          stop_at_eos: ignore everything from the first EOS on (generation output).

        Returns:
          The decoded text.
        """
        arr = _as_id_array(ids, "ids")  # [num_ids]
        if stop_at_eos:
            eos = np.flatnonzero(arr == EOS_ID)
            if eos.size:
                arr = arr[: eos[0]]
        data = arr[arr < NUM_BYTES].astype(np.uint8).tobytes()
        return data.decode("utf-8", errors="replace")

    def decode_batch(self, ids, lengths=None, stop_at_eos: bool = False) -> list[str]:
        """Decodes each row of a [batch, length] id matrix.

        Args:
          ids: integer [batch, length].
          lengths: optional int [batch]; row i keeps its first lengths[i] ids (right-padded rows).
            Padding ids are skipped anyway, so this is only needed to cut off trailing non-PAD
            ids.
          stop_at_eos: as in `decode`.

        Returns:
          A list of `batch` strings.
        """
        mat = np.asarray(ids)
        if mat.ndim != 2:
            raise ValueError(f"ids must be 2-D [batch, length], got shape {mat.shape}")
        if lengths is not None:
            lengths = np.asarray(lengths)
            if lengths.shape != (mat.shape[0],):
                raise ValueError(f"lengths must have shape ({mat.shape[0]},), got {lengths.shape}")
        return [
            self.decode(row if lengths is None else row[: int(lengths[i])], stop_at_eos)
            for i, row in enumerate(mat)
        ]

    def encode_batch(
        self,
        texts: Sequence[str],
        length: int | None = None,
        *,
        add_bos: bool = False,
        add_eos: bool = False,
        pad_left: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Encodes several texts and pads them into one matrix (see `pad_batch`).

        Args:
          texts: the strings.
          length: width of the result; None means the longest encoding.
          add_bos: prepend BOS to each row.
          add_eos: append EOS to each row.
          pad_left: pad on the left instead of the right.

        Returns:
          ids: int32 [batch, length]; lengths: int32 [batch].
        """
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of str, got a single str")
        rows = [self.encode(t, add_bos=add_bos, add_eos=add_eos) for t in texts]
        return pad_batch(rows, length, pad_id=PAD_ID, pad_left=pad_left)

    def pad_batch(
        self, sequences: Sequence, length: int | None = None, *, pad_left: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """`pad_batch` with this tokenizer's PAD id."""
        return pad_batch(sequences, length, pad_id=PAD_ID, pad_left=pad_left)
