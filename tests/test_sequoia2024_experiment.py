"""The sequoia2024 experiment end to end on `configs/sequoia2024.py:tiny` at t = 0, sizes 1, 2, 4.

Trains the seconds-sized test models into a temporary model cache, then runs every stage:
acceptance by rank, T(k), tokens per call of each method and size, walltime. Greedy decoding is
where exact cross-checks exist: every decoder's output equals autoregressive decoding; a greedy
draft's with-replacement siblings repeat one token, so P_with = (α, 0, ...) and k chains of
length 1 accept exactly what the chain of one draft accepts.
"""

import csv
import json
import os

import numpy as np
import pytest

from configs import sequoia2024 as sequoia_config
from experiments.sequoia2024 import methods, pipeline, report
from specjax.decoding import TokenTree, expected_accepted


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    # The test models: trained once per session in the session's cache (tests/conftest.py).
    config = sequoia_config.get_config("tiny,temperatures=0,sizes=1/2/4,gammas=1")
    workdir = str(tmp_path_factory.mktemp("sequoia"))
    yield config, workdir, pipeline.run(config, workdir)


@pytest.mark.slow
def test_writes_every_output(run):
    config, workdir, results = run
    with open(os.path.join(workdir, "results.json"), encoding="utf-8") as f:
        saved = json.load(f)
    assert set(saved["temperatures"]) == {"0"}
    with open(os.path.join(workdir, "results.md"), encoding="utf-8") as f:
        assert f.read() == report.format_all(saved)  # the report is a function of results.json
    with open(os.path.join(workdir, "results.csv"), encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert {(r["method"], int(r["n"])) for r in rows} == {
        (m, n) for m in config.methods for n in config.sizes
    }
    for name in ("tokens_per_call_t0.png", "speedup_t0.png"):
        with open(os.path.join(workdir, name), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_greedy_rows_are_exact_and_consistent(run):
    _, _, results = run
    block = results["temperatures"]["0"]
    acceptance = block["acceptance"]
    alpha = acceptance["with"]["alpha"]
    # A greedy draft sampled with replacement repeats its argmax: only rank 1 can be accepted.
    assert acceptance["with"]["positional"][0] == pytest.approx(alpha, abs=1e-6)
    assert all(x == pytest.approx(0.0, abs=1e-6) for x in acceptance["with"]["positional"][1:])
    cell = {(r["method"], r["n"]): r for r in block["tokens_per_call"]}
    for (method, n), r in cell.items():
        if n == 1:
            assert r["measured"] == 1.0 and r["depth"] == 0  # no tree: one token per call
            continue
        # Tokens per call is 1 + the mean accepted depth, recomputed from the stored counts:
        # iterations by accepted depth d = 0..depth (none deeper than the tree).
        hist = r["accepted_depth_histogram"]
        assert len(hist) == r["depth"] + 1 and min(hist) >= 0, (method, n)
        depths = np.arange(len(hist))
        assert r["measured"] == pytest.approx(1 + (depths * hist).sum() / sum(hist)), (method, n)
        assert r["matches_ar"] is True, (method, n)  # greedy: every decoder is AR
        positional = acceptance[methods.ACCEPTANCE_RULE[method]]["positional"]
        tree = TokenTree(tuple(r["parents"]))
        assert r["expected"] == pytest.approx(1 + expected_accepted(tree, positional))
    # Three one-token chains with a greedy draft propose the same token three times.
    assert cell[("kchains", 4)]["parents"] == [-1, 0, 0, 0]
    assert cell[("kchains", 4)]["measured"] == cell[("chain", 2)]["measured"]


@pytest.mark.slow
def test_walltime_and_hardware_choice(run):
    _, _, results = run
    wall = results["temperatures"]["0"]["walltime"]
    rows = {r["name"]: r for r in wall["rows"]}
    assert rows["ar"]["speedup"] == 1.0 and rows["ar"]["tokens_per_call"] == 1.0
    assert {"chain1", "sequoia4"} <= set(rows)
    costs = results["costs"]
    t1 = costs["t_target"]["1"]
    for name, r in rows.items():
        assert r["ms_per_token"] > 0 and r["speedup"] > 0, name
        assert r["predicted_speedup"] == pytest.approx(
            r["tokens_per_call"] * t1 * 1e3 / r["model_ms"]
        )
    best = wall["chosen_top5"][0]
    assert wall["chosen"]["nodes"] == best["nodes"]
    assert wall["chosen"]["predicted_speedup"] == pytest.approx(best["speedup"])
    assert sorted(c["speedup"] for c in wall["chosen_top5"])[::-1] == [
        c["speedup"] for c in wall["chosen_top5"]
    ]
    # The loop-aware pick: the best of each size's DP tree by whole measured iterations.
    loop = wall["loop_choice"]
    sizes = sorted(int(k) for k in costs["t_target"] if int(k) > 1)
    assert [r["nodes"] for r in loop["rows"]] == sizes
    for r in loop["rows"]:
        assert r["predicted_speedup"] == pytest.approx(
            r["tokens_per_call"] * loop["ar_iteration_ms"] / r["iteration_ms"]
        )
    assert loop["best"]["predicted_speedup"] == max(r["predicted_speedup"] for r in loop["rows"])
    assert wall["chosen_loop"]["name"] in rows
    assert rows[wall["chosen_loop"]["name"]]["parents"] == loop["best"]["parents"]
    verdict = report.verdict(wall)
    assert verdict["best_chain"] == "chain1"


def test_method_trees():
    assert methods.chain(5).parents == (-1, 0, 1, 2, 3)
    # 7 nodes below the root in 3 chains: lengths 3, 2, 2, numbered breadth-first.
    tree = methods.k_chains(8, 3)
    assert tree.parents == (-1, 0, 0, 0, 1, 2, 3, 4)
    assert methods.k_chains(3, 4).parents == (-1, 0, 0)  # k capped at n - 1
    assert methods.binary(6).parents == (-1, 0, 0, 1, 1, 2)
    assert methods.build("sequoia", 4, [0.9]).parents == (-1, 0, 1, 2)
    assert methods.build("sequoia", 4, [0.5, 0.4]).max_branch == 2
    with pytest.raises(ValueError, match="n must be"):
        methods.build("chain", 1)
    with pytest.raises(ValueError, match="acceptance"):
        methods.build("sequoia", 4)
    with pytest.raises(ValueError, match="method"):
        methods.build("star", 4)


def test_config_options():
    config = sequoia_config.get_config("corpus=shakespeare,sizes=1/8,methods=chain/sequoia")
    assert config.corpus == "shakespeare" and config.sizes == (1, 8)
    assert config.methods == ("chain", "sequoia")
    with pytest.raises(ValueError, match="methods"):
        sequoia_config.get_config("methods=chain/star")
    with pytest.raises(ValueError, match="tiny"):
        sequoia_config.get_config("tiny,zoo")


def test_standard_error_and_agreement_by_hand():
    # Accepted counts 0, 0, 2, 2: mean 1, sample variance 4/3, SE sqrt(4/3 / 4).
    row = {"n": 4, "parents": [-1, 0, 1], "accepted_depth_histogram": [2, 0, 2]}
    assert report.standard_error(row) == pytest.approx((1 / 3) ** 0.5)
    assert report.standard_error({"n": 1}) == 0.0
    rows = [
        dict(row, measured=2.0, expected=2.05),  # -2.4 %: within 3 % and 2 SE
        dict(row, parents=[-1, 0, 0], measured=2.0, expected=3.3),  # off by 2.25 SE
        {"n": 1, "measured": 1.0, "expected": 1.0},  # AR: not counted
    ]
    assert report.agreement(rows) == {"rows": 2, "within_3pct": 1, "within_2se": 1}
