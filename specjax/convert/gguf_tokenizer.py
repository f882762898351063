"""The tokenizer a GGUF file describes, built with the `tokenizers` library (no transformers).

A GGUF file stores its tokenizer as metadata under llama.cpp's names: `tokenizer.ggml.model`
(`gpt2`: byte-level BPE), `tokens`, `merges`, `token_type`, `pre` (the pre-tokenizer, by
name), special ids, `add_bos_token` and `tokenizer.chat_template`. This module rebuilds it:

- the BPE model from the vocabulary and merges, byte-level, with a ByteLevel decoder;
- the pre-tokenizer llama.cpp applies for `pre` (`PRE_TOKENIZERS`). llama.cpp splits the text
  by a list of regexes in turn; for `smollm` (and StarCoder's family) the first is `\\p{N}`,
  every numeric character alone, the second the GPT-2 regex. In `tokenizers` terms that is
  Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)]. A `pre` not listed is
  refused rather than approximated: another split changes ids on digits and whitespace;
- control (token_type 3) and user-defined (4) tokens as added special tokens, so that
  "<|im_start|>" in a text (a rendered chat template) is one id.

Hugging Face transformers (5.24) builds this file's tokenizer with plain ByteLevel, dropping the
digit split (its `GGUF_PRE_TOKENIZER_SPLITS` has no `smollm`). GPT-2's regex alone keeps
whitespace with the number after it, so transformers disagrees with llama.cpp (and with this
module) wherever whitespace precedes a number: "abc  123" (ours "abc", "ĠĠ", "1", "2", "3";
transformers "abc", "Ġ", "Ġ", "1", ...), " ½", " ٣٤٥" (transformers merges the space into the
numeral's first byte). Without whitespace before it ("½", "٣٤٥", "x 12"'s "12") the two agree,
since the vocabulary has no multi-digit tokens. `tests/test_real_model_hf.py` shows both.
"""

from __future__ import annotations

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from specjax.convert.tokenizer import HFTokenizer

# token_type values of llama.cpp's vocabulary (llama.h, `llama_token_type`).
CONTROL, USER_DEFINED = 3, 4


def _gpt2_split():
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _digits_then_gpt2():
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), _gpt2_split()])


# `tokenizer.ggml.pre` -> the pre-tokenizer llama.cpp uses for it (llama-vocab.cpp). Only names
# whose regex list is exactly one of these two are here.
PRE_TOKENIZERS = {
    "gpt2": _gpt2_split,
    "smollm": _digits_then_gpt2,
    "starcoder": _digits_then_gpt2,
    "refact": _digits_then_gpt2,
    "codeshell": _digits_then_gpt2,
}


def _field(meta: dict, key: str, path: str):
    if key not in meta:
        raise ValueError(
            f"{path}: GGUF metadata field {key!r} is missing (needed by the tokenizer)"
        )
    return meta[key]


def tokenizer_from_gguf(meta: dict, path: str = "GGUF file") -> HFTokenizer:
    """Builds the tokenizer of a GGUF file from its metadata.

    Args:
      meta: {metadata key: value} as `specjax.convert.gguf.read_metadata` returns it.
      path: the file, for error messages.

    Returns:
      An `HFTokenizer` over a `tokenizers.Tokenizer`, with the file's bos/eos/pad ids,
      `add_bos` (`tokenizer.ggml.add_bos_token`, False when absent) and chat template.

    Raises:
      ValueError: a field is missing, or names a tokenizer or pre-tokenizer not implemented.
    """
    model = _field(meta, "tokenizer.ggml.model", path)
    if model != "gpt2":
        raise ValueError(
            f"{path}: tokenizer.ggml.model={model!r}; specjax builds only 'gpt2' (byte-level "
            "BPE) tokenizers from GGUF files (a 'llama' SentencePiece vocabulary is not "
            "implemented)"
        )
    pre = _field(meta, "tokenizer.ggml.pre", path)
    if pre not in PRE_TOKENIZERS:
        raise ValueError(
            f"{path}: tokenizer.ggml.pre={pre!r} is not implemented; specjax implements "
            f"{sorted(PRE_TOKENIZERS)} as llama.cpp does"
        )
    if meta.get("tokenizer.ggml.add_space_prefix", False):
        raise ValueError(
            f"{path}: tokenizer.ggml.add_space_prefix=True is not implemented for byte-level BPE"
        )
    tokens = list(_field(meta, "tokenizer.ggml.tokens", path))
    merges = list(_field(meta, "tokenizer.ggml.merges", path))
    types = list(_field(meta, "tokenizer.ggml.token_type", path))
    if len(types) != len(tokens):
        raise ValueError(
            f"{path}: tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} "
            "tokenizer.ggml.tokens"
        )
    vocab = {token: i for i, token in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ValueError(f"{path}: tokenizer.ggml.tokens holds the same string twice")
    pairs = [tuple(m.split(" ")) for m in merges]
    for i, pair in enumerate(pairs):
        if len(pair) != 2 or not {pair[0], pair[1], pair[0] + pair[1]} <= vocab.keys():
            raise ValueError(
                f"{path}: tokenizer.ggml.merges[{i}]={merges[i]!r} is not two tokens of the "
                "vocabulary, separated by one space, whose concatenation is in it too"
            )
    backend = Tokenizer(models.BPE(vocab, pairs, fuse_unk=False, byte_fallback=False))
    backend.pre_tokenizer = PRE_TOKENIZERS[pre]()
    backend.decoder = decoders.ByteLevel()
    specials = [
        AddedToken(token, special=True, normalized=False)
        for token, kind in zip(tokens, types, strict=True)
        if kind in (CONTROL, USER_DEFINED)
    ]
    backend.add_special_tokens(specials)
    for token in specials:  # an added token must keep its file id, not get a new one
        if backend.token_to_id(token.content) != vocab[token.content]:
            raise ValueError(
                f"{path}: special token {token.content!r} cannot keep its id "
                f"{vocab[token.content]} in the tokenizer"
            )
    ids = {}
    for name, key in (
        ("bos", "bos_token_id"),
        ("eos", "eos_token_id"),
        ("pad", "padding_token_id"),
    ):
        value = meta.get(f"tokenizer.ggml.{key}")
        if value is not None and not 0 <= int(value) < len(tokens):
            raise ValueError(
                f"{path}: tokenizer.ggml.{key}={value} is outside the {len(tokens)} tokens"
            )
        ids[name] = None if value is None else int(value)
    return HFTokenizer(
        backend,
        ids["bos"],
        ids["eos"],
        ids["pad"],
        add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        chat_template=meta.get("tokenizer.chat_template"),
    )
