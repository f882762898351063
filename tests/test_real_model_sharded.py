"""SmolLM2-135M-Instruct through `ShardedDecoder` on 8 fake CPU devices (long: `--long`).

    python -m pytest -n 0 --long tests/test_real_model_sharded.py

A fresh process (`tests/real_sharded_worker.py`) decodes eight chat prompts greedily, AR and
speculative (prompt lookup), unsharded and on four meshes (data x model): 8x1 (rows only), 2x4
and 1x8 (the model axis does not divide 9 query / 3 KV heads: attention stays replicated, the
MLP and vocabulary split), and 2x3 (3 divides both head counts: attention splits too). Every
sharded run must give the unsharded tokens. Not in CI: it compiles the 30-layer model ten times
(about 10 minutes on 2 cores).
"""

import json
import os
import subprocess
import sys

import pytest

WORKER = os.path.join(os.path.dirname(__file__), "real_sharded_worker.py")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("real_sharded") / "result.json"
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run(
        [sys.executable, WORKER, "--devices", "8", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=3600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    with open(out, encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.long
def test_every_mesh_gives_the_unsharded_tokens(result):
    assert result["devices"] == 8
    assert result["spec_reference"] == result["reference"]  # lossless on one device first
    assert set(result["meshes"]) == {"8x1", "2x4", "1x8", "2x3"}
    for name, row in result["meshes"].items():
        assert row["ar"] == result["reference"], name
        assert row["spec"] == result["reference"], name
        assert row["ar_num_new"] == result["reference_num_new"], name


@pytest.mark.long
def test_heads_split_only_where_the_model_axis_divides_them(result):
    meshes = result["meshes"]
    query, key, up = "block_0/attn/query/kernel", "block_0/attn/key/kernel", "block_0/mlp/up/kernel"
    assert "model" in meshes["2x3"]["shardings"][query]  # 9 and 3 heads over 3 devices
    assert "model" in meshes["2x3"]["shardings"][key]
    for name in ("2x4", "1x8"):  # 9 / 3 heads do not divide: replicated attention
        assert "model" not in meshes[name]["shardings"][query], name
        assert "model" not in meshes[name]["shardings"][key], name
        assert "model" in meshes[name]["shardings"][up], name  # 1536 MLP columns do
