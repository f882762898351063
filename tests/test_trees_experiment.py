"""The trees experiment end to end on `configs/trees.py:tiny` at t=0, in a temporary workdir.

Trains the seconds-sized test models into a temporary model cache, then measures T(N), tokens
per target call and walltime for AR, chain γ=1, the chain γ=1 run as a tree, and a wide tree of
4 nodes, and checks the figures' structure and their consistency with each other. Only t=0:
every decoder is a compiled program, and greedy decoding is where exact cross-checks exist
(every decoder's output equals AR's; the chain and the chain-as-tree accept the same drafts).
"""

import json
import math
import os

import pytest

from configs import trees as trees_config
from experiments.trees import pipeline, report


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    # The test models: trained once per session in the session's cache (tests/conftest.py).
    config = trees_config.get_config("tiny,temperatures=0")
    workdir = str(tmp_path_factory.mktemp("trees"))
    yield config, workdir, pipeline.run(config, workdir)


@pytest.mark.slow
def test_outputs_have_every_table(run):
    config, workdir, results = run
    with open(os.path.join(workdir, "results.json"), encoding="utf-8") as f:
        saved = json.load(f)
    assert set(saved["walltime"]) == {"t0/tiny_draft"}
    names = [r["name"] for r in saved["walltime"]["t0/tiny_draft"]]
    assert names == ["ar", "chain1", "treechain2", "wide4"]
    assert set(saved["trees"]) == {"treechain2", "wide4"}
    assert saved["trees"]["wide4"]["parents"] == [-1, 0, 0, 0]
    with open(os.path.join(workdir, "results.md"), encoding="utf-8") as f:
        text = f.read()
    assert "## tiny_draft, t = 0" in text and "| wide4 |" in text
    assert text == report.format_all(saved)  # the report is a function of results.json


@pytest.mark.slow
def test_figures_are_sane_and_consistent(run):
    config, _, results = run
    costs = results["costs"]
    assert {"1", "2", "4"} <= set(costs["t_chain"])
    assert all(v > 0 for v in costs["t_tree"].values())
    rows = {r["name"]: r for r in results["walltime"]["t0/tiny_draft"]}
    t1 = costs["t_chain"]["1"]
    for name, r in rows.items():
        depth = {"ar": 0, "chain": r.get("gamma"), "tree": r.get("depth")}[r["kind"]]
        # A call emits at least one token and accepts at most `depth` drafts per row, and the
        # budget can only cut what the sampler produced: bounds on the counts.
        n = r["counts"]
        accepted = n["accepted"] or 0
        assert 0 <= accepted <= depth * n["row_iterations"], name
        assert n["target_calls"] <= n["tokens_emitted"] <= n["row_iterations"] + accepted, name
        # Both ratios recomputed exactly from the stored counts; batch-1 calls of the stats
        # prompts, no EOS, so each emits the configured tokens and iterations are calls.
        n = r["counts"]
        assert n["tokens_emitted"] == config.stats_prompts * config.max_new_tokens, name
        assert n["row_iterations"] == n["target_calls"], name
        assert r["emitted_per_call"] == n["tokens_emitted"] / n["target_calls"], name
        if r["kind"] == "ar":
            assert n["tested"] is None and r["tokens_per_call"] == 1.0, name
        else:
            assert 0 <= n["accepted"] <= n["tested"], name
            assert r["tokens_per_call"] == 1.0 + n["accepted"] / n["row_iterations"], name
            assert r["alpha_empirical"] == n["accepted"] / n["tested"], name
        assert r["matches_ar"] is True, name  # greedy: every decoder is AR, token for token
        assert math.isfinite(r["speedup_wall"]) and r["speedup_wall"] > 0, name
        assert len(r["wall_samples"]) == config.repeats
        # The cost model is what the row says it is.
        verify, draft = r["t_verify_ms"] / 1e3, r["t_draft_ms"] / 1e3
        assert r["predicted_speedup_calls"] == pytest.approx(
            r["tokens_per_call"] * t1 / (verify + draft)
        )
        assert r["overhead_ms"] == pytest.approx(r["iteration_ms"] - (verify + draft) * 1e3)
    assert rows["ar"]["speedup_wall"] == 1.0 and rows["ar"]["tokens_per_call"] == 1.0
    # Chain γ=1 and the same chain run by the tree decoder draft the same argmax and accept it
    # on the same positions: identical counts.
    assert rows["treechain2"]["tokens_per_call"] == rows["chain1"]["tokens_per_call"]
    assert rows["treechain2"]["target_calls_timed"] == rows["chain1"]["target_calls_timed"]
    assert rows["treechain2"]["control"] is True and rows["wide4"]["control"] is False
    verdict = report.verdict(results["walltime"]["t0/tiny_draft"])
    assert verdict["tokens_per_call"] == {
        "chain": "chain1",
        "tree": "wide4",
        "ratio": pytest.approx(
            rows["wide4"]["tokens_per_call"] / rows["chain1"]["tokens_per_call"]
        ),
    }
