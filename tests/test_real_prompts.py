"""Evaluation prompt sets for the real-model measurements: the built-in set and a file of yours
(experiments/common/real_prompts.py): parsing, every malformed line named, and the split into
disjoint sets that keeps the built-in set's earlier selections."""

import json
import pathlib

import pytest

from configs import leviathan2023 as lev_config
from configs import sequoia2024 as seq_config
from experiments.common import real_prompts
from experiments.common.real_prompts import (
    PROMPTS,
    TASKS,
    Prompt,
    alternate,
    by_task,
    halves,
    load_prompts,
    prompt_set,
    shares_prompts,
    spread,
    tasks_of,
)
from experiments.leviathan2023 import real as lev_real
from experiments.sequoia2024 import real as seq_real


def _write(tmp_path, lines, name="prompts.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return str(path)


def test_the_built_in_split_keeps_the_selections_the_results_were_measured_on():
    # The slices the pipelines used before a prompt set could be given (four prompts per task,
    # grouped by task): Table 3 / the statistics on PROMPTS[0::2], leviathan2023's Table 2 on
    # PROMPTS[1::4], sequoia2024's walltime on PROMPTS[1::8].
    assert [len(by_task(t)) for t in TASKS] == [4] * 6 and tasks_of(PROMPTS) == TASKS
    assert alternate(PROMPTS) == (PROMPTS[0::2], PROMPTS[1::2])
    # scripts/bench_real.py's --num_prompts took PROMPTS[::24 // n][:n]: the same for 24 and 12
    assert spread(PROMPTS, 24) == PROMPTS and spread(PROMPTS, 12) == PROMPTS[0::2]
    lev_alpha, lev_wall = lev_real.prompt_sets(lev_config.get_config("smollm2"))
    assert lev_alpha == PROMPTS[0::2] and lev_wall == PROMPTS[1::4]
    seq_stats, seq_wall = seq_real.prompt_sets(seq_config.get_config("smollm2"))
    assert seq_stats == PROMPTS[0::2] and seq_wall == PROMPTS[1::8]
    assert prompt_set("") is PROMPTS and prompt_set(None) is PROMPTS


def test_alternate_on_uneven_tasks():
    a1, a2, a3, b1, c1, c2 = (Prompt(name[0], name) for name in "a1 a2 a3 b1 c1 c2".split())
    prompts = (a1, b1, a2, c1, a3, c2)  # tasks interleaved in the file: first seen a, b, c
    assert tasks_of(prompts) == ("a", "b", "c")
    assert by_task("a", prompts) == (a1, a2, a3)
    assert alternate(prompts) == ((a1, a3, b1, c1), (a2, c2))
    assert alternate((a1, b1)) == ((a1, b1), ())
    # spread: tasks take turns (a, b, c, a, c, a), evenly spaced within a task, grouped by task
    assert spread(prompts, 3) == (a1, b1, c1)
    assert spread(prompts, 4) == (a1, a2, b1, c1)  # a's two of three: indices 0 and 1 * 3 // 2
    assert spread(prompts, 5) == (a1, a2, b1, c1, c2)  # b has no second
    assert spread(prompts, 99) == (a1, a2, a3, b1, c1, c2)
    assert spread(prompts, 2, task_order=("c", "a", "b")) == (a1, c1)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match=r"n \(prompts to take\) must be an integer >= 1"):
            spread(prompts, bad)
    config = seq_config.get_config("smollm2")
    config.stats_prompts = 0
    with pytest.raises(ValueError, match=r"config.stats_prompts \(prompts to take\) must be"):
        seq_real.prompt_sets(config)
    with pytest.raises(ValueError, match="task_order"):
        spread(prompts, 2, task_order=("a", "b"))
    with pytest.raises(ValueError, match=r"task must be one of \('a', 'b', 'c'\), got 'd'"):
        by_task("d", prompts)


def test_a_file_of_text_and_conversations(tmp_path):
    path = _write(
        tmp_path,
        [
            {"task": "qa", "text": "Where is Lima?"},
            "",
            {
                "task": "chat",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hi."},
                    {"role": "assistant", "content": "Hello!"},
                    {"role": "user", "content": "Why is the sea salty?"},
                ],
            },
            {"task": "qa", "text": "Où est Lima ?"},
        ],
    )
    prompts = load_prompts(path)
    assert prompts == (
        Prompt("qa", "Where is Lima?"),
        Prompt(
            "chat",
            "Why is the sea salty?",
            (("system", "Be brief."), ("user", "Hi."), ("assistant", "Hello!")),
        ),
        Prompt("qa", "Où est Lima ?"),
    )
    assert prompts[0].messages == [{"role": "user", "content": "Where is Lima?"}]
    assert [m["role"] for m in prompts[1].messages] == ["system", "user", "assistant", "user"]
    assert prompts[1].messages[-1] == {"role": "user", "content": "Why is the sea salty?"}
    assert prompt_set(path) == prompts and tasks_of(prompts) == ("qa", "chat")
    config = lev_config.get_config("smollm2")
    config.prompts_file = path
    assert lev_real.prompt_sets(config) == ((prompts[0], prompts[1]), (prompts[2],))


USER = {"role": "user", "content": "x"}


@pytest.mark.parametrize(
    "line, match",
    [
        ("{not json", r"prompts\.jsonl:2: not JSON"),
        ('["task", "text"]', r":2: a line must be a JSON object, got list"),
        ({"text": "x"}, r':2: "task" must be a non-empty string, got None'),
        ({"task": " ", "text": "x"}, r'"task" must be a non-empty string'),
        ({"task": "t"}, r'give exactly one of "text" \(one user message\) and "messages"'),
        ({"task": "t", "text": "x", "messages": [USER]}, r'give exactly one of "text"'),
        ({"task": "t", "text": ""}, r'"text" must be a non-empty string'),
        ({"task": "t", "text": 3}, r'"text" must be a non-empty string, got 3'),
        ({"task": "t", "prompt": "x"}, r"unknown keys \['prompt'\]"),
        ({"task": "t", "messages": []}, r'"messages" must be a non-empty list'),
        ({"task": "t", "messages": ["x"]}, r"messages\[0\] must be an object of role and content"),
        ({"task": "t", "messages": [{"role": "user"}]}, r"messages\[0\] must be an object"),
        ({"task": "t", "messages": [{"role": "bot", "content": "x"}]}, r"messages\[0\]\.role"),
        (
            {"task": "t", "messages": [USER, {"role": "user", "content": ""}]},
            r"messages\[1\]\.content must be a non-empty string",
        ),
        (
            {"task": "t", "messages": [USER, {"role": "assistant", "content": "y"}]},
            r"the last message must be the user's, which the model answers: 'assistant'",
        ),
        ({"task": "qa", "text": "Where is Lima?"}, r":2: the same prompt .* as an earlier line"),
        ('{"task": "t", "text": "x", "text": "y"}', r":2: repeated keys \['text'\]"),
        ('{"task": "t", "text": "a\\ud800b"}', r'"text" is not valid Unicode \(surrogates'),
        ({"task": " t", "text": "x"}, r'"task" must not start or end with whitespace'),
    ],
)
def test_every_malformed_line_is_named(tmp_path, line, match):
    path = _write(tmp_path, [{"task": "qa", "text": "Where is Lima?"}, line])
    with pytest.raises(ValueError, match=match):
        load_prompts(path)


def test_a_missing_or_empty_file_a_directory_and_a_byte_order_mark(tmp_path):
    with pytest.raises(FileNotFoundError, match="prompts file .*nothing.jsonl' does not exist"):
        load_prompts(tmp_path / "nothing.jsonl")
    with pytest.raises(ValueError, match="holds no prompts"):
        load_prompts(_write(tmp_path, ["", "  "]))
    with pytest.raises(ValueError, match="is not a file"):
        load_prompts(tmp_path)
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"task": "a", "text": "x"}).encode() + b"\n")
    assert load_prompts(path) == (Prompt("a", "x"),)


def test_a_file_not_in_utf8_is_named_by_line_and_line_ends_are_kept(tmp_path):
    good = json.dumps({"task": "a", "text": "café"})
    latin = tmp_path / "latin1.jsonl"  # used to be a bare UnicodeDecodeError
    latin.write_bytes(
        good.encode()
        + b"\n"
        + json.dumps({"task": "b", "text": "café"}, ensure_ascii=False).encode("latin-1")
        + b"\n"
    )
    bad = latin.read_bytes().index(b"\xe9", len(good) + 1)  # the second line's é
    with pytest.raises(ValueError, match=rf"latin1\.jsonl:2: not UTF-8 \(byte {bad}\)"):
        load_prompts(latin)
    # With a byte-order mark (skipped), the byte and line still count in the file.
    marked = tmp_path / "marked.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + latin.read_bytes())
    with pytest.raises(ValueError, match=rf"marked\.jsonl:2: not UTF-8 \(byte {bad + 3}\)"):
        load_prompts(marked)
    # Windows and old-Mac line ends split lines as before; a raw U+2028 inside a string does not.
    mixed = tmp_path / "mixed.jsonl"
    sep = json.dumps({"task": "c", "text": "one\u2028two"}, ensure_ascii=False)
    mixed.write_bytes(
        (good + "\r\n" + sep + "\r" + json.dumps({"task": "d", "text": "y"})).encode()
    )
    assert load_prompts(mixed) == (
        Prompt("a", "café"),
        Prompt("c", "one\u2028two"),
        Prompt("d", "y"),
    )


def test_sequoia2024_takes_its_walltime_prompts_from_tasks_apart(tmp_path):
    lines = [{"task": t, "text": f"{t} {i}"} for i in (1, 2) for t in "abcd"]
    path = _write(tmp_path, lines)  # a1 b1 c1 d1 a2 b2 c2 d2
    config = seq_config.get_config("smollm2")
    config.prompts_file = path
    stats, wall = seq_real.prompt_sets(config)
    assert [p.text for p in stats] == ["a 1", "b 1", "c 1", "d 1"]
    assert [p.text for p in wall] == ["a 2", "b 2", "c 2"]  # 3: tasks a, c, then b
    lines = [{"task": t, "text": f"{t} {i}"} for t in "ab" for i in range(1, 9)]
    config.prompts_file = _write(tmp_path, lines, "long.jsonl")  # two tasks of eight, grouped
    stats, wall = seq_real.prompt_sets(config)  # stats_prompts = 12: six of each task's four
    assert [p.text for p in stats] == [f"{t} {i}" for t in "ab" for i in (1, 3, 5, 7)]
    assert [p.text for p in wall] == ["a 2", "a 6", "b 2"]
    lev = lev_config.get_config("smollm2")
    lev.prompts_file = config.prompts_file
    alpha, walltime = lev_real.prompt_sets(lev)  # 12 and 6: both tasks in each table
    assert [p.task for p in alpha] == ["a"] * 4 + ["b"] * 4
    assert [p.text for p in walltime] == ["a 2", "a 4", "a 6", "b 2", "b 4", "b 6"]  # 3 of 4


def test_one_prompt_per_task_measures_both_halves_on_every_prompt(tmp_path):
    # No task has a second prompt to hold out: both sets are the whole file (in-sample, which
    # shares_prompts reports and the pipelines print), not a refusal and not half the tasks.
    lines = [{"task": t, "text": f"{t} 1"} for t in "abcdef"]
    path = _write(tmp_path, lines)
    prompts = load_prompts(path)
    assert halves(prompts) == (prompts, prompts) and shares_prompts(prompts, prompts)
    assert not shares_prompts(*alternate(PROMPTS)) and halves(PROMPTS) == alternate(PROMPTS)
    lev = lev_config.get_config("smollm2")
    lev.prompts_file = path
    alpha, walltime = lev_real.prompt_sets(lev)  # 12 and 6 asked: all six in each
    assert alpha == prompts and walltime == prompts
    seq = seq_config.get_config("smollm2")
    seq.prompts_file = path
    stats, wall = seq_real.prompt_sets(seq)  # 12 and 3 asked: all six; three, tasks apart
    assert stats == prompts and [p.text for p in wall] == ["a 1", "c 1", "e 1"]
    assert shares_prompts(stats, wall)
    # One task with two prompts is enough for held-out halves; the others go to the first.
    path = _write(tmp_path, lines + [{"task": "b", "text": "b 2"}], "two.jsonl")
    lev.prompts_file = path
    alpha, walltime = lev_real.prompt_sets(lev)
    assert [p.text for p in walltime] == ["b 2"] and not shares_prompts(alpha, walltime)


def test_the_shipped_example_set_loads_and_shares_no_prompt_with_ours():
    assert (
        pathlib.Path(real_prompts.EXAMPLE_FILE).parent == pathlib.Path(real_prompts.__file__).parent
    )
    prompts = load_prompts(real_prompts.EXAMPLE_FILE)
    assert tasks_of(prompts) == TASKS and [len(by_task(t, prompts)) for t in TASKS] == [2] * 6
    assert not {p.messages[-1]["content"] for p in prompts} & {p.text for p in PROMPTS}
    assert sum(bool(p.context) for p in prompts) == 2  # two conversations with a system turn
