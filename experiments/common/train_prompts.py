"""Training prompts for drafts fitted to a real target (feature heads, distilled drafts).

Self-distillation data: the target's own replies to these prompts. They cover the six tasks of
the evaluation prompts (`real_prompts.TASKS`) but share no text with them, and are built from
two sources, both available on every Python install:
  * passages and code from the running Python's standard library (module docstrings as text to
    summarise or ask about, function sources to explain, document or rewrite);
  * templates filled from small written word lists (stories, translation, arithmetic with
    seeded random numbers, short coding tasks).

`train_prompts(count, seed)` is deterministic for a given Python version (the stdlib is part of
the data; its fingerprint goes into every cache built from these prompts).

    from experiments.common.train_prompts import train_prompts
    for p in train_prompts(512): p.task, p.messages
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os

import numpy as np

from experiments.common import train_words as w
from experiments.common.real_prompts import TASKS, Prompt, evaluation_texts
from specjax.data.python_source import list_source_files, stdlib_root

# The first entries of `train_words`' lists (which the broad set uses whole): this set's prompts
# stay those the heads measured before 2026-12-05 were trained on.
_NAMES = w.NAMES[:10]
_PLACES = w.PLACES[:8]
_EVENTS = w.EVENTS[:6]
_STYLES = w.STYLES[:4]
_SENTENCES = w.SENTENCES[:10]
_LANGUAGES = w.LANGUAGES[:5]
_CODE_TASKS = w.CODE_TASKS[:12]
_LANGS_CODE = w.CODE_LANGS[:5]


@functools.lru_cache(maxsize=2)
def stdlib_material(limit_files: int = 2000) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(docstrings, functions) from the stdlib: module docstrings of 200-1200 characters, class
    and function docstrings of 300-1200, and top-level function sources of 5-30 lines, in a
    fixed order of files (read once per process: parsing the files takes seconds)."""
    docs, funcs = [], []
    root = stdlib_root()
    for rel in list_source_files(root)[:limit_files]:
        try:
            with open(os.path.join(root, rel), encoding="utf-8") as f:
                source = f.read()
            tree = ast.parse(source)
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        doc = ast.get_docstring(tree)
        if doc and 200 <= len(doc) <= 1200:
            docs.append(doc.strip())
        lines = source.splitlines()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                inner = ast.get_docstring(node)
                if inner and 300 <= len(inner) <= 1200:
                    docs.append(inner.strip())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.end_lineno is not None:
                n = node.end_lineno - node.lineno + 1
                if 5 <= n <= 30:
                    funcs.append("\n".join(lines[node.lineno - 1 : node.end_lineno]))
    return tuple(docs), tuple(funcs)


def stdlib_fingerprint() -> str:
    """sha256 of the stdlib files the prompts read (their paths and sizes)."""
    h = hashlib.sha256()
    root = stdlib_root()
    for rel in list_source_files(root)[:2000]:
        h.update(rel.encode())
        h.update(str(os.path.getsize(os.path.join(root, rel))).encode())
    return h.hexdigest()[:16]


def _make(task: str, rng: np.random.Generator, docs, funcs) -> str:
    pick = lambda seq: seq[int(rng.integers(len(seq)))]  # noqa: E731
    if task == "summary":
        return f"Summarize the following text in two or three sentences.\n\n{pick(docs)}"
    if task == "qa":
        question = pick((
            "What is the main purpose described in this passage?",
            "Which functions or objects does this passage mention, and what do they do?",
            "According to the passage, what should a user be careful about?",
            "Explain the passage to a beginner in your own words.",
        ))  # fmt: skip
        return f"Read the passage and answer the question.\n\nPassage:\n{pick(docs)}\n\n{question}"
    if task == "code":
        kind = int(rng.integers(3))
        if kind == 0:
            return f"Write a {pick(_LANGS_CODE)} function that {pick(_CODE_TASKS)}."
        verb = pick((
            "Explain what this Python function does.",
            "Write a docstring for this Python function.",
            "Suggest one improvement to this Python function.",
        ))  # fmt: skip
        return f"{verb}\n\n```python\n{pick(funcs)}\n```"
    if task == "story":
        return (
            f"Write {pick(_STYLES)} about {pick(_NAMES)}, who {pick(_EVENTS)} at {pick(_PLACES)}."
        )
    if task == "translation":
        if rng.random() < 0.5:
            return f"Translate into {pick(_LANGUAGES)}: {pick(_SENTENCES)}"
        first = pick(docs).split("\n\n")[0].replace("\n", " ")
        return f"Translate this sentence into {pick(_LANGUAGES)}:\n{first}"
    a, b, c = (int(x) for x in rng.integers(2, 60, size=3))
    return pick((
        f"A farmer has {a} rows of {b} plants and sells {c} plants. How many are left? "
        "Show your steps.",
        f"A bus carries {a} people, {c} get off and {b} get on. How many are on the bus now?",
        f"What is {a * b} divided by {b}, plus {c}? Explain each step.",
        f"Tickets cost {a} dollars each. How much do {b} tickets cost, and how much change do "
        f"you get from {a * b + c} dollars?",
        f"A recipe needs {a} grams of flour per cake. How much flour is needed for {b} cakes?",
    ))  # fmt: skip


def train_prompts(count: int, seed: int = 0) -> tuple[Prompt, ...]:
    """`count` distinct training prompts, the tasks in turn, none equal to an evaluation prompt.

    Args:
      count: how many (>= 1).
      seed: picks passages, functions, template words and numbers.

    Returns:
      Prompts (task, text) in a fixed order for (count, seed, Python version).
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be an integer >= 1, got {count!r}")
    docs, funcs = stdlib_material()
    rng = np.random.default_rng(seed)
    held_out = evaluation_texts()
    out, seen = [], set()
    attempts = 0
    while len(out) < count:
        task = TASKS[attempts % len(TASKS)]
        text = _make(task, rng, docs, funcs)
        attempts += 1
        if attempts > 50 * count:
            break  # the templates ran out of distinct prompts: return what there is
        if text.strip() in held_out or text in seen:
            continue
        seen.add(text)
        out.append(Prompt(task, text))
    return tuple(out)
