"""The broad training prompt set: seven kinds of request over passages of three sources.

`train_prompts.py` (the "stdlib" set) asks about standard-library docstrings and code and fills
a few templates; a head trained on its replies reached a held-out first-draft α of 0.36 against
0.66 on its training text. This set widens what the target is asked, in two stages, both
answered by the target (every reply is training data):
  1. `writing_prompts`: the target writes everyday passages (news reports, emails, diary
     entries, blog posts about `train_words.TOPICS`);
  2. `broad_prompts`: summaries and questions over passages drawn from three sources (those
     replies of stage 1, the stdlib's docstrings, and the prose of the Python reference that
     `pydoc_data.topics` ships with every install), code (write, explain, test, translate),
     stories (templates and written openings), translation (into and out of English),
     arithmetic word problems with seeded numbers, and everyday explanations and advice.

Everything is built from `train_words.py` (written for specjax) and text that every Python
install has. No prompt equals an evaluation prompt (`real_prompts.evaluation_texts`).

    writing = writing_prompts(960, seed=0)              # stage 1
    texts = [...the target's replies to writing...]
    prompts = broad_prompts(4800, seed=0, passages=usable_passages(texts))
"""

from __future__ import annotations

import re

import numpy as np

from experiments.common import train_words as w
from experiments.common.real_prompts import Prompt, evaluation_texts
from experiments.common.train_prompts import stdlib_material

# Stage 2's kinds, in turn (stage 1 is "writing").
KINDS = ("summary", "qa", "code", "story", "translation", "arithmetic", "chat")


def writing_prompts(count: int, seed: int = 0) -> tuple[Prompt, ...]:
    """`count` distinct stage-1 prompts (task "writing"): the target writes everyday passages."""
    _check_count(count)
    rng = np.random.default_rng([seed, 1])
    pick = _picker(rng)

    def make(_):
        form = pick(w.WRITING).format(topic=pick(w.TOPICS))
        return "writing", f"Write {form}. Keep it under {pick((80, 100, 120, 150))} words."

    return _distinct(count, ("writing",), lambda kind: make(kind))


def usable_passages(texts, min_words: int = 40, max_words: int = 220) -> tuple[str, ...]:
    """The replies of stage 1 that can serve as passages: finished text of 40-220 words, with
    no chat markup, in their order."""
    out = []
    for text in texts:
        text = text.strip()
        words = len(text.split())
        if min_words <= words <= max_words and "<|" not in text:
            out.append(text)
    return tuple(out)


def pydoc_passages(min_chars: int = 300, max_chars: int = 1000) -> tuple[str, ...]:
    """Prose passages of the Python language reference shipped as `pydoc_data.topics`: runs
    of consecutive prose paragraphs (no grammar rules, code or headings), 300-1000 characters."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # a Python built without it: the other sources remain
        return ()
    out = []
    for key in sorted(topics):
        chunk = []
        for para in re.split(r"\n\s*\n", topics[key]):
            prose = (
                para and not para.startswith(" ") and "::=" not in para and ">>>" not in para
                and not set(para.strip()) <= set("*=-") and len(para.split()) >= 8
            )  # fmt: skip
            if not prose:
                chunk = _flush(chunk, out, min_chars)
                continue
            chunk.append(" ".join(para.split()))
            if sum(len(c) for c in chunk) >= max_chars:
                chunk = _flush(chunk[:-1], out, min_chars) + [chunk[-1]]
        _flush(chunk, out, min_chars)
    return tuple(p for p in out if len(p) <= max_chars)


def broad_prompts(count: int, seed: int = 0, passages=()) -> tuple[Prompt, ...]:
    """`count` distinct stage-2 prompts, the `KINDS` in turn.

    Args:
      count: how many (>= 1).
      seed: picks the passages, templates, words and numbers.
      passages: stage 1's usable replies (`usable_passages`); the stdlib's docstrings and
        `pydoc_passages()` join them.

    Returns:
      Prompts (task, text) in a fixed order for (count, seed, passages, Python version).
    """
    _check_count(count)
    docs, funcs = stdlib_material()
    pool = (tuple(passages), tuple(docs), pydoc_passages())
    pool = tuple(p for p in pool if p)
    rng = np.random.default_rng([seed, 2])
    pick = _picker(rng)

    def passage():
        return pick(pick(pool))

    def make(kind):
        if kind == "summary":
            return kind, f"{pick(w.SUMMARY_ASKS)}\n\n{passage()}"
        if kind == "qa":
            return kind, (
                f"Read the passage and answer the question.\n\nPassage:\n{passage()}\n\n"
                f"Question: {pick(w.QUESTIONS)}"
            )
        if kind == "code":
            return kind, _code(rng, pick, funcs)
        if kind == "story":
            if rng.random() < 0.3:
                return kind, f"Continue this story in a few paragraphs:\n{pick(w.OPENERS)}"
            return kind, (
                f"Write {pick(w.STYLES)} about {pick(w.NAMES)}, who {pick(w.EVENTS)} at "
                f"{pick(w.PLACES)}."
            )
        if kind == "translation":
            return kind, _translation(rng, pick, passage)
        if kind == "arithmetic":
            return kind, _arithmetic(rng, pick)
        a, b = pick(w.PAIRS)
        return kind, pick(w.CHAT).format(
            concept=pick(w.CONCEPTS), activity=pick(w.ACTIVITIES), a=a, b=b
        )

    return _distinct(count, KINDS, make)


def _code(rng, pick, funcs) -> str:
    kind = int(rng.integers(4))
    if kind == 0:
        return f"Write a {pick(w.CODE_LANGS)} function that {pick(w.CODE_TASKS)}."
    if kind == 1:
        return f"Write a Python class for {pick(w.CLASSES)}. Include a short usage example."
    return f"{pick(w.CODE_VERBS)}\n\n```python\n{pick(funcs)}\n```"


def _translation(rng, pick, passage) -> str:
    kind = int(rng.integers(3))
    if kind == 0:
        return f"Translate into {pick(w.LANGUAGES)}: {pick(w.SENTENCES)}"
    if kind == 1:
        language, sentence = pick(w.FOREIGN)
        return f"Translate this {language} sentence into English: {sentence}"
    first = re.split(r"(?<=[.!?])\s", passage().replace("\n", " "))[0]
    return f"Translate this sentence into {pick(w.LANGUAGES)}:\n{first}"


def _arithmetic(rng, pick) -> str:
    a, b, c = (int(x) for x in rng.integers(2, 60, size=3))
    price = int(rng.integers(2, 20))
    item = pick(w.SHOP_ITEMS)
    name = pick(w.NAMES)
    return pick((
        f"A farmer has {a} rows of {b} plants and sells {c} plants. How many are left? "
        "Show your steps.",
        f"A bus carries {a} people, {c} get off and {b} get on. How many are on the bus now?",
        f"What is {a * b} divided by {b}, plus {c}? Explain each step.",
        f"{name} buys {a} {item} at {price} dollars each and pays with {a * price + c} dollars. "
        "How much change is there?",
        f"A recipe needs {a} grams of flour per cake. How much flour is needed for {b} cakes?",
        f"A train travels {a * 10} kilometres in {b % 5 + 1} hours. What is its average speed?",
        f"What is {b} percent of {a * 20}? Show how you work it out.",
        f"{name} reads {a} pages a day. How many days does a book of {a * b + c} pages take?",
        f"A shop has {a * 3} {item} and sells a third of them on Monday and {c % 10 + 1} on "
        "Tuesday. How many are left?",
        f"The average of three numbers is {a}. Two of them are {b} and {c}. What is the third?",
        f"A rectangle is {a} metres long and {b} metres wide. What are its area and perimeter?",
        f"If {name} saves {price} dollars a week, how many weeks until {name} has "
        f"{price * b} dollars?",
        f"A film starts at {b % 12 + 1}:{c % 6}0 and lasts {a + 60} minutes. When does it end?",
        f"Is {a * b + 1} a prime number? Explain how you checked.",
    ))  # fmt: skip


def _distinct(count, kinds, make, tries: int = 50) -> tuple[Prompt, ...]:
    """`count` prompts, one of each kind in turn from make(kind) = (task, text), skipping
    repeats and evaluation prompts. A kind that gives nothing new in `tries` draws is done and
    the others go on; fewer than `count` when all are done."""
    held_out = evaluation_texts()
    out, seen, live = [], set(), list(kinds)
    while live and len(out) < count:
        for kind in tuple(live):
            for _ in range(tries):
                task, text = make(kind)
                if text.strip() not in held_out and text not in seen:
                    seen.add(text)
                    out.append(Prompt(task, text))
                    break
            else:
                live.remove(kind)
            if len(out) == count:
                break
    return tuple(out)


def _flush(chunk, out, min_chars) -> list:
    text = " ".join(chunk)
    if len(text) >= min_chars:
        out.append(text)
    return []


def _picker(rng):
    return lambda seq: seq[int(rng.integers(len(seq)))]


def _check_count(count):
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be an integer >= 1, got {count!r}")
