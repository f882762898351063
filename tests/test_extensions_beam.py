"""experiments/extensions/beam.py end to end on its tiny config (random-weight models)."""

from __future__ import annotations

import json
import os

from configs import extensions as ext_config
from experiments.extensions import beam


def test_tiny_config_runs(tmp_path):
    config = ext_config.beam(tiny=True)
    results = beam.run(config, str(tmp_path), log=lambda msg: None)
    rows = results["rows"]
    shapes = len(config.gammas) + len(config.trees)
    assert len(rows) == len(config.beams) * (1 + len(config.drafts) * shapes)
    assert all(r["exact"] for r in rows)  # speculative beam search gave plain's hypotheses
    plain = [r for r in rows if r["draft"] == "-"]
    assert all(r["calls_per_step"] == 1.0 for r in plain)
    assert all(0 < r["calls_per_step"] <= 1.0 for r in rows)
    with open(os.path.join(tmp_path, "beam.json")) as f:
        assert json.load(f)["rows"] == rows
    table = beam.report(results)
    assert table.count("\n| 2 |") == len(rows)
