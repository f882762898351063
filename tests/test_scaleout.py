"""configs/scale.py, the models it describes, and the AOT script's answer without libtpu."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from configs import scale
from experiments import scale as scale_lib

REPO = Path(__file__).resolve().parent.parent


def test_scale_config_options_pick_sizes_vocab_and_mesh():
    config = scale.get_config("target=llama_1b,draft=llama_68m,model=4")
    assert config.target.size == "llama_1b" and config.target.embed_dim == 2048
    assert config.draft.num_layers == 2 and config.vocab_size == 32000
    assert tuple(config.mesh.shape) == (-1, 4) and config.dtype == "bfloat16"
    tiny = scale.get_config("tiny,draft=self,data=2")
    assert tiny.vocab_size == 256 and tuple(tiny.mesh.shape) == (2, 1)
    assert tiny.draft.size == "self" and tiny.dtype == "float32"


@pytest.mark.parametrize(
    "arg, message",
    [("target=gpt5", "is not one of"), ("draft=self2", "is not one of"), ("layers=3", "option")],
)
def test_scale_config_rejects_unknown_options(arg, message):
    with pytest.raises(ValueError, match=message):
        scale.get_config(arg)


def test_build_models_follow_the_config():
    config = scale.get_config("tiny")
    target, draft = scale_lib.build_models(config)
    assert target.config.num_kv_heads == 2 and target.config.positions == "rope"
    assert draft.config.embed_dim == 32 and draft.vocab_size == target.vocab_size == 256
    assert target.config.max_len == max(config.cache_len, config.seq_len)
    same, itself = scale_lib.build_models(scale.get_config("tiny,draft=self"))
    assert itself is same


@pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is not None, reason="libtpu installed: it would compile"
)
def test_aot_check_without_libtpu_explains_and_exits_2():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "aot_compile_check.py"), "--topology=v5e:2x2"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "jax[tpu]==" in proc.stderr and "--platform=cpu" in proc.stderr
