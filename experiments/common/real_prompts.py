"""Evaluation prompts for a real chat model, written for specjax (no downloaded dataset).

Four prompts for each of six tasks: summarising a given text, answering about a given passage,
writing code, continuing a story, translating, and arithmetic word problems. They are chat
messages (`tokenizer.apply_chat_template`). They were written once, before any draft was run
on them, and are not tuned to any method; drafts trained by specjax never see them
(`HELD_OUT`: the training prompts of feature heads and distilled drafts live elsewhere).

    from experiments.common.real_prompts import PROMPTS, by_task
    for case in PROMPTS: case.task, case.messages
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Prompt:
    """One evaluation prompt.

    Attributes:
      task: "summary", "qa", "code", "story", "translation" or "arithmetic".
      text: the user's message.
    """

    task: str
    text: str

    @property
    def messages(self) -> list[dict]:
        return [{"role": "user", "content": self.text}]


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


def by_task(task: str) -> tuple[Prompt, ...]:
    """The prompts of one task."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    return tuple(p for p in PROMPTS if p.task == task)


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
