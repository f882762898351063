"""Runs the extension parts a config names and writes each part's results and report.

    python -m experiments.main --config=configs/extensions.py[:tiny|:parts=adaptive] --workdir=W

Each part is a module `experiments/extensions/<part>.py` with `run(config, workdir, log) -> dict`
(JSON-able), `report(results) -> str` (markdown) and optionally `check(config, name)`, which
refuses its own fields before any part runs; its config is `configs/extensions.py`'s function
of the same name (`config[part]`). Outputs per part:
`W/<part>/results.json` and `W/<part>/results.md` (a pure function of results.json).
"""

from __future__ import annotations

import importlib
import json
import os
import time


def _modules(config) -> dict:
    return {p: importlib.import_module(f"experiments.extensions.{p}") for p in config.parts}


def check(config) -> None:
    """Raises ValueError naming a bad field of any part in `config.parts` (each part's optional
    `check`), so a later part's typo does not wait for minutes of an earlier part's run."""
    for part, module in _modules(config).items():
        if hasattr(module, "check"):
            module.check(config[part], f"config.{part}")


def run(config, workdir: str, log=print) -> dict:
    """Runs every part in `config.parts`; returns {part: results}."""
    check(config)
    modules = _modules(config)
    os.makedirs(workdir, exist_ok=True)
    out = {}
    for part, module in modules.items():
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
