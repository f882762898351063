"""The leviathan2023 pipeline end to end on seconds-sized models (the tiny pipeline's shape).

Trains the zoo's test sizes into the session's model cache (once per session), measures
α / c / T(k) / walltime, writes the tables, then checks the figures against each other and
against specjax.theory.
"""

import csv
import json
import os

import jax
import numpy as np
import pytest

from configs import leviathan2023 as lev_config
from experiments.common import models as model_lib
from experiments.leviathan2023 import pipeline, report
from specjax import theory
from specjax.training import zoo


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    # The test models: trained once per session in the session's cache (tests/conftest.py).
    cache = os.environ["SPECJAX_CACHE"]
    # One γ and one draft of each kind (an n-gram table; a distilled transformer, which trains
    # its data-trained base first): the assertions are on the artifacts, and every code path
    # runs. γ = 1, where block and token-wise verification coincide, so the block table can
    # check that both rules ran on the same key.
    config = lev_config.get_config("tiny,gammas=1,repeats=1")
    config.target = "tiny_target"
    config.drafts = ("unigram", "tiny_draft_distilled")
    config.cache_len = 64
    config.alpha_prompts = 4
    config.alpha_prompt_len = 8
    config.alpha_new_tokens = 16
    config.walltime_prompts = 2
    config.walltime_prompt_len = 8
    config.max_new_tokens = 12
    config.cost_steps = 2
    config.iteration_steps = 2
    config.cost_context = 16
    # The block table on one draft (every γ at t = 1), tokens per call from 8 batched rows.
    config.compare_block = True
    config.block_drafts = ("tiny_draft_distilled",)
    config.block_stat_prompts = 8
    workdir = str(tmp_path_factory.mktemp("lev"))
    results = pipeline.run(config, workdir)
    return config, workdir, results, cache


@pytest.mark.slow
def test_pipeline_writes_every_artifact(run_dir):
    _, workdir, _, cache = run_dir
    for name in (
        "results.json",
        "table2.csv",
        "table3.csv",
        "alpha_bars.png",
        "speedup_vs_gamma_t0.png",
        "speedup_vs_gamma_t1.png",
    ):
        assert os.path.getsize(os.path.join(workdir, name)) > 0, name
    exported = sorted(os.listdir(os.path.join(cache, "models")))
    assert any(d.startswith("tiny_target-python-") for d in exported)
    assert any(d.startswith("tiny_draft-distill_tv_ft-python-") for d in exported)


@pytest.mark.slow
def test_figures_are_consistent(run_dir):
    config, workdir, results, _ = run_dir
    with open(os.path.join(workdir, "results.json")) as f:
        saved = json.load(f)
    assert set(saved["alpha"]) == {"0", "1"}
    for per_draft in saved["alpha"].values():
        assert set(per_draft) == {"unigram", "tiny_draft_distilled"}
        for v in per_draft.values():
            assert 0.0 <= v["alpha"] <= 1.0 and v["positions"] == 4 * 16
    costs = saved["costs"]
    for name, c in costs["c"].items():
        assert c == pytest.approx(costs["t_draft"][name] / costs["t_target"]["1"])
    assert sorted(int(k) for k in costs["t_target"]) == [1, 2]  # T(1) .. T(γ + 1)
    assert set(saved["walltime"]) == {f"t{t}/{d}" for t in (0, 1) for d in config.drafts}
    for key, rows in saved["walltime"].items():
        assert [r["gamma"] for r in rows] == [1], key
        for r in rows:
            assert r["speedup"] == pytest.approx(r["ar_ms_per_token"] / r["spec_ms_per_token"])
            expected = theory.expected_tokens_per_iteration(r["alpha_empirical"], r["gamma"])
            assert r["predicted_tokens_per_iteration"] == pytest.approx(float(expected))
            # At most γ + 1 tokens per iteration, at least one.
            assert r["gamma"] + 1 >= r["tokens_per_iteration"] >= 1.0
            # The loop model recomputed from its own parts (N = max_new_tokens = 12).
            e, n = r["predicted_tokens_per_iteration"], 12
            loop = (r["ar_fixed_ms"] + (n - 1) * r["ar_iteration_ms"]) / (
                r["spec_fixed_ms"] + (n / e - 1) * r["spec_iteration_ms"]
            )
            assert r["predicted_speedup_loop"] == pytest.approx(loop)
            assert r["ar_iteration_ms"] > 0 and r["spec_iteration_ms"] > 0
            # tokens/iteration predicted from Table 3's α (other prompts), not this run's.
            temp, name = key.split("/")
            held_out = saved["alpha"][temp[1:]][name]["alpha"]
            assert r["alpha_heldout"] == held_out
            expected = theory.expected_tokens_per_iteration(held_out, r["gamma"])
            assert r["predicted_tokens_per_iteration_heldout"] == pytest.approx(float(expected))
            # One repeat: no interval, and no spread to report.
            assert r["speedup_low"] is None and r["speedup_high"] is None and r["ar_cv"] == 0.0
    # Greedy α for the distilled draft is measured with argmax warpers: each β is 0 or 1, so
    # each offset's mean over the n sequences is a count of matches over n (a soft β, the sum
    # of min(p, q) over a warped vocabulary, would leave fractions), and α is their mean.
    greedy = saved["alpha"]["0"]["tiny_draft_distilled"]
    offsets = np.array(greedy["alpha_by_offset"])
    n, rem = divmod(greedy["positions"], offsets.size)
    assert rem == 0 and n >= 1
    np.testing.assert_allclose(offsets * n, np.round(offsets * n), atol=1e-9)
    assert greedy["alpha"] == pytest.approx(float(offsets.mean()), rel=1e-12)


@pytest.mark.slow
def test_block_table_compares_the_rules_side_by_side(run_dir):
    _, workdir, results, _ = run_dir
    # t > 0 only: at t = 0 they coincide
    assert list(results["block"]) == ["t1/tiny_draft_distilled"]
    rows = report.block_rows(results)
    assert [r["gamma"] for r in rows] == [1]
    for r, raw in zip(rows, results["block"]["t1/tiny_draft_distilled"], strict=True):
        for rule in ("tokenwise", "block"):
            assert raw[rule]["rule"] == rule and raw[rule]["lossless"] is True
            # Tokens per call and α recomputed from the row's counts; at most γ accepted a call.
            n = raw[rule]
            assert 0 <= n["accepted"] <= min(n["tested"], r["gamma"] * n["row_iterations"])
            assert n["tokens_per_call"] == 1.0 + n["accepted"] / n["row_iterations"]
            assert n["alpha"] == n["accepted"] / n["tested"]
            # One AR timing serves both rules: their speedups share the numerator.
            assert raw[rule]["ar_ms_per_token"] == raw["tokenwise"]["ar_ms_per_token"]
        gain = r["tokens_per_call_block"] / r["tokens_per_call_tokenwise"] - 1
        assert r["tokens_gain"] == pytest.approx(gain)
    # γ = 1: block verification is token-wise verification (same key, same tokens per call).
    assert rows[0]["tokens_per_call_block"] == rows[0]["tokens_per_call_tokenwise"]
    assert os.path.getsize(os.path.join(workdir, "block.csv")) > 0
    assert "Block verification" in report.format_all(results)
    assert results["accept"] == "tokenwise" and results["lossless"] is True


def test_accept_is_selectable_and_a_bad_name_fails_before_any_work(tmp_path):
    config = lev_config.get_config("tiny,accept=typical:0.09/0.3,compare_block")
    assert config.accept == "typical:0.09/0.3" and config.compare_block is True
    assert lev_config.get_config("").accept == "tokenwise"
    config.accept = "blocky"
    with pytest.raises(ValueError, match="unknown acceptance rule 'blocky'"):
        pipeline.run(config, str(tmp_path))
    assert not os.listdir(tmp_path)


@pytest.mark.slow
def test_tables_regenerate_from_json(run_dir, capsys):
    _, workdir, results, _ = run_dir
    os.remove(os.path.join(workdir, "table2.csv"))
    report.main(["report", workdir])
    out = capsys.readouterr().out
    assert "Table 3 analogue" in out and "Table 2 analogue" in out
    # The marks are explained, and the noise is named.
    assert "marks: * best γ" in out and "checks: tok✓" in out and "spd✓" in out
    assert "noise: the autoregressive baseline" in out and "no speedup intervals" in out
    with open(os.path.join(workdir, "table2.csv")) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 2 * 1  # temperatures x drafts x gammas
    assert sum(r["best"] == "True" for r in rows) == 2 * 2  # one best γ per curve


@pytest.mark.slow
def test_second_run_reuses_cached_models(run_dir, tmp_path):
    config, workdir, _, _ = run_dir
    first = model_lib.load_all(config, workdir, log=lambda msg: None)
    again = model_lib.load_all(config, str(tmp_path), log=lambda msg: None)
    assert not os.path.exists(os.path.join(str(tmp_path), "train"))  # nothing was trained
    for name, (_, params, _) in first["drafts"].items():
        leaves = zip(
            jax.tree.leaves(params), jax.tree.leaves(again["drafts"][name][1]), strict=True
        )
        assert all(np.array_equal(a, b) for a, b in leaves), name


def test_a_distilled_draft_alone_trains_its_data_trained_base_first(monkeypatch, tmp_path):
    # A distilled draft is fine-tuned from the data-trained draft of its size: asked for alone
    # (config.drafts without the base), the base is made first, then the distilled one from it.
    config = lev_config.get_config("tiny")
    made = []

    def fake_ensure(cfg, workdir, log=print):
        made.append((cfg.name, cfg.distill.init if cfg.distill.target else None))
        return os.path.join(workdir, cfg.name)

    monkeypatch.setattr(model_lib, "ensure_model_dir", fake_ensure)
    model_lib.model_dir("tiny_draft_distilled", config, str(tmp_path))
    base = model_lib.train_config("tiny_draft", config)
    assert [name for name, _ in made] == [base.name, "tiny_draft-distill_tv_ft-python"]
    assert made[1][1] == zoo.model_cache_name(base.to_dict())  # fine-tuned from that base
    made.clear()
    model_lib.model_dir("tiny_draft", config, str(tmp_path))
    assert made == [(base.name, None)]  # a data-trained draft needs nothing before it


def _synthetic_results(low, high, tokens, ar_ms=(0.20, 0.22)):
    """A results.json with one draft at t=0 and γ = 1, 2 (what table2_rows reads)."""
    rows = []
    for gamma, tok, ar in zip((1, 2), tokens, ar_ms, strict=True):
        rows.append(
            dict(
                gamma=gamma,
                ar_ms_per_token=ar,
                spec_ms_per_token=ar / 1.1,
                speedup=1.1,
                speedup_low=low,
                speedup_high=high,
                ar_cv=0.05,
                predicted_speedup_paper=1.5,
                predicted_speedup_measured=1.4,
                predicted_speedup_loop=1.3,
                ar_iteration_ms=0.2,
                spec_iteration_ms=0.3,
                alpha_empirical=0.8,
                tokens_per_iteration=tok,
                predicted_tokens_per_iteration=9.0,  # this run's α: must not be used
            )
        )
    return {
        "config": {"walltime_prompts": 3, "max_new_tokens": 64},
        "alpha": {"0": {"bigram": {"alpha": 0.5}}},
        "costs": {"t_target": {"1": 1e-4, "2": 1e-4, "3": 1e-4}, "t_draft": {"bigram": 0.0}},
        "walltime": {"t0/bigram": rows},
    }


def test_the_best_gamma_of_a_curve_is_its_fastest_row():
    # The pipeline test runs one γ per curve, so the mark is checked here on two.
    results = _synthetic_results(0.9, 1.4, (1.5, 1.75))
    results["walltime"]["t0/bigram"][1]["speedup"] = 1.3
    assert [r["best"] for r in report.table2_rows(results)] == [False, True]
    results["walltime"]["t0/bigram"][0]["speedup"] = 1.4
    assert [r["best"] for r in report.table2_rows(results)] == [True, False]


def test_report_judges_rows_by_their_noise_and_the_held_out_alpha():
    """Intervals that contain 1.0 are marked, a loop prediction inside the interval agrees,
    and tokens/iteration is predicted from Table 3's α (0.5: 1.5 and 1.75 at γ = 1, 2)."""
    rows = report.table2_rows(_synthetic_results(0.9, 1.4, (1.5, 2.3)))
    assert [r["predicted_tokens_per_iteration"] for r in rows] == [1.5, 1.75]
    assert [r["predicted_from"] for r in rows] == ["held-out α"] * 2
    assert [r["below_noise"] for r in rows] == [True, True]
    assert all(r["speedup_ok"] and r["speedup_in_interval"] for r in rows)  # 1.3 in [0.9, 1.4]
    # 1.5 = pred exactly; 2.3 vs 1.75 is 31 % off and ~6 standard errors of 128 iterations.
    assert [r["tokens_ok"] for r in rows] == [True, False]
    se = report.tokens_standard_error(0.5, 2, 3 * 64 / 2.3)
    assert 0.05 < se < 0.1 and rows[1]["tokens_standard_error"] == pytest.approx(se)
    # A narrow interval away from 1.0 and from the loop model: no mark, disagreement.
    rows = report.table2_rows(_synthetic_results(1.05, 1.15, (1.5, 1.75)))
    assert not any(r["below_noise"] or r["speedup_ok"] for r in rows)
    text = report.format_table2(_synthetic_results(0.9, 1.4, (1.5, 2.3)))
    assert "1.10*~" in text and "0.90-1.40" in text and "marks: * best γ" in text
    assert "2/2 rows (~) cannot be told from 1.0x" in text
    assert "measured 0.200-0.220 ms/token across the 2 rows (CV 5%)" in text
