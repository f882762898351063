"""The extensions experiment's adaptive-γ part end to end on `configs/extensions.py:tiny`.

Trains the seconds-sized test target into a temporary model cache, fits the bigram draft, then
measures every fixed γ and policy at t = 1 (runtime ~40 s on 2 busy cores). The figures are
noise at this size; the checks are on the bookkeeping: every decoder's row is there, counts
are within what γ allows, the best fixed γ is 1.0x of itself, and the report is a function of
results.json.
"""

import json
import os

import pytest

from configs import extensions as ext_config
from experiments.extensions import adaptive, pipeline


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    # The test models: trained once per session in the session's cache (tests/conftest.py).
    config = ext_config.get_config("tiny,parts=adaptive")
    workdir = str(tmp_path_factory.mktemp("extensions"))
    yield config, workdir, pipeline.run(config, workdir, log=lambda *_: None)


@pytest.mark.slow
def test_every_decoder_is_measured_within_what_gamma_allows(run):
    config, _, results = run
    c = config.adaptive
    (block,) = results["adaptive"]["blocks"]
    rows = {r["decoder"]: r for r in block["rows"]}
    assert set(rows) == {f"fixed{g}" for g in c.gammas} | set(c.policies)
    gamma_max = max(c.gammas)
    for name, r in rows.items():
        gamma = int(name[5:]) if name[5:].isdigit() else gamma_max
        # Each call emits 1 to γ + 1 tokens per row: bounds on the counts (batch-1 calls).
        n = r["counts"]
        assert n["target_calls"] <= n["tokens_emitted"] <= (gamma + 1) * n["target_calls"], name
        assert 0.0 <= r["alpha"] <= 1.0, name
        assert r["ms_per_token"] > 0, name
        # Each ratio recomputed from the stored counts, and the tokens from the config: one
        # call per prompt, no EOS, so every decoder emits prompts x max_new_tokens.
        n = r["counts"]
        assert n["tokens_emitted"] == c.prompts * c.max_new_tokens, name
        assert r["tokens_per_target_call"] == n["tokens_emitted"] / n["target_calls"], name
        assert r["draft_calls_per_token"] == n["draft_calls"] / n["tokens_emitted"], name
        assert 0 <= n["accepted"] <= n["tested"] and r["alpha"] == n["accepted"] / n["tested"]
        hist = n["drafted_histogram"]
        if hist is None:  # a fixed γ without the adaptive drafter drafts γ every iteration
            assert name.startswith("fixed") and r["mean_gamma"] == gamma, name
        else:
            assert len(hist) == gamma + 1, name
            drafted = sum(i * h for i, h in enumerate(hist))  # tokens drafted over all iterations
            assert sum(hist) <= drafted <= gamma * sum(hist), name  # 1 to γ per iteration
            mean = drafted / sum(hist)
            assert r["mean_gamma"] == pytest.approx(mean, rel=1e-12), name
    # The reference by hand: the fixed γ with the least ms/token, and every row's ratio to it.
    fixed_ms = {f"fixed{g}": rows[f"fixed{g}"]["ms_per_token"] for g in c.gammas}
    assert block["best_fixed"] == min(fixed_ms, key=fixed_ms.get)
    best_ms = fixed_ms[block["best_fixed"]]
    for name, r in rows.items():
        assert r["vs_best_fixed"] == pytest.approx(best_ms / r["ms_per_token"], rel=1e-12), name
    assert rows[block["best_fixed"]]["vs_best_fixed"] == 1.0
    # A constant budget through the adaptive drafter drafts gamma_max every iteration.
    assert rows["fixed_via_adaptive"]["mean_gamma"] == pytest.approx(gamma_max)
    # Verifying only as wide as the drafts changes the cost, never the tokens.
    for key in ("tokens_per_target_call", "alpha", "draft_calls_per_token"):
        assert rows["fixed_via_adaptive+auto"][key] == rows["fixed_via_adaptive"][key], key


@pytest.mark.slow
def test_the_report_is_a_function_of_the_saved_results(run):
    _, workdir, _ = run
    with open(os.path.join(workdir, "adaptive", "results.json"), encoding="utf-8") as f:
        saved = json.load(f)
    with open(os.path.join(workdir, "adaptive", "results.md"), encoding="utf-8") as f:
        assert f.read() == adaptive.report(saved) + "\n"


def test_config_errors_name_the_option():
    with pytest.raises(ValueError, match="parts"):
        ext_config.get_config("parts=adaptive/speculative_sampling")
    with pytest.raises(ValueError, match="Unknown config option"):
        ext_config.get_config("gamma=3")
    config = ext_config.get_config("tiny,parts=adaptive,temperatures=0/1,repeats=2")
    assert tuple(config.adaptive.temperatures) == (0.0, 1.0)
    assert config.adaptive.repeats == 2
