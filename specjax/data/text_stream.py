"""Text pieces from token ids that arrive a few at a time (streamed generation).

Decoding each new token on its own breaks multi-byte characters: with the byte tokenizer a
UTF-8 character is up to four tokens, and a BPE tokenizer's byte-level pieces split the same
way. `TextStream` decodes the whole row so far and hands out only the new, settled suffix: a
trailing U+FFFD (an incomplete character, or one that will become valid when its next bytes
come) is held back until more ids arrive or the stream is flushed. The pieces therefore
concatenate to exactly `tokenizer.decode(all_ids, stop_at_eos=True)`.
"""

from __future__ import annotations

import numpy as np

REPLACEMENT = "\ufffd"


class TextStream:
    """Turns one row's ids, pushed in chunks, into text pieces.

    Args:
      tokenizer: anything with `decode(ids, stop_at_eos=...) -> str` (`ByteTokenizer`,
        `specjax.convert.HFTokenizer`).
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.emitted = 0  # characters of the decoded text already handed out

    def _text(self) -> str:
        return self.tokenizer.decode(np.asarray(self.ids, np.int64), stop_at_eos=True)

    def push(self, ids) -> str:
        """Adds `ids` (1-D, possibly empty) and returns the text they settled ("" if none).

        Ids past the tokenizer's vocabulary (a model whose embedding has more rows than its
        tokenizer has tokens) have no text and are left out, as `Pipeline` leaves them out of
        its `.text` (with a warning there)."""
        known = getattr(self.tokenizer, "vocab_size", None)
        new = (int(i) for i in np.asarray(ids).reshape(-1))
        self.ids.extend(i for i in new if known is None or i < known)
        text = self._text()
        settled = len(text.rstrip(REPLACEMENT))
        if settled <= self.emitted:
            return ""
        piece = text[self.emitted : settled]
        self.emitted = settled
        return piece

    def flush(self) -> str:
        """The text still held back (a trailing incomplete character): call once at the end."""
        text = self._text()
        piece = text[self.emitted :]
        self.emitted = len(text)
        return piece
