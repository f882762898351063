"""Hugging Face tokenizers behind the interface of specjax's `ByteTokenizer`.

`HFTokenizer` wraps a `transformers` tokenizer (any tokenizer a checkpoint directory ships) or a
plain `tokenizers.Tokenizer` (a tokenizer.json, or one built from a GGUF file's metadata by
`specjax.convert.gguf_tokenizer`). Loading a checkpoint directory's tokenizer needs
`transformers` or `tokenizers`; without either, `load_hf_tokenizer` returns None and the caller
works on ids. Chat templates render with jinja2 (`specjax.data.chat`).
"""

from __future__ import annotations

import json
import os

import numpy as np

from specjax.convert.common import first_id
from specjax.data.chat import render_chat
from specjax.data.tokenizer import _as_id_array

# Files any of which means "this checkpoint ships a tokenizer".
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


class HFTokenizer:
    """A loaded HF tokenizer with `ByteTokenizer`'s methods (encode/decode/ids).

    Attributes:
      backend: the wrapped `transformers` tokenizer or `tokenizers.Tokenizer`.
      bos_id, eos_id, pad_id: special ids (None when the tokenizer has none).
      add_bos: whether the model expects BOS before a prompt (`Pipeline`'s default). A GGUF
        file says so (`tokenizer.ggml.add_bos_token`); by default, whenever there is a bos_id.
      chat_template: the jinja2 chat template, or None (then `apply_chat_template` refuses).
    """

    def __init__(
        self,
        backend,
        bos_id=None,
        eos_id=None,
        pad_id=None,
        *,
        add_bos: bool | None = None,
        chat_template: str | None = None,
    ):
        self.backend = backend
        self.bos_id, self.eos_id, self.pad_id = bos_id, eos_id, pad_id
        self.add_bos = (bos_id is not None) if add_bos is None else bool(add_bos)
        if chat_template is None:
            chat_template = getattr(backend, "chat_template", None)
            if isinstance(chat_template, dict):  # transformers: named templates
                chat_template = chat_template.get("default")
        self.chat_template = chat_template
        # transformers tokenizers take add_special_tokens; `tokenizers.Tokenizer` does not.
        self._is_transformers = hasattr(backend, "convert_ids_to_tokens")

    @property
    def vocab_size(self) -> int:
        """Number of token strings, added tokens included (may be below the model's rows)."""
        return len(self.vocab())

    def vocab(self) -> dict:
        """{token string: id}, added tokens included."""
        return self.backend.get_vocab()

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> np.ndarray:
        """Token ids of `text` (no special tokens unless asked).

        Args:
          text: the string to tokenize.
          add_bos: prepend bos_id.
          add_eos: append eos_id.

        Returns:
          int32 [n].
        """
        if self._is_transformers:
            ids = self.backend.encode(text, add_special_tokens=False)
        else:
            ids = self.backend.encode(text, add_special_tokens=False).ids
        for flag, name in ((add_bos, "bos_id"), (add_eos, "eos_id")):
            if flag and getattr(self, name) is None:
                raise ValueError(f"add_{name[:3]}=True but this tokenizer has no {name}")
        ids = ([self.bos_id] if add_bos else []) + list(ids) + ([self.eos_id] if add_eos else [])
        return np.asarray(ids, np.int32)

    def decode(self, ids, stop_at_eos: bool = False) -> str:
        """Text of 1-D `ids`, special tokens included; cut before the first EOS if asked.

        Raises naming `ids` unless they are integers in [0, vocab_size) (the backend dropped
        an unknown id from the text, and truncated floats)."""
        ids = _as_id_array(ids, "ids", self.vocab_size).tolist()
        if stop_at_eos and self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return self.backend.decode(ids, skip_special_tokens=False)

    def decode_batch(self, ids, lengths=None, stop_at_eos: bool = False) -> list[str]:
        """Decodes each row of [batch, n] ids, row b up to lengths[b] when given."""
        rows = [np.asarray(r) for r in ids]
        if lengths is not None:
            counts = np.asarray(lengths)
            if counts.shape != (len(rows),) or not np.issubdtype(counts.dtype, np.integer):
                raise ValueError(
                    f"lengths must be {len(rows)} integers (one a row); got {lengths!r}"
                )
            if (counts < 0).any():  # a negative length would slice from the end
                raise ValueError(f"lengths must be >= 0; got {counts.tolist()}")
            rows = [r[: int(n)] for r, n in zip(rows, lengths, strict=True)]
        return [self.decode(r, stop_at_eos) for r in rows]

    def token_string(self, token_id) -> str | None:
        """The vocabulary string of `token_id` ("<|im_start|>"), or None for None."""
        if token_id is None:
            return None
        if self._is_transformers:
            return self.backend.convert_ids_to_tokens(int(token_id))
        return self.backend.id_to_token(int(token_id))

    def apply_chat_template(
        self, messages, add_generation_prompt: bool = True, tokenize: bool = True, **variables
    ):
        """The ids of a conversation rendered by the model's chat template.

        Rendered like transformers does (`specjax.data.chat.render_chat`); the special tokens
        the template writes ("<|im_start|>") become their single ids, and no BOS is added (a
        template that wants one writes it).

        Args:
          messages: a list of {"role": str, "content": str} dicts.
          add_generation_prompt: end with the assistant's header, so the model replies next.
          tokenize: False returns the rendered text instead of ids.
          **variables: further template variables; `bos_token` and `eos_token` are given.

        Returns:
          int32 [n] ids (or the text with tokenize=False).
        """
        if not self.chat_template:
            raise ValueError(
                "this tokenizer has no chat template (tokenizer.chat_template is missing from "
                "the model's files): give a raw prompt to generate() instead of messages"
            )
        variables.setdefault("bos_token", self.token_string(self.bos_id) or "")
        variables.setdefault("eos_token", self.token_string(self.eos_id) or "")
        text = render_chat(
            self.chat_template, messages, add_generation_prompt=add_generation_prompt, **variables
        )
        return self.encode(text) if tokenize else text


def has_tokenizer(path) -> bool:
    """True if the checkpoint directory ships tokenizer files."""
    return any(os.path.isfile(os.path.join(path, f)) for f in TOKENIZER_FILES)


def load_hf_tokenizer(path, hf_config: dict | None = None) -> HFTokenizer | None:
    """Loads the tokenizer a checkpoint directory ships, from local files only.

    Args:
      path: local checkpoint directory.
      hf_config: its config.json (special ids for a bare tokenizer.json); optional.

    Returns:
      An HFTokenizer, or None when the directory has no tokenizer files or neither
      `transformers` nor `tokenizers` is installed.
    """
    path = os.fspath(path)
    if not has_tokenizer(path):
        return None
    hf_config = hf_config or {}
    try:
        from transformers import AutoTokenizer
    except ImportError:
        AutoTokenizer = None
    if AutoTokenizer is not None:
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        return HFTokenizer(tok, tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    file = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(file):
        return None  # vocab.json / sentencepiece-only tokenizers need transformers
    return HFTokenizer(
        Tokenizer.from_file(file),
        first_id(hf_config.get("bos_token_id")),
        first_id(hf_config.get("eos_token_id")),
        first_id(hf_config.get("pad_token_id")),
        chat_template=read_chat_template(path),
    )


def read_chat_template(path) -> str | None:
    """The chat template a checkpoint directory ships (`chat_template.jinja`, or the
    `chat_template` of tokenizer_config.json), or None; what transformers would read."""
    jinja = os.path.join(path, "chat_template.jinja")
    if os.path.isfile(jinja):
        with open(jinja, encoding="utf-8") as f:
            return f.read()
    config = os.path.join(path, "tokenizer_config.json")
    if os.path.isfile(config):
        with open(config, encoding="utf-8") as f:
            template = json.load(f).get("chat_template")
        if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
            template = {t["name"]: t["template"] for t in template}.get("default")
        return template
    return None
