"""The broad training prompt set (`experiments/common/broad_prompts.py`): counts, balance over
kinds, distinctness, determinism, passages in use, and no evaluation prompt among them."""

from __future__ import annotations

import collections

import pytest

from experiments.common import broad_prompts as bp
from experiments.common.real_prompts import evaluation_texts


def _passages(n):
    return tuple(
        f"Passage {i}: the ferry to the island leaves at {i} o'clock. " * 6 for i in range(n)
    )


def test_stage_two_is_balanced_distinct_deterministic_and_held_out():
    prompts = bp.broad_prompts(700, seed=3, passages=_passages(200))
    assert len(prompts) == 700
    texts = [p.text for p in prompts]
    assert len(set(texts)) == 700
    assert not set(t.strip() for t in texts) & evaluation_texts()
    counts = collections.Counter(p.task for p in prompts)
    assert set(counts) == set(bp.KINDS)
    assert max(counts.values()) - min(counts.values()) <= 1  # 100 each: no kind ran out
    assert bp.broad_prompts(700, seed=3, passages=_passages(200)) == prompts
    other = bp.broad_prompts(700, seed=4, passages=_passages(200))
    assert len(set(texts) & {p.text for p in other}) < 350


def test_a_kind_that_runs_out_leaves_its_share_to_the_others():
    # "chat" has a few hundred distinct prompts; asking for far more fills from the rest.
    prompts = bp.broad_prompts(7000, seed=0, passages=_passages(500))
    counts = collections.Counter(p.task for p in prompts)
    assert len(prompts) == 7000 and len({p.text for p in prompts}) == 7000
    assert counts["chat"] < 1000 < min(c for k, c in counts.items() if k != "chat")


def test_summaries_and_questions_read_the_passages_of_every_source():
    ours = _passages(50)
    prompts = bp.broad_prompts(1400, seed=1, passages=ours)
    over_passages = [p.text for p in prompts if p.task in ("summary", "qa")]
    assert len(over_passages) == 400
    from_ours = sum(any(x in t for x in ours) for t in over_passages)
    pydoc = bp.pydoc_passages()
    from_pydoc = sum(any(x in t for x in pydoc) for t in over_passages)
    # Three sources picked uniformly: a third each, well inside these bounds.
    assert 80 < from_ours < 200 and 80 < from_pydoc < 200


def test_writing_prompts_and_usable_passages():
    writing = bp.writing_prompts(500, seed=0)
    assert len({p.text for p in writing}) == 500 and {p.task for p in writing} == {"writing"}
    words = lambda n: " ".join(["word"] * n)  # noqa: E731
    texts = [
        words(39),
        words(40),
        words(220),
        words(221),
        words(60) + " <|im_end|>",
        " " + words(50),
    ]
    assert bp.usable_passages(texts) == (words(40), words(220), words(50))


def test_pydoc_passages_are_prose_of_the_asked_length():
    passages = bp.pydoc_passages()
    assert len(passages) > 100
    assert all(300 <= len(p) <= 1000 for p in passages)
    assert not any("::=" in p or ">>>" in p for p in passages)


@pytest.mark.parametrize("count", [0, -1, 2.5, True])
def test_a_bad_count_is_named(count):
    for make in (bp.broad_prompts, bp.writing_prompts):
        with pytest.raises(ValueError, match="count must be an integer >= 1"):
            make(count)
