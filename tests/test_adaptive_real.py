"""The adaptive-γ part on a real-target path (`configs/extensions.py:smollm2`).

A tiny random Llama written as a GGUF file with a chat template (tests/gguf_writer.py) stands in
for SmolLM2; its distilled one-layer draft is trained here for a few steps (the heads mode, as
the real run trains distilled2). Checks the real path's bookkeeping: every decoder on every task
and the mixed set, the mixed set's counts the sum of the tasks', greedy decoders identical, the
goals recomputed from the rows, and the report a function of results.json. The figures of the
real run: experiments/extensions/README.md.
"""

import json
import os
import types

import numpy as np
import pytest

from configs import extensions as ext_config
from experiments.common.real_prompts import TASKS
from experiments.extensions import adaptive, adaptive_reading, adaptive_real, ceiling, pipeline
from tests.gguf_writer import write_tiny_chat_pair


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    path, head_dir = write_tiny_chat_pair(tmp_path_factory.mktemp("adaptive-real"), steps=2)
    root = os.path.dirname(path)
    config = ext_config.get_config("smollm2,gammas=1/2,per_task=1,repeats=2,temperatures=0")
    c = config.adaptive
    c.pretrained = path
    c.draft_head = head_dir
    c.policies = ("heuristic", "theory_loop+auto")  # +auto: calibrated like theory_loop
    c.max_new_tokens = 5
    c.cost_context = 8
    workdir = os.path.join(root, "run")
    return config, workdir, pipeline.run(config, workdir, log=lambda *_: None)["adaptive"]


def test_every_decoder_runs_every_task_and_the_mixed_set_sums_them(run):
    config, _, results = run
    (block,) = results["blocks"]
    labels = [f"fixed{g}" for g in config.adaptive.gammas] + list(config.adaptive.policies)
    assert set(block["sets"]) == set(TASKS) | {adaptive_reading.MIXED}
    for name, s in block["sets"].items():
        assert [r["decoder"] for r in s["rows"]] == labels, name
        best = next(r for r in s["rows"] if r["decoder"] == s["best_fixed"])
        assert best["vs_best_fixed"] == pytest.approx(1.0)
        for r in s["rows"]:
            assert len(r["ms_per_token_samples"]) == config.adaptive.repeats
            assert r["vs_best_fixed_low"] <= r["vs_best_fixed"] <= r["vs_best_fixed_high"]
            if r["decoder"].startswith("fixed"):
                assert r["vs_best_fixed"] <= 1.0 + 1e-12  # the best fixed γ is the fastest
        # The held-out reference: round i reads the fixed γ fastest on the other fold's round.
        fixed = {r["decoder"]: r["ms_per_token_samples"] for r in s["rows"]}
        fixed = {k: v for k, v in fixed.items() if k[5:].isdigit()}  # fixed<γ>
        picks = [min(fixed, key=lambda g, i=i: fixed[g][1 - i]) for i in (0, 1)]
        assert s["held_out_picks"] == picks, name
        reference = [fixed[picks[0]][0], fixed[picks[1]][1]]
        for r in s["rows"]:
            expected = np.median(reference) / np.median(r["ms_per_token_samples"])
            assert r["vs_held_out"] == pytest.approx(expected, rel=1e-12)
            assert r["vs_held_out_low"] <= r["vs_held_out"] <= r["vs_held_out_high"]
    for label in labels:
        tokens = [
            next(r["tokens"] for r in block["sets"][t]["rows"] if r["decoder"] == label)
            for t in TASKS
        ]
        mixed = next(
            r for r in block["sets"][adaptive_reading.MIXED]["rows"] if r["decoder"] == label
        )
        assert mixed["tokens"] == sum(tokens) > 0
    assert block["greedy_identical"] is True  # lossless: every γ and policy, token for token


def test_goals_follow_from_the_rows(run):
    config, _, results = run
    (block,) = results["blocks"]
    recomputed = adaptive_reading.goals(block["sets"], config.adaptive.policies)
    assert json.loads(json.dumps(recomputed)) == block["goals"]
    g = block["goals"]
    assert g["per_task_ok"] == all(v >= 0.97 for v in g["per_task_low"].values())
    assert g["mixed_ok"] == (g["mixed"][1] > 1.0)
    assert g["per_task_ok_held_out"] == all(v >= 0.97 for v in g["per_task_low_held_out"].values())
    assert g["mixed_ok_held_out"] == (g["mixed_held_out"][1] > 1.0)
    best = next(r for r in block["sets"]["mixed"]["rows"] if r["decoder"] == g["best_policy"])
    assert g["mixed_held_out"] == [
        best["vs_held_out"],
        best["vs_held_out_low"],
        best["vs_held_out_high"],
    ]


def test_results_saved_before_the_held_out_reference_are_rederived_from_their_rounds(run):
    _, _, results = run
    old = json.loads(json.dumps(results))
    for block in old["blocks"]:
        block["goals"] = {k: v for k, v in block["goals"].items() if "held_out" not in k}
        for set_block in block["sets"].values():
            del set_block["held_out_picks"]
            for r in set_block["rows"]:
                for key in ("vs_held_out", "vs_held_out_low", "vs_held_out_high"):
                    del r[key]
        del block["ceiling"]
    assert adaptive_reading.rederive(old) == json.loads(json.dumps(results))


def test_rederive_picks_among_the_fixed_gammas_only():
    """A stored run with `fixed_via_adaptive+auto` (a policy whose label starts with "fixed"):
    the held-out reference picks among fixed<γ> decoders alone."""
    path = os.path.join(
        os.path.dirname(adaptive_reading.__file__),
        "results",
        "adaptive_smollm2_lookup_path_t0.json",
    )
    with open(path, encoding="utf-8") as f:
        results = adaptive_reading.rederive(json.load(f))
    for set_block in results["blocks"][0]["sets"].values():
        assert set_block["held_out_picks"] == ["fixed4", "fixed4"]


def test_the_per_task_ceiling_follows_from_the_rows(run):
    """The oracle's picks and its mixed-set time recomputed by hand from the stored rows; with
    one γ for every task it is that γ's mixed row exactly."""
    _, _, results = run
    (block,) = results["blocks"]
    sets, tasks = block["sets"], list(TASKS)
    fixed = [r["decoder"] for r in sets["mixed"]["rows"] if r["decoder"][5:].isdigit()]
    rows = {t: {r["decoder"]: r for r in sets[t]["rows"]} for t in [*tasks, "mixed"]}
    for g in fixed:
        same = ceiling.composite(sets, {t: [g, g] for t in tasks})
        np.testing.assert_allclose(same, rows["mixed"][g]["ms_per_token_samples"], rtol=1e-12)
    got = block["ceiling"]
    after = got["after_the_fact"]
    assert after["picks"] == {t: sets[t]["best_fixed"] for t in tasks}
    seconds = sum(
        np.asarray(rows[t][g]["ms_per_token_samples"]) * rows[t][g]["tokens"]
        for t, g in after["picks"].items()
    )
    tokens = sum(rows[t][g]["tokens"] for t, g in after["picks"].items())
    reference = rows["mixed"][sets["mixed"]["best_fixed"]]["ms_per_token_samples"]
    assert after["ratio"] == pytest.approx(np.median(reference) / np.median(seconds / tokens))
    held = got["held_out"]
    for t in tasks:  # round i reads the γ fastest on the other round (two rounds)
        samples = {g: rows[t][g]["ms_per_token_samples"] for g in fixed}
        assert held["picks"][t] == [
            min(fixed, key=lambda g, i=i: samples[g][1 - i]) for i in (0, 1)
        ]
    assert after["low"] <= after["high"] and held["low"] <= held["high"]
    assert "Ceiling of per-task adaptation" in adaptive_real.report_block(block)


def test_the_ceiling_on_rows_by_hand():
    """Two tasks, two γ, two rounds, 10 tokens per task and decoder (ms/token by hand). Task a:
    γ = 1 has the lower median, but round 0 read on round 1 picks γ = 2; task b is fastest at
    γ = 2; the single best γ on the mixed set is 2 in every reading."""

    def rows(best, table):
        return {
            "best_fixed": best,
            "rows": [dict(decoder=g, tokens=10, ms_per_token_samples=v) for g, v in table],
        }

    sets = {
        "a": rows("fixed1", [("fixed1", [1.0, 2.6]), ("fixed2", [2.0, 2.0])]),
        "b": rows("fixed2", [("fixed1", [4.0, 4.0]), ("fixed2", [2.0, 2.0])]),
        # 20 tokens, a round's milliseconds summed: fixed1 10 + 40 and 26 + 40, fixed2 20 + 20.
        "mixed": rows("fixed2", [("fixed1", [2.5, 3.3]), ("fixed2", [2.0, 2.0])]),
    }
    fixed = ["fixed1", "fixed2"]
    np.testing.assert_allclose(ceiling.composite(sets, {"a": fixed[:1] * 2, "b": fixed[:1] * 2}),
                               [2.5, 3.3])  # fmt: skip
    got = ceiling.per_task_ceiling(sets, fixed, ["a", "b"])
    # After the fact: a at γ = 1 (10, 26 ms), b at γ = 2 (20, 20 ms): 1.5 and 2.3 ms/token.
    assert got["after_the_fact"]["picks"] == {"a": "fixed1", "b": "fixed2"}
    assert got["after_the_fact"]["ratio"] == pytest.approx(2.0 / 1.9)
    # Held out: a's round 0 at γ = 2 (20 ms), round 1 at γ = 1 (26 ms): 2.0 and 2.3 ms/token.
    assert got["held_out"]["picks"] == {"a": ["fixed2", "fixed1"], "b": ["fixed2", "fixed2"]}
    assert got["held_out"]["ratio"] == pytest.approx(2.0 / 2.15)
    low, high = got["held_out"]["low"], got["held_out"]["high"]
    assert low < 2.0 / 2.15 < high
    one_round = {
        name: dict(s, rows=[dict(r, ms_per_token_samples=r["ms_per_token_samples"][:1])
                            for r in s["rows"]])
        for name, s in sets.items()
    }  # fmt: skip
    short = ceiling.per_task_ceiling(one_round, fixed, ["a", "b"])
    assert short["held_out"] is None and short["after_the_fact"]["low"] is None
    assert short["after_the_fact"]["ratio"] == pytest.approx(2.0 / 1.5)


def test_the_cpu_clock_reading_recomputes_every_figure(run):
    """`on_cpu_clock` reads the rows' CPU samples: the picks and ratios by hand from them, and
    with CPU samples equal to the wall ones it gives back the wall reading."""
    _, _, results = run
    before = json.dumps(results)
    cpu = adaptive_reading.on_cpu_clock(results)
    assert json.dumps(results) == before  # the wall reading is left as it was
    assert cpu["clock"] == "cpu" and "process CPU clock" in adaptive_real.report(cpu)
    (block,), (wall_block,) = cpu["blocks"], results["blocks"]
    fixed = [r["decoder"] for r in block["sets"]["mixed"]["rows"] if r["decoder"][5:].isdigit()]
    for name, s in block["sets"].items():
        rows = {r["decoder"]: r for r in s["rows"]}
        wall_rows = {r["decoder"]: r for r in wall_block["sets"][name]["rows"]}
        for label, r in rows.items():
            assert r["ms_per_token_samples"] == wall_rows[label]["ms_per_token_cpu_samples"]
        best = min(fixed, key=lambda g: np.median(rows[g]["ms_per_token_samples"]))
        assert s["best_fixed"] == best, name
        for r in rows.values():
            expected = np.median(rows[best]["ms_per_token_samples"]) / np.median(
                r["ms_per_token_samples"]
            )
            assert r["vs_best_fixed"] == pytest.approx(expected, rel=1e-12)
    tasks = [t for t in block["sets"] if t != "mixed"]
    assert block["goals"] == adaptive_reading.goals(block["sets"], cpu["policies"], tasks)
    assert block["ceiling"] == ceiling.per_task_ceiling(block["sets"], fixed, tasks)
    same = json.loads(before)
    for s in same["blocks"][0]["sets"].values():
        for r in s["rows"]:
            r["ms_per_token_cpu_samples"] = r["ms_per_token_samples"]
    again = adaptive_reading.on_cpu_clock(same)
    assert again.pop("clock") == "cpu" and again == same
    for s in same["blocks"][0]["sets"].values():
        for r in s["rows"]:
            del r["ms_per_token_cpu_samples"]
    with pytest.raises(ValueError, match="no CPU samples"):
        adaptive_reading.on_cpu_clock(same)


def test_goal_bounds_are_checked_per_task():
    row = dict(vs_best_fixed=1.1, vs_best_fixed_low=1.01, vs_best_fixed_high=1.2)
    sets = {t: {"rows": [dict(row, decoder="p")]} for t in ("a", "b")}
    sets[adaptive_reading.MIXED] = {"rows": [dict(row, decoder="p")]}
    assert adaptive_reading.goals(sets, ["p"], tasks=("a", "b"))["per_task_ok"] is True
    assert adaptive_reading.goals(sets, ["p"], tasks=("a", "b"))["mixed_ok"] is True
    sets["b"]["rows"][0]["vs_best_fixed_low"] = 0.96  # one task below 0.97 fails goal 1
    assert adaptive_reading.goals(sets, ["p"], tasks=("a", "b"))["per_task_ok"] is False
    sets[adaptive_reading.MIXED]["rows"][0]["vs_best_fixed_low"] = 0.99  # interval covers 1.0
    assert adaptive_reading.goals(sets, ["p"], tasks=("a", "b"))["mixed_ok"] is False
    # The held-out reference is judged apart: absent (results of one round), never met.
    goals = adaptive_reading.goals(sets, ["p"], tasks=("a", "b"))
    assert goals["per_task_ok_held_out"] is False and goals["mixed_ok_held_out"] is False
    held = dict(vs_held_out=1.05, vs_held_out_low=1.02, vs_held_out_high=1.1)
    for name in ("a", "b", adaptive_reading.MIXED):
        sets[name]["rows"][0].update(held)
    goals = adaptive_reading.goals(sets, ["p"], tasks=("a", "b"))
    assert goals["per_task_ok_held_out"] is True and goals["mixed_ok_held_out"] is True
    assert goals["per_task_ok"] is False  # the after-the-fact reference still fails task b
    sets["a"]["rows"][0]["vs_held_out_low"] = 0.965
    assert adaptive_reading.goals(sets, ["p"], tasks=("a", "b"))["per_task_ok_held_out"] is False


def test_the_report_is_a_function_of_the_saved_results(run):
    _, workdir, _ = run
    with open(os.path.join(workdir, "adaptive", "results.json"), encoding="utf-8") as f:
        saved = json.load(f)
    with open(os.path.join(workdir, "adaptive", "results.md"), encoding="utf-8") as f:
        assert f.read() == adaptive.report(saved) + "\n"
    assert "distilled1-tiny" in adaptive.report(saved)


def test_the_smollm2_preset_measures_the_adaptive_part_alone():
    assert ext_config.get_config("smollm2").parts == ("adaptive",)
    with pytest.raises(ValueError, match="adaptive part alone"):
        ext_config.get_config("smollm2,parts=adaptive/beam")
    with pytest.raises(ValueError, match="adaptive part alone"):
        ext_config.get_config("smollm2,tiny")


def test_a_decoder_with_other_tokens_breaks_greedy_identity():
    def timing(*rows):
        return types.SimpleNamespace(
            output=[types.SimpleNamespace(tokens=np.array(r)) for r in rows]
        )

    timed = {(label, task): timing([1, 2, 3]) for label in ("fixed1", "p") for task in TASKS}
    assert adaptive_real._identical(timed, ["fixed1", "p"], "fixed1", TASKS) is True
    timed[("p", TASKS[-1])] = timing([1, 2, 4])  # one token differs, on one task
    assert adaptive_real._identical(timed, ["fixed1", "p"], "fixed1", TASKS) is False


def test_theory_loop_needs_every_gamma_up_to_gamma_max_before_any_work():
    config = ext_config.get_config("smollm2,gammas=2/3")
    config.adaptive.pretrained = "/nonexistent.gguf"  # never reached: the check comes first
    with pytest.raises(ValueError, match="theory_loop needs gammas"):
        adaptive_real.run(config.adaptive, "", log=lambda *_: None)


def test_prompt_lookup_under_every_policy_is_greedy_identical(tmp_path, monkeypatch):
    """draft_head="lookup": the policies cut prompt lookup's proposals (TruncatedDrafter); every
    decoder emits the first fixed γ's tokens at t = 0. On a prompts file of two tasks of ours
    (`prompts_file`): the sets are its tasks and the mixed set."""
    from tests.gguf_writer import write_tiny_gguf

    path = os.path.join(tmp_path, "tiny.gguf")
    write_tiny_gguf(path, context=1024, tied=True)
    config = ext_config.get_config("smollm2,gammas=1/2,per_task=1,repeats=1,temperatures=0")
    c = config.adaptive
    c.pretrained, c.draft_head = path, "lookup"
    c.prompts_file = os.path.join(tmp_path, "prompts.jsonl")
    with open(c.prompts_file, "w", encoding="utf-8") as f:
        f.write('{"task": "echo", "text": "Repeat: red, green, red, green, red."}\n')
        f.write('{"task": "count", "text": "Count from 1 to 9."}\n')
    c.policies = ("heuristic+auto", "theory_loop+auto")
    c.max_new_tokens, c.cost_context = 6, 8
    order = []
    timed = adaptive_real.interleaved
    monkeypatch.setattr(
        adaptive_real, "interleaved", lambda calls, *a: order.extend(calls) or timed(calls, *a)
    )
    results = adaptive_real.run(c, "", log=lambda *_: None)
    labels = ["fixed1", "fixed2", *c.policies]
    # Task by task: every decoder on one task back to back, then the next task.
    assert order == [(label, task) for task in ("echo", "count") for label in labels]
    (block,) = results["blocks"]
    assert results["draft"] == "prompt lookup" and results["c"] == 0.0
    assert block["greedy_identical"] is True
    mixed = block["sets"][adaptive_reading.MIXED]["rows"]
    assert [r["decoder"] for r in mixed] == ["fixed1", "fixed2", *c.policies]
    assert list(block["sets"]) == ["echo", "count", adaptive_reading.MIXED]
    assert results["tasks"] == ["echo", "count"] and results["prompts_file"] == c.prompts_file
    c.prompts_file = os.path.join(tmp_path, "mixed.jsonl")
    with open(c.prompts_file, "w", encoding="utf-8") as f:
        f.write('{"task": "mixed", "text": "x"}\n')
    with pytest.raises(ValueError, match="'mixed' names the mixed set"):
        adaptive_real.run(c, "", log=lambda *_: None)
