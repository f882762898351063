"""Every heads preset trains on SmolLM2-135M-Instruct on the CPU (long: `--long`).

    python -m pytest -n 0 --long tests/test_real_heads_long.py

`python -m experiments.main --config=configs/heads.py:<head>` on the real target, with its data
cut to 4 prompts x 8 reply tokens and 3 steps: the target's replies, their features (three
blocks' for EAGLE-3), the head's training with a checkpoint, the summary. The CI-sized `tiny`
preset runs in CI on a random two-layer target; this runs the real target's shapes, where
EAGLE-3's training-time test writes more cache slots than two blocks of the CPU's blockwise
attention (it failed there at the first step until 2026-11-29). Minutes per head on 2 cores.
"""

import json
import math
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADS = ("eagle1", "eagle3", "eagle3,draft_vocab=0", "medusa", "distilled,layers=1")


@pytest.mark.long
@pytest.mark.parametrize("head", HEADS)
def test_a_heads_preset_trains_on_the_real_target(head, tmp_path):
    workdir = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "experiments.main",
        f"--config=configs/heads.py:{head},steps=3,prompts=4",
        "--config.data.max_new_tokens=8", "--config.train.checkpoint_every=2",
        "--config.train.warmup_steps=1", f"--workdir={workdir}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    with open(workdir / "summary.json", encoding="utf-8") as f:
        summary = json.load(f)
    assert summary["steps"] == 3
    data = summary["data"]  # one sequence per prompt; a prompt over 320 tokens is skipped
    assert data["sequences"] + data["prompts_skipped"] == 4 and data["sequences"] >= 1
    assert summary["final"] and all(math.isfinite(v) for v in summary["final"].values())
    assert (workdir / "checkpoints").is_dir()
