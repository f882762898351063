"""Evaluation prompts for a real chat model: ours (written for specjax, no dataset), or yours.

Four prompts for each of six tasks: summarising a given text, answering about a given passage,
writing code, continuing a story, translating, and arithmetic word problems. They are chat
messages (`tokenizer.apply_chat_template`). They were written once, before any draft was run
on them, and are not tuned to any method; drafts trained by specjax never see them (the
training prompts of feature heads and distilled drafts, `train_prompts.py`, exclude them).

    from experiments.common.real_prompts import PROMPTS, by_task
    for case in PROMPTS: case.task, case.messages

The real-model measurements also run on a prompt set of your own, a JSON Lines file:
`--config.prompts_file=` for `configs/leviathan2023.py:smollm2` and
`configs/sequoia2024.py:smollm2`, `--config.adaptive.prompts_file=` for
`configs/extensions.py:smollm2`, `--prompts_file=` for `scripts/bench_real.py` and
`scripts/tree_vs_chain.py`. One prompt per line (`load_prompts`; `example_prompts.jsonl` beside
this file is such a set, written after the drafts were built, measured in
experiments/real/RESULTS.md):

    {"task": "qa", "text": "Read the passage and answer the question. ..."}
    {"task": "chat", "messages": [{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": "Why is the sea salty?"}]}

Tasks are free names, reported in the order they first appear. Measurements that need two
disjoint sets (α on one, walltime on prompts held out from it) take each task's prompts
alternately (`alternate`); a measurement that takes n prompts takes them spread over the tasks
(`spread`), never the first n lines.
"""

from __future__ import annotations

import codecs
import dataclasses
import io
import json
import os

ROLES = ("system", "user", "assistant")
# A second evaluation set of ours, in the prompts-file format (experiments/real/RESULTS.md).
EXAMPLE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "example_prompts.jsonl")


@dataclasses.dataclass(frozen=True)
class Prompt:
    """One evaluation prompt.

    Attributes:
      task: the task's name ("summary", "qa", "code", "story", "translation", "arithmetic" in
        the built-in set; any non-empty name in a prompts file).
      text: the user's message, the last turn, which the model answers.
      context: earlier turns as (role, content) pairs (a system message, earlier exchanges);
        empty for a single user message.
    """

    task: str
    text: str
    context: tuple[tuple[str, str], ...] = ()

    @property
    def messages(self) -> list[dict]:
        """The conversation as chat messages, ending with the user's `text`."""
        turns = [{"role": role, "content": content} for role, content in self.context]
        return turns + [{"role": "user", "content": self.text}]


_SUMMARY = [
    "Summarise in two sentences: The town council met on Tuesday to discuss the new bicycle "
    "lanes on Main Street. Shop owners worried that removing parking spaces would hurt their "
    "business, while cyclists said the lanes would make the street safer. After three hours of "
    "debate, the council voted to build the lanes on a trial basis for six months and to count "
    "customers and accidents before making a final decision.",
    "Give a short summary of this note: Our team moved the weekly meeting from Monday to "
    "Wednesday because two people work remotely on Mondays. The meeting will now start at ten "
    "instead of nine, and it will last thirty minutes instead of an hour. Please add your "
    "updates to the shared document before the meeting so we can read them in advance.",
    "Summarise the main idea: Honeybees communicate the location of food through a waggle "
    "dance. The angle of the dance relative to vertical tells other bees the direction of the "
    "food relative to the sun, and the length of the waggle run tells them how far away it is. "
    "Scientists decoded this language in the twentieth century by watching hives with glass "
    "walls.",
    "Summarise this review in one sentence: The hotel was close to the station and the staff "
    "were friendly, but the room was small and the walls were thin, so we heard our neighbours "
    "every night. Breakfast was good value. I would stay again for a short trip, but not for a "
    "long holiday.",
]

_QA = [
    "Read the passage and answer the question.\nPassage: The library opens at 8 am on weekdays "
    "and at 10 am on Saturdays. It is closed on Sundays. Children under twelve must be with an "
    "adult after 6 pm.\nQuestion: Can a ten-year-old visit the library alone at 7 pm on a "
    "Tuesday?",
    "Passage: Mount Kilimanjaro is in Tanzania. Its highest peak, Uhuru, is 5,895 metres above "
    "sea level. Most climbers take five to nine days to reach the summit, and the slower routes "
    "have higher success rates because they allow the body to adapt to altitude.\nQuestion: "
    "Why do slower routes up Kilimanjaro succeed more often?",
    "Context: Maria planted tomatoes in April. They need about eighty days from planting to "
    "harvest. She went on holiday for the first two weeks of July.\nQuestion: Will Maria miss "
    "the first harvest? Explain briefly.",
    "Here is a short text: The recipe needs two eggs, 200 grams of flour, 100 grams of sugar "
    "and a pinch of salt. Mix the dry ingredients first, then add the eggs one at a time.\n"
    "Question: What should be mixed before the eggs are added?",
]

_CODE = [
    "Write a Python function that returns the n-th Fibonacci number using a loop.",
    "Write a Python function is_palindrome(s) that ignores spaces and capital letters.",
    "Write a Python function that counts how many times each word appears in a string and "
    "returns a dictionary.",
    "Write a JavaScript function that takes an array of numbers and returns the largest even "
    "number, or null if there is none.",
]

_STORY = [
    "Continue the story: The lighthouse keeper had not seen a ship in forty days when, one "
    "foggy morning, he heard a bell ringing somewhere out at sea.",
    "Write the next paragraph of this story: Tom found an old key under the floorboards of his "
    "grandmother's kitchen. It was small, made of brass, and had a number engraved on it.",
    "Continue: The robot had been built to sweep floors, but one day it stopped in front of a "
    "painting and did not move for an hour.",
    "Tell a short story that begins with: The last train of the night was almost empty, except "
    "for a woman carrying a cage with a very large bird inside.",
]

_TRANSLATION = [
    "Translate into French: The weather is nice today, so we are going to the park after lunch.",
    "Translate into Spanish: Where is the nearest train station? I need to buy a ticket to "
    "the city centre.",
    "Translate into German: My brother is a teacher, and he works at a school near the river.",
    "Translate this sentence into French: Please close the window before you leave the room.",
]

_ARITHMETIC = [
    "A shop sells pencils at 3 dollars for a pack of 4. How much do 20 pencils cost? Show your "
    "steps.",
    "Sam reads 12 pages every day. His book has 180 pages. How many days will he need to finish "
    "it? Explain.",
    "A train leaves at 9:40 and the trip takes 2 hours and 35 minutes. At what time does it "
    "arrive? Show your work.",
    "There are 5 boxes with 24 apples each. If 17 apples are rotten, how many good apples are "
    "there? Solve step by step.",
]

TASKS = ("summary", "qa", "code", "story", "translation", "arithmetic")

PROMPTS = tuple(
    Prompt(task, text)
    for task, texts in zip(
        TASKS, (_SUMMARY, _QA, _CODE, _STORY, _TRANSLATION, _ARITHMETIC), strict=True
    )
    for text in texts
)


def tasks_of(prompts) -> tuple[str, ...]:
    """The task names of `prompts`, in the order they first appear."""
    return tuple(dict.fromkeys(p.task for p in prompts))


def by_task(task: str, prompts=PROMPTS) -> tuple[Prompt, ...]:
    """The prompts of one task, in their order (`prompts`: the built-in set by default)."""
    tasks = tasks_of(prompts)
    if task not in tasks:
        raise ValueError(f"task must be one of {tasks}, got {task!r}")
    return tuple(p for p in prompts if p.task == task)


def alternate(prompts) -> tuple[tuple[Prompt, ...], tuple[Prompt, ...]]:
    """Two disjoint sets, each task's prompts taken alternately: its 1st, 3rd, ... and 2nd, 4th...

    Both are grouped by task (tasks in order of appearance). On the built-in set:
    `PROMPTS[0::2]` and `PROMPTS[1::2]`.
    """
    groups = [by_task(task, prompts) for task in tasks_of(prompts)]
    return tuple(p for g in groups for p in g[0::2]), tuple(p for g in groups for p in g[1::2])


def halves(prompts) -> tuple[tuple[Prompt, ...], tuple[Prompt, ...]]:
    """A measurement's two prompt sets: `alternate`'s, disjoint, where some task has two prompts.

    Where every task has one prompt there is no second set to hold out, and both sets are the
    whole set: the second is measured in-sample (`shares_prompts` tells; the pipelines say it in
    their logs, results and reports).
    """
    first, second = alternate(prompts)
    return (first, second) if second else (first, first)


def shares_prompts(first, second) -> bool:
    """Whether two prompt sets hold a common prompt (the second is then not held out)."""
    return bool(set(first) & set(second))


def spread(prompts, n: int, task_order=None, name: str = "n") -> tuple[Prompt, ...]:
    """n of `prompts` (all if fewer), spread over their tasks, grouped by task.

    Tasks take turns, in `task_order` (default: order of appearance), each turn adding one
    prompt to a task that has one left, so the counts differ by at most one where the tasks
    allow it; within a task the picks are evenly spaced (indices ⌊j·m/k⌋ of its m prompts for
    k picks). On the built-in set (four per task): 24 is `PROMPTS`, 12 is `PROMPTS[0::2]`, 6 is
    `PROMPTS[0::4]`; of `alternate`'s second set, 6 is `PROMPTS[1::4]`, and 3 with the tasks
    ordered `tasks[0::2] + tasks[1::2]` is `PROMPTS[1::8]`. `name` names n in errors.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{name} (prompts to take) must be an integer >= 1, got {n!r}")
    tasks = tasks_of(prompts)
    order = tuple(task_order) if task_order is not None else tasks
    if sorted(order) != sorted(tasks):
        raise ValueError(f"task_order {order} must hold the prompts' tasks {tasks}")
    groups = {task: by_task(task, prompts) for task in tasks}
    counts = dict.fromkeys(tasks, 0)
    left = min(n, len(prompts))
    while left:
        for task in order:
            if left and counts[task] < len(groups[task]):
                counts[task] += 1
                left -= 1
    return tuple(
        groups[t][(j * len(groups[t])) // counts[t]] for t in tasks for j in range(counts[t])
    )


def _fail(where: str, what: str):
    raise ValueError(f"prompts file {where}: {what}")


def _text(value, where: str, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        _fail(where, f"{name} must be a non-empty string, got {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate ("\ud800" in the JSON)
        _fail(where, f"{name} is not valid Unicode ({e.reason} at index {e.start})")
    return value


def _no_duplicate_keys(pairs):
    keys = [k for k, _ in pairs]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise ValueError(f"repeated keys {repeated}")
    return dict(pairs)


def _parse_line(record, where: str) -> Prompt:
    """One line's Prompt (see `load_prompts`); `where` is "path:line" for errors."""
    if not isinstance(record, dict):
        _fail(where, f"a line must be a JSON object, got {type(record).__name__}")
    unknown = sorted(set(record) - {"task", "text", "messages"})
    if unknown:
        _fail(where, f"unknown keys {unknown} (a line holds task and text, or task and messages)")
    task = _text(record.get("task"), where, '"task"')
    if task != task.strip():
        _fail(where, f'"task" must not start or end with whitespace, got {task!r}')
    if ("text" in record) == ("messages" in record):
        _fail(where, 'give exactly one of "text" (one user message) and "messages"')
    if "text" in record:
        return Prompt(task, _text(record["text"], where, '"text"'))
    messages = record["messages"]
    if not isinstance(messages, list) or not messages:
        _fail(where, f'"messages" must be a non-empty list, got {messages!r}')
    turns = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or set(m) != {"role", "content"}:
            _fail(where, f"messages[{i}] must be an object of role and content, got {m!r}")
        if m["role"] not in ROLES:
            _fail(where, f"messages[{i}].role must be one of {ROLES}, got {m['role']!r}")
        turns.append((m["role"], _text(m["content"], where, f"messages[{i}].content")))
    if turns[-1][0] != "user":
        _fail(
            where, f"the last message must be the user's, which the model answers: {turns[-1][0]!r}"
        )
    return Prompt(task, turns[-1][1], tuple(turns[:-1]))


def load_prompts(path) -> tuple[Prompt, ...]:
    """Evaluation prompts from a JSON Lines file, one prompt per line (blank lines skipped).

    A line is {"task": name, "text": the user's message}, or {"task": name, "messages": [{"role":
    "system" | "user" | "assistant", "content": str}, ...]} ending with a user message.

    Raises:
      FileNotFoundError: no such file.
      ValueError: a line that is not such an object or repeats an earlier one (naming the file
        and line), or a file without prompts.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"prompts file {path!r} does not exist")
    if not os.path.isfile(path):
        raise ValueError(f"prompts file {path!r} is not a file")
    prompts, seen = [], set()
    with open(path, "rb") as f:
        data = f.read()
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0  # skipped
    try:
        text = data[bom:].decode("utf-8")
    except UnicodeDecodeError as e:  # named by line, like every other error of the file
        at = bom + e.start  # in the file, the mark included
        line = data[:at].count(b"\n") + 1
        _fail(f"{path}:{line}", f"not UTF-8 (byte {at}); save the file as UTF-8")
    # Lines as a text-mode file splits them (\n, \r\n, \r), not str.splitlines (U+2028 too).
    for number, line in enumerate(io.StringIO(text, newline=None), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line, object_pairs_hook=_no_duplicate_keys)
        except json.JSONDecodeError as e:
            _fail(where, f"not JSON ({e.msg} at column {e.colno})")
        except ValueError as e:  # from _no_duplicate_keys
            _fail(where, str(e))
        prompt = _parse_line(record, where)
        if prompt in seen:  # a set: training files may hold thousands of prompts
            _fail(where, "the same prompt (task and messages) as an earlier line")
        seen.add(prompt)
        prompts.append(prompt)
    if not prompts:
        raise ValueError(f"prompts file {path!r} holds no prompts")
    return tuple(prompts)


def evaluation_texts() -> frozenset[str]:
    """The user messages of our evaluation prompts (the built-in set and `EXAMPLE_FILE`),
    whitespace stripped: what training prompts must never be."""
    return frozenset(p.text.strip() for p in PROMPTS + load_prompts(EXAMPLE_FILE))


def prompt_set(prompts_file: str | None = "") -> tuple[Prompt, ...]:
    """The prompts a real-model measurement runs on: `load_prompts(prompts_file)`, or the
    built-in `PROMPTS` when it is empty or None."""
    return load_prompts(prompts_file) if prompts_file else PROMPTS


# Prompts whose replies are the target's own samples for drafts that are fitted on target text
# (the sparse bigram of bench_real.py). Not evaluation prompts: none of them is in PROMPTS.
SAMPLE_PROMPTS = (
    "Explain what a hash table is and when to use one.",
    "Write a short email inviting a colleague to lunch on Friday.",
    "Describe the water cycle for a ten-year-old.",
    "Give three tips for learning a new language.",
    "Write a Python function that reverses the words in a sentence.",
    "What are the main causes of the seasons on Earth?",
    "Write a haiku about autumn leaves and explain it.",
    "List the steps to make a cup of tea.",
    "Translate into Italian: I would like a table for two, please.",
    "A farmer has 3 fields with 45 trees each. How many trees are there in total?",
    "Summarise the plot of a detective story in three sentences.",
    "Why is the sky blue? Answer briefly.",
)
