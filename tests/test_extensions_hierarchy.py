"""experiments/extensions/hierarchy.py end to end on its tiny config (random-weight models).

Checks what does not depend on timing: every configuration of the grid is measured, the
results are JSON-serialisable and written, the counters are consistent, every prediction of the
recursive cost model is recomputed by hand from the stored costs and counts, and the report
lists the best γ of each configuration.
(Exactness is tests/test_hierarchical*.py's; speed is never asserted.)
"""

import json

import pytest

from configs import extensions as ext_config
from experiments.extensions import hierarchy

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("hierarchy")
    out = hierarchy.run(ext_config.hierarchy(tiny=True), str(workdir), log=lambda *_: None)
    with open(workdir / "hierarchy.json") as f:
        assert json.load(f)["tables"].keys() == out["tables"].keys()
    return out


def test_every_configuration_is_measured(results):
    cfg = ext_config.hierarchy(tiny=True)
    json.dumps(results)  # serialisable as returned
    for t in cfg.temperatures:
        rows = results["tables"][f"t{float(t):g}"]
        kinds = {}
        for row in rows:
            kinds.setdefault(row["kind"], []).append(row)
            assert row["tokens_per_s"] > 0 and len(row["wall_samples"]) == cfg.repeats
        grid = len(cfg.outer_gammas)
        assert len(kinds["3L"]) == grid * len(cfg.inner_gammas)
        assert len(kinds["2L-middle"]) == len(kinds["2L-small"]) == grid
        assert len(kinds["inner"]) == len(cfg.inner_gammas)
        for row in rows:
            # Each ratio recomputed exactly from the stored counts, and the tokens from the
            # config: one call per prompt, no EOS, so every decoder emits prompts x new tokens.
            n, name = row["counts"], row["name"]
            assert n["tokens_emitted"] == cfg.num_prompts * cfg.max_new_tokens, name
            assert row["tokens_per_iteration"] == n["tokens_emitted"] / n["row_iterations"], name
            assert row["draft_calls_per_iteration"] == n["draft_calls"] / n["target_calls"], name
            assert row["tokens_per_s"] * row["iteration_ms"] == pytest.approx(
                n["tokens_emitted"] / n["target_calls"] * 1e3, rel=1e-9
            ), name
            if row["kind"] in ("ar", "ar_mid"):
                assert n["tested"] is None and row["alpha"] is None, name
            else:
                assert 0 <= n["accepted"] <= n["tested"], name
                assert row["alpha"] == n["accepted"] / n["tested"], name
        for row in kinds["3L"]:
            # The inner level runs until every row has gamma + 1 tokens: at least one middle
            # call per outer iteration, and tokens per iteration within [1, gamma + 1].
            n = row["counts"]
            assert n["draft_calls"] >= n["target_calls"]
            assert n["row_iterations"] <= n["tokens_emitted"]
            assert n["tokens_emitted"] <= (row["gamma"] + 1) * n["row_iterations"]
            assert row["predicted_speedup"] > 0 and row["predicted_speedup_calls"] > 0
            assert "predicted_speedup_composed" in row


def _tokens(alpha, gamma):
    """The paper's Equation (1), written here again: (1 - α^(γ+1)) / (1 - α)."""
    return float(gamma + 1) if alpha == 1.0 else (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def test_every_prediction_follows_from_the_stored_costs_and_counts(results):
    # Recomputed by hand from what the run stored (costs_ms, each row's α and counters), with
    # the cost model written out here, not through specjax.theory: a wrong γ, a swapped cost
    # curve or an α read from the wrong level changes these values.
    ms = {role: {int(k): v for k, v in d.items()} for role, d in results["costs_ms"].items()}
    target, middle, small = ms["target"], ms["middle"], ms["small"][1]
    checked = set()
    for rows in results["tables"].values():
        by = {r["name"]: r for r in rows}
        alpha_inner = {r["inner_gamma"]: r["alpha"] for r in rows if r["kind"] == "inner"}
        alpha_mid = {r["gamma"]: r["alpha"] for r in rows if r["kind"] == "2L-middle"}
        for row in rows:
            kind = row["kind"]
            if kind == "inner":
                gi = row["inner_gamma"]
                want = _tokens(row["alpha"], gi) * middle[1] / (middle[gi + 1] + gi * small)
            elif kind in ("2L-middle", "2L-small"):
                g = row["gamma"]
                step = middle[1] if kind == "2L-middle" else small
                want = _tokens(row["alpha"], g) * target[1] / (target[g + 1] + g * step)
            elif kind == "3L":
                g, gi = row["gamma"], row["inner_gamma"]
                inner_iteration = middle[gi + 1] + gi * small  # ms, one middle <- small iteration
                per_token = inner_iteration / _tokens(alpha_inner[gi], gi)
                outer = _tokens(alpha_mid[g], g) * target[1]
                want = outer / (target[g + 1] + g * per_token)
                calls = row["draft_calls_per_iteration"]
                assert row["predicted_speedup_calls"] == pytest.approx(
                    outer / (target[g + 1] + calls * inner_iteration), rel=1e-9
                )
                two, inner = by[f"target<-middle g{g}"], by[f"middle<-small g{gi}"]
                outer_part = two["iteration_ms"] - g * by["ar_middle"]["iteration_ms"]
                inner_part = calls * inner["iteration_ms"]
                assert row["predicted_speedup_composed"] == pytest.approx(
                    row["tokens_per_iteration"]
                    * by["ar"]["iteration_ms"]
                    / (outer_part + inner_part),
                    rel=1e-9,
                )
            else:
                assert "predicted_speedup" not in row, row["name"]
                continue
            assert row["predicted_speedup"] == pytest.approx(want, rel=1e-9), row["name"]
            checked.add(kind)
    assert checked == {"inner", "2L-middle", "2L-small", "3L"}  # every predicted kind


def test_report_lists_the_best_of_each_configuration(results):
    text = hierarchy.report(results)
    for label in ("target <- middle |", "target <- bigram |", "target <- middle <- bigram |"):
        assert label in text
    assert "Load average" in text
