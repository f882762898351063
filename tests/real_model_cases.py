"""Inputs of the real-model tests (SmolLM2-135M-Instruct) and the transformers reference.

`PROMPTS` are chat conversations written for these tests (not taken from any benchmark, and
not chosen for how any draft does on them), across tasks: summarising a given passage,
answering about a given passage, writing and reading code, continuing a story, translating,
arithmetic word problems, extraction and rewriting. `CORPUS` is text for the tokenizer:
Python source, Shakespeare, non-ASCII scripts, emoji, numbers, whitespace runs and every
special token.

The reference functions need torch and transformers (the `[hf]` extra): they are used by
`scripts/record_real_fixture.py`, which writes `tests/data/smollm2_reference.json` for the CI
tests without torch, and by `tests/test_real_model_hf.py`, which compares live.
"""

from __future__ import annotations

import numpy as np

MODEL = "smollm2-135m-instruct"
FIXTURE = "tests/data/smollm2_reference.json"
MAX_NEW_TOKENS = 64
# A position whose top-2 logits (transformers, float32) differ by less than this share of the
# row's largest |logit| is a near-tie: another float32 implementation may pick either token.
GAP_TOLERANCE = 1e-3


def _user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


PROMPTS = [
    _user(
        "Summarise this passage in two sentences.\n\n"
        "The old lighthouse on Marrow Point was switched off in 1987, when satellite navigation "
        "made its beam unnecessary. For thirty years the tower stood empty, its paint peeling "
        "and its windows boarded. Last spring a group of volunteers from the village raised "
        "money to repair it, and in September the lamp was lit again, this time as a museum "
        "that tells the story of the keepers who lived there."
    ),
    _user(
        "Read the passage and answer the question.\n\n"
        "Passage: Mina planted tomatoes, beans and squash in her garden. The beans came up "
        "first, after six days. The tomatoes took twice as long, and the squash never "
        "sprouted because a late frost killed the seeds.\n\n"
        "Question: How many days did the tomatoes take to come up, and why did the squash fail?"
    ),
    _user(
        "Write a Python function `is_palindrome(s)` that returns True when the string reads "
        "the same forwards and backwards, ignoring case and spaces."
    ),
    _user(
        "Continue this story for a few sentences.\n\n"
        "The train stopped in the middle of the forest, and for a long minute nobody moved. "
        "Then the conductor walked through the carriage holding a lantern, and said quietly"
    ),
    _user("Translate into French: The library opens at nine and closes at six on weekdays."),
    _user(
        "A baker makes 48 rolls in the morning and 36 in the afternoon. She sells 70 of them "
        "and gives 5 to a neighbour. How many rolls are left? Explain step by step."
    ),
    _user(
        "What does this code print?\n\n"
        "```python\n"
        "total = 0\n"
        "for i in range(1, 5):\n"
        "    if i % 2 == 0:\n"
        "        total += i * 10\n"
        "    else:\n"
        "        total -= i\n"
        "print(total)\n"
        "```"
    ),
    _user(
        "List every date mentioned in this text, one per line.\n\n"
        "The committee first met on 3 March 2021 and again on 17 June. The final report was "
        "due on 1 December 2021 but was delayed until 14 January 2022."
    ),
    [
        {"role": "system", "content": "You rewrite text in a formal, polite register."},
        {"role": "user", "content": "hey, can u send me the files by tmrw? thx"},
    ],
    [
        {"role": "user", "content": "Give me one word that rhymes with 'stone'."},
        {"role": "assistant", "content": "Bone."},
        {"role": "user", "content": "Now use both words in one short sentence."},
    ],
]

CORPUS = [
    # Python source
    'def fibonacci(n: int) -> list[int]:\n    """First n numbers."""\n    a, b = 0, 1\n'
    "    out = []\n    for _ in range(n):\n        out.append(a)\n        a, b = b, a + b\n"
    "    return out\n\n\nif __name__ == '__main__':\n\tprint(fibonacci(10))  # 0 1 1 2 ...\n",
    "x = {'key': [1, 2.5, -3e-4, 0x1F, 1_000_000]}; y = x['key'][::-1] or None\n",
    # Shakespeare (Sonnet 18, 1609)
    "Shall I compare thee to a summer's day?\nThou art more lovely and more temperate:\n"
    "Rough winds do shake the darling buds of May,\nAnd summer's lease hath all too short a date;",
    "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer",
    # non-ASCII
    "Übermäßig große Straßenbahnen fahren über die Brücke. Ça coûte 12,50 € à Noël.",
    "Ελληνικά: καλημέρα κόσμε. Русский: привет, мир! 中文：你好，世界。日本語：こんにちは。",
    "العربية: مرحبا بالعالم ٣٤٥ — हिन्दी: नमस्ते दुनिया १२३ — 한국어: 안녕하세요",
    # emoji (with skin tones, ZWJ sequences, flags)
    "Great job 👍🏽! 👨‍👩‍👧‍👦 went to 🇫🇷 and 🇯🇵 🎉🎉 ❤️‍🔥 🤖:)",
    # numbers: digits split one by one (smollm), and \p{N} beyond ASCII digits
    "abc  123",
    "½",
    "٣٤٥",
    "In 2024, 3.14159 × 42 = 131.94678; 1,234,567 items at $9.99 (12%) — ½ ¾ ² ³ Ⅻ ①",
    "x1y22z333 4444a a55555 0.000001 1e10 -7",
    # whitespace runs
    "a    b\t\t c\n\n\n  d   \n \n\r\n  end   ",
    "    indented\n        more\n\n\n\n",
    "   ",
    # contractions and case
    "I'm sure you'll see they've done it; WE'RE HERE, isn't it? 'quoted' \"double\"",
    # every special token, alone, adjacent and inside text
    "<|endoftext|><|im_start|><|im_end|><repo_name><reponame><file_sep><filename><gh_stars>"
    "<issue_start><issue_comment><issue_closed><jupyter_start><jupyter_text><jupyter_code>"
    "<jupyter_output><jupyter_script><empty_output>",
    "<|im_start|>user\nHello 42<|im_end|>\n<|im_start|>assistant\nHi!<|im_end|>\n",
    "text<reponame>specjax<file_sep>a.py<filename>b.py 10<gh_stars>",
]


# -- the transformers reference (torch) ------------------------------------------------------


def load_hf(path: str):
    """transformers' own model and GGUF tokenizer for the file at `path` (float32)."""
    import os

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = os.path.dirname(path), os.path.basename(path)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    return model.eval(), AutoTokenizer.from_pretrained(folder, gguf_file=name)


def reference_tokenizer(hf_tokenizer):
    """transformers' GGUF tokenizer with llama.cpp's smollm pre-tokenizer put back: a copy of
    its `tokenizers` backend with Sequence[Digits(individual), ByteLevel(use_regex)]."""
    from tokenizers import Tokenizer, pre_tokenizers

    backend = Tokenizer.from_str(hf_tokenizer.backend_tokenizer.to_str())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    return backend


def reference_prompt_ids(hf_tokenizer, reference, messages) -> list[int]:
    """transformers renders the template; the reference tokenizer encodes the text."""
    text = hf_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return reference.encode(text, add_special_tokens=False).ids


def relative_gap(logits: np.ndarray) -> float:
    """(top-1 - top-2) / max |logit| of one row of logits."""
    top2 = np.sort(logits)[-2:]
    return float((top2[1] - top2[0]) / np.abs(logits).max())


def hf_greedy(model, prompt_ids, max_new_tokens: int, eos_id: int):
    """transformers' greedy continuation with its KV cache, one token per call.

    Returns:
      (tokens, gaps, logits): the new tokens (up to and including EOS), each position's
      `relative_gap`, and the float32 logits [n, vocab] each token was chosen from.
    """
    import torch

    tokens, gaps, rows = [], [], []
    with torch.no_grad():
        out = model(torch.tensor([prompt_ids]), use_cache=True)
        for _ in range(max_new_tokens):
            logits = out.logits[0, -1].numpy().astype(np.float32)
            rows.append(logits)
            token = int(logits.argmax())
            tokens.append(token)
            gaps.append(relative_gap(logits))
            if token == eos_id:
                break
            out = model(
                torch.tensor([[token]]), past_key_values=out.past_key_values, use_cache=True
            )
    return tokens, gaps, np.stack(rows)


def first_near_tie(gaps) -> int:
    """Index of the first position whose gap is below GAP_TOLERANCE (len(gaps) if none)."""
    return next((i for i, g in enumerate(gaps) if g < GAP_TOLERANCE), len(gaps))
