"""Runs the extension parts a config names and writes each part's results and report.

    python -m experiments.main --config=configs/extensions.py[:tiny|:parts=adaptive] --workdir=W

Each part is a module `experiments/extensions/<part>.py` with `run(config, workdir, log) -> dict`
(JSON-able) and `report(results) -> str` (markdown); its config is `configs/extensions.py`'s
function of the same name (`config[part]`). Outputs per part:
`W/<part>/results.json` and `W/<part>/results.md` (a pure function of results.json).
"""

from __future__ import annotations

import importlib
import json
import os
import time


def run(config, workdir: str, log=print) -> dict:
    """Runs every part in `config.parts`; returns {part: results}."""
    os.makedirs(workdir, exist_ok=True)
    out = {}
    for part in config.parts:
        module = importlib.import_module(f"experiments.extensions.{part}")
        part_dir = os.path.join(workdir, part)
        os.makedirs(part_dir, exist_ok=True)
        log(f"== {part} ==")
        start = time.perf_counter()
        results = module.run(config[part], part_dir, log)
        results["seconds"] = time.perf_counter() - start
        results["load_average"] = os.getloadavg()
        with open(os.path.join(part_dir, "results.json"), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
        text = module.report(results)
        with open(os.path.join(part_dir, "results.md"), "w", encoding="utf-8") as f:
            f.write(text + "\n")
        log(text)
        out[part] = results
    return out
