"""The leviathan2023 pipeline on a real-target path (`configs/leviathan2023.py:smollm2`).

Runs `experiments/leviathan2023/real.py` end to end on a tiny random Llama written as a GGUF file
with a chat template (tests/gguf_writer.py), in place of SmolLM2, with three draft kinds and
two γ, on a prompts file of two tasks (`config.prompts_file`), then checks the figures against
each other and against hand-computed models. The real run's figures are in
experiments/leviathan2023/README.md.
"""

import dataclasses
import json
import os

import jax.numpy as jnp
import pytest

from configs import leviathan2023 as lev_config
from experiments.common import real_drafts
from experiments.common.real_prompts import load_prompts
from experiments.leviathan2023 import pipeline, report
from specjax import theory
from specjax.decoding import summarize_stats
from specjax.decoding.state import init_stats
from tests.gguf_writer import write_tiny_gguf


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("lev-real")
    path = os.fspath(root / "tiny.gguf")
    write_tiny_gguf(path, context=1024, tied=True)
    prompts = root / "prompts.jsonl"
    lines = [
        {"task": "limerick", "text": "Write a limerick about a cat."},
        {"task": "sums", "text": "What is 17 + 25?"},
        {"task": "limerick", "text": "Write a limerick about rain."},
        {"task": "sums", "messages": [
            {"role": "system", "content": "Answer with a number."},
            {"role": "user", "content": "What is 6 times 7?"},
        ]},
        {"task": "limerick", "text": "Write a limerick about a ship."},
    ]  # fmt: skip
    prompts.write_text("".join(json.dumps(x) + "\n" for x in lines))
    config = lev_config.get_config("smollm2,gammas=1/2,repeats=2")
    config.prompts_file = os.fspath(prompts)
    config.pretrained = path
    config.target_label = "tiny"
    config.drafts = ("prompt lookup", "first 1 layers")  # uniform is added: c needs it
    config.draft_layers = (1,)
    config.heads = ()
    config.dynamic = ()
    config.sweep = ("prompt lookup",)
    config.temperatures = (0.0,)
    config.alpha_prompts = 3
    config.alpha_new_tokens = 8
    config.alpha_rounds = 1
    config.walltime_prompts = 2  # the file's held-out prompts: its 3rd and 4th lines
    config.max_new_tokens = 8
    config.cost_steps = 2
    config.iteration_steps = 2
    workdir = os.fspath(root / "run")
    out = pipeline.run(config, workdir)  # dispatches to real.run on config.pretrained
    return out, workdir


def test_quick_is_smollm2_with_the_drafts_that_need_no_training():
    """`smollm2,quick` (the README's main job): smollm2 less its trained heads and the slow
    training-free drafts, Table 2 for prompt lookup at γ = 1, 2, 4; every other field as
    smollm2's, and options still win."""
    quick, full = lev_config.get_config("smollm2,quick"), lev_config.get_config("smollm2")
    assert quick.drafts == ("prompt lookup", "uniform") and quick.heads == ()
    assert quick.sweep == ("prompt lookup",) and quick.gammas == (1, 2, 4)
    changed = {"drafts", "heads", "sweep", "gammas"}
    q, f = quick.to_dict(), full.to_dict()
    assert q.keys() == f.keys()
    assert {k: v for k, v in q.items() if k not in changed} == {
        k: v for k, v in f.items() if k not in changed
    }
    assert lev_config.get_config("smollm2,quick,gammas=3,sweep=x").gammas == (3,)
    with pytest.raises(ValueError, match="pass smollm2,quick"):
        lev_config.get_config("quick")


def test_draft_vocabs_option_reaches_the_config():
    assert lev_config.get_config("smollm2").draft_vocabs == ()
    assert lev_config.get_config("smollm2,draft_vocabs=2048/512").draft_vocabs == (2048, 512)


def test_writes_both_tables_and_every_draft(results):
    out, workdir = results
    for name in ("results.json", "table3.csv", "table2.csv", "speedup_vs_gamma_t0.png"):
        assert os.path.exists(os.path.join(workdir, name)), name
    with open(os.path.join(workdir, "results.json"), encoding="utf-8") as f:
        saved = json.load(f)
    names = ["prompt lookup", "first 1 layers", "uniform"]
    assert list(saved["drafts"]) == names
    assert list(saved["alpha"]["0"]) == names
    assert list(saved["walltime"]) == ["t0/prompt lookup"]
    assert [r["gamma"] for r in saved["walltime"]["t0/prompt lookup"]] == [1, 2]
    assert sorted(saved["costs"]["t_target"]) == ["1", "2", "3"]
    text = report.format_all(saved)  # renders from results.json alone
    assert "Table 3 at t = 0, in full" in text and "Leviathan et al. 2023" in text


def test_greedy_rows_equal_autoregressive_and_table3_is_taken_at_the_largest_gamma(results):
    out, _ = results
    table = out["real"]["0"]
    assert table["gamma"] == 2 and table["prompts"] == 3  # lines 1, 2 and 5 of the file
    for row in table["rows"]:
        assert row["greedy_identical"] is True, row["draft"]
        assert len(row["alpha_by_position"]) == 2
        assert list(row["per_task_alpha"]) == ["limerick", "sums"]  # the file's tasks
    # Table 3 on lines 1, 5 (the limericks alternate) and 2; Table 2 on lines 3 and 4.
    assert out["prompts"]["table3_tasks"] == ["limerick", "limerick", "sums"]
    assert out["prompts"]["table2_tasks"] == ["limerick", "sums"]
    assert out["prompts"]["table2_held_out"] is True
    assert len(load_prompts(out["prompts"]["file"])) == 5


def test_the_report_says_when_table2_is_in_sample(results):
    # A file of one prompt per task runs Table 2 on Table 3's prompts (test_real_prompts);
    # the run records it, and the report's legend and prediction source must not say "held out".
    out, _ = results
    held = report.format_table2(out)
    assert "measured on other prompts (held out)" in held and "in-sample" not in held
    in_sample = dict(out, prompts=dict(out["prompts"], table2_held_out=False))
    for row in in_sample["walltime"]["t0/prompt lookup"]:
        assert "in-sample" not in row["heldout_model"]  # this run's rows: held out
    text = report.format_table2(in_sample)
    assert "(held out)" not in text and "in-sample: each task of the prompts file" in text


def test_c_is_measured_against_the_uniform_drafts_iteration(results):
    out, _ = results
    rows = {r["draft"]: r for r in out["real"]["0"]["rows"]}
    assert rows["uniform"]["c"] == 0.0  # its own iteration is the verification cost
    ar_ms, gamma = out["real"]["0"]["ar_ms_per_token"], 2
    lookup = rows["first 1 layers"]
    expected = max(lookup["ms_per_iteration"] - rows["uniform"]["ms_per_iteration"], 0.0) / (
        gamma * ar_ms
    )
    assert lookup["c"] == pytest.approx(expected, rel=1e-12)
    assert out["costs"]["c"] == {name: r["c"] for name, r in rows.items()}


def test_table2_predictions_follow_the_positional_model(results):
    out, _ = results
    table3 = {r["draft"]: r for r in out["real"]["0"]["rows"]}["prompt lookup"]
    s1, s2 = table3["survival_by_position"]
    held_out = {1: 1 + s1, 2: 1 + s1 + s1 * s2}  # by hand: 1 + sum of cumulative products
    for row in out["walltime"]["t0/prompt lookup"]:
        assert row["predicted_tokens_per_iteration_heldout"] == pytest.approx(
            held_out[row["gamma"]], rel=1e-12
        )
        # The loop model's tokens come from the row's own survival rates, which reproduce the
        # sampler's tokens per iteration (1 + accepted / iterations) whatever the draft lengths.
        assert row["predicted_tokens_per_iteration"] == pytest.approx(
            row["tokens_per_iteration"], rel=1e-9
        )
    rows = report.table2_rows(out)
    assert [r["predicted_from"] for r in rows] == [
        "the positional model at Table 3's survival by position"
    ] * 2


def test_survival_counts_short_drafts_as_rejections():
    """Hand-written counters: 10 iterations; position 1 tested 6 times (4 iterations drafted
    nothing, as prompt lookup does without a match), accepted 3; position 2 tested 3, accepted 1."""
    stats = init_stats(batch=1, gamma=2)
    stats = dataclasses.replace(
        stats,
        iterations=jnp.array([10], jnp.int32),
        emitted=jnp.array([14], jnp.int32),
        accepted_at=jnp.array([3, 1], jnp.int32),
        tested_at=jnp.array([6, 3], jnp.int32),
    )
    summary = summarize_stats([stats])
    assert summary["acceptance_by_position"] == [0.5, 1 / 3]  # per tested draft
    assert summary["survival_by_position"] == [0.3, 1 / 3]  # per iteration that got there
    tokens = theory.positional_tokens_per_iteration(summary["survival_by_position"], 2)
    assert tokens == pytest.approx(summary["sampler_tokens_per_iteration"]) == 1.4
    wrong = theory.positional_tokens_per_iteration(summary["acceptance_by_position"], 2)
    assert wrong == pytest.approx(1 + 0.5 + 0.5 / 3)  # what the tested rates would predict


def test_positional_model_is_the_iid_formula_at_constant_rates():
    for alpha in (0.0, 0.3, 0.9, 1.0):
        for gamma in (1, 3, 6):
            got = theory.positional_tokens_per_iteration([alpha] * 8, gamma)
            want = float(theory.expected_tokens_per_iteration(alpha, gamma))
            assert got == pytest.approx(want, rel=1e-12)
    assert theory.positional_tokens_per_iteration([1.0, 0.5, 0.0, 1.0], 4) == 2.5


@pytest.mark.parametrize(
    "rates, gamma, message",
    [
        ([0.5], 2, "at least gamma=2"),
        ([0.5, 1.5], 2, "acceptance_by_position must lie in"),
        ([0.5, 0.5], 0, "gamma must be an integer >= 1"),
    ],
)
def test_positional_model_refuses_bad_input(rates, gamma, message):
    with pytest.raises(ValueError, match=message):
        theory.positional_tokens_per_iteration(rates, gamma)


@pytest.mark.parametrize("name", ["eagle", "distilled", "distilledx"])
def test_unknown_head_names_are_refused(name):
    with pytest.raises(ValueError, match="config.heads entry"):
        real_drafts.head_spec(name)
    assert real_drafts.head_spec("distilled4") == "distilled,layers=4,steps=200"
    assert real_drafts.head_spec("eagle1") == "eagle1,steps=800"
