"""experiments/extensions/hierarchy.py end to end on its tiny config (random-weight models).

Checks what does not depend on timing: every configuration of the grid is measured, the
results are JSON-serialisable and written, the counters are consistent, the recursive cost
model's predictions are computed, and the report lists the best γ of each configuration.
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
        for row in kinds["3L"]:
            # The inner level runs until every row has gamma + 1 tokens: at least one middle
            # call per outer iteration, and tokens per iteration within [1, gamma + 1].
            assert row["draft_calls_per_iteration"] >= 1.0
            assert 1.0 <= row["tokens_per_iteration"] <= row["gamma"] + 1
            assert row["predicted_speedup"] > 0 and row["predicted_speedup_calls"] > 0
            assert "predicted_speedup_composed" in row


def test_report_lists_the_best_of_each_configuration(results):
    text = hierarchy.report(results)
    for label in ("target <- middle |", "target <- bigram |", "target <- middle <- bigram |"):
        assert label in text
    assert "Load average" in text
