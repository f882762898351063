"""Checkpoints: bit-exact round trips, keep-last-N, corrupt-checkpoint fallback, model loading,
and a real SIGKILL of a training process."""

import dataclasses
import functools
import os
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from absl import logging as absl_logging

from specjax import checkpoint as ckpt_lib
from specjax.data.tokenizer import VOCAB_SIZE
from specjax.models import RopeScaling, TransformerConfig, TransformerLM
from specjax.training.optim import make_optimizer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _model():
    cfg = TransformerConfig.gpt2(
        VOCAB_SIZE, num_layers=1, num_heads=2, embed_dim=16, mlp_dim=32, max_len=16
    )
    return TransformerLM(cfg)


def _state(seed):
    """Params and an optimizer state that has taken one step (non-trivial moments)."""
    model, tx, stepped = _stepped()
    params, opt_state = stepped(seed)
    return model, tx, params, opt_state


@functools.cache
def _stepped():
    """(model, optimizer, jitted seed -> (params, state)): one program for every seed, where
    running it op by op compiled ~160 small programs (one per op and parameter shape)."""
    model = _model()
    tx = make_optimizer(10, warmup_steps=1)

    def stepped(seed):  # seed: int32 []
        params = model.init_params(jax.random.PRNGKey(seed))
        opt_state = tx.init(params)
        grads = jax.tree.map(lambda p: jnp.full_like(p, 0.01 * (seed + 1)), params)
        _, opt_state = tx.update(grads, opt_state, params)
        return params, opt_state

    return model, tx, jax.jit(stepped)


def _abstract(params, opt_state):
    return jax.eval_shape(lambda: params), jax.eval_shape(lambda: opt_state)


def _meta(model, step):
    return {
        "config": {"name": "t"},
        "model": ckpt_lib.model_config_to_dict(model.config),
        "data": {"next_step": step},
    }


def _assert_trees_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_round_trip_is_bit_exact(tmp_path):
    model, _, params, opt_state = _state(0)
    ck = ckpt_lib.Checkpointer(str(tmp_path), keep=2)
    ck.save(3, params, opt_state, _meta(model, 3))
    ck.wait()
    p, o, meta = ck.restore(3, *_abstract(params, opt_state))
    _assert_trees_equal(p, params)
    _assert_trees_equal(o, opt_state)
    assert meta["data"] == {"next_step": 3} and meta["step"] == 3
    ck.close()


def test_keeps_only_the_last_n(tmp_path):
    model, _, params, opt_state = _state(0)
    ck = ckpt_lib.Checkpointer(str(tmp_path), keep=2)
    for step in (1, 2, 3, 4, 5):
        ck.save(step, params, opt_state, _meta(model, step))
    ck.wait()
    assert ck.all_steps() == [4, 5] and ck.latest_step() == 5
    ck.close()


def _damage(step_dir, item="params"):
    """Overwrites every byte of every data file of one item with 0x5a (keeps file sizes)."""
    damaged = 0
    for root, _, files in os.walk(os.path.join(step_dir, item)):
        for name in files:
            path = os.path.join(root, name)
            size = os.path.getsize(path)
            if size and not name.startswith("_"):
                with open(path, "r+b") as f:
                    f.write(b"\x5a" * size)
                damaged += 1
    assert damaged, f"nothing to damage under {step_dir}"


def _two_checkpoints(tmp_path):
    model, _, p1, o1 = _state(1)
    _, _, p2, o2 = _state(2)
    ck = ckpt_lib.Checkpointer(str(tmp_path), keep=3, async_save=False)
    ck.save(1, p1, o1, _meta(model, 1))
    ck.save(2, p2, o2, _meta(model, 2))
    return ck, (p1, o1), (p2, o2)


# orbax's restore of a damaged file leaves an asyncio callback behind that pytest reports.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_corrupt_latest_falls_back_to_the_previous_and_says_so(tmp_path, monkeypatch):
    ck, (p1, o1), _ = _two_checkpoints(tmp_path)
    _damage(ck.step_path(2))
    messages = []
    monkeypatch.setattr(absl_logging, "error", lambda msg, *a: messages.append(msg % a))
    monkeypatch.setattr(absl_logging, "warning", lambda msg, *a: messages.append(msg % a))
    step, p, o, _ = ck.restore_latest(*_abstract(p1, o1))
    assert step == 1
    _assert_trees_equal(p, p1)
    _assert_trees_equal(o, o1)
    assert any(ck.step_path(2) in m for m in messages), messages
    assert any("Fell back" in m and ck.step_path(1) in m for m in messages), messages
    # The broken step was moved aside, so the run can write step 2 again.
    assert ck.all_steps() == [1]
    assert os.path.isdir(os.path.join(str(tmp_path), "corrupt_2"))
    ck.close()


def test_another_layout_is_refused_and_no_checkpoint_is_moved(tmp_path):
    """A restore asking for other shapes (a run whose config changed its model) is not damage:
    the error names the differing arrays, and every step stays, so the original config resumes.
    Before, both steps were moved aside as corrupt and the next run started again from 0."""
    ck, (p1, o1), (p2, o2) = _two_checkpoints(tmp_path)
    wider = TransformerLM(dataclasses.replace(_model().config, embed_dim=32, mlp_dim=64))
    params = jax.eval_shape(wider.init_params, jax.random.PRNGKey(0))
    opt_state = jax.eval_shape(make_optimizer(10, warmup_steps=1).init, params)
    with pytest.raises(
        ckpt_lib.CheckpointMismatchError, match=r"params\['block_0'\].* saved \(16, "
    ) as e:
        ck.restore_latest(params, opt_state)
    assert ck.step_path(2) in str(e.value) and "left in place" in str(e.value)
    assert isinstance(e.value, ValueError)  # the launcher's one-line user error
    assert ck.all_steps() == [1, 2]
    assert not [n for n in os.listdir(tmp_path) if n.startswith(ckpt_lib.CORRUPT_PREFIX)]
    step, p, o, _ = ckpt_lib.Checkpointer(str(tmp_path)).restore_latest(*_abstract(p2, o2))
    assert step == 2
    _assert_trees_equal(p, p2)
    _assert_trees_equal(o, o2)
    # An optimizer with other state (same params) is another layout too.
    sgd = optax.sgd(0.1, momentum=0.9).init(p2)
    with pytest.raises(ckpt_lib.CheckpointMismatchError, match="opt_state"):
        ck.restore(2, *_abstract(p2, sgd))
    assert ck.all_steps() == [1, 2]
    ck.close()


def test_silent_damage_is_caught_by_the_checksum(tmp_path):
    model, _, params, opt_state = _state(0)
    ck = ckpt_lib.Checkpointer(str(tmp_path), keep=1, async_save=False)
    meta = _meta(model, 1)
    ck.save(1, params, opt_state, meta)
    # Rewrite the params with different values but keep the old checksum in meta: the files
    # are valid, only their contents changed, which is what an unnoticed bit flip looks like.
    other = jax.tree.map(lambda x: x + 1, params)
    old_checksum = ckpt_lib.tree_checksum(params)
    ck2 = ckpt_lib.Checkpointer(str(tmp_path / "b"), keep=1, async_save=False)
    ck2.save(1, other, opt_state, meta)
    meta_path = os.path.join(ck2.step_path(1), "meta", "metadata")
    text = open(meta_path).read()
    open(meta_path, "w").write(text.replace(ckpt_lib.tree_checksum(other), old_checksum))
    with pytest.raises(ckpt_lib.CheckpointError, match=r"b/1: params checksum"):
        ck2.restore(1, *_abstract(params, opt_state))
    ck.close()
    ck2.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_all_corrupt_raises_naming_every_path(tmp_path):
    ck, (p1, o1), _ = _two_checkpoints(tmp_path)
    _damage(ck.step_path(1))
    _damage(ck.step_path(2))
    with pytest.raises(ckpt_lib.CheckpointError) as info:
        ck.restore_latest(*_abstract(p1, o1))
    assert ck.step_path(1) in str(info.value) and ck.step_path(2) in str(info.value)
    # A heading and one line per checkpoint, not TensorStore's spec (80 lines of JSON) after
    # each cause.
    assert len(str(info.value).splitlines()) == 3, str(info.value)
    ck.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_damaged_export_is_named_in_one_line(tmp_path):
    model, _, params, _ = _state(0)
    export = ckpt_lib.export_model(str(tmp_path / "export"), params, dict(_meta(model, 7), step=7))
    _damage(os.path.join(export, "7"))
    with pytest.raises(ckpt_lib.CheckpointError) as info:
        ckpt_lib.load_model(export)
    text = str(info.value)
    assert text.startswith(f"checkpoint {export}/7 cannot be loaded: ") and "\n" not in text
    assert len(text) < 500, text


def test_load_model_from_run_dir_and_export(tmp_path):
    model, _, params, opt_state = _state(0)
    ck = ckpt_lib.Checkpointer(str(tmp_path / "run" / "checkpoints"), keep=1, async_save=False)
    ck.save(7, params, opt_state, _meta(model, 7))
    ck.close()
    loaded, p, meta = ckpt_lib.load_model(str(tmp_path / "run"))
    assert loaded == model and meta["step"] == 7
    _assert_trees_equal(p, params)
    export = ckpt_lib.export_model(str(tmp_path / "export"), params, dict(_meta(model, 7), step=7))
    _assert_trees_equal(ckpt_lib.load_params(export), params)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        ckpt_lib.load_model(str(tmp_path / "missing"))


def test_model_config_round_trip_with_rope_scaling():
    cfg = TransformerConfig.llama(VOCAB_SIZE, num_layers=1, rope_scaling=RopeScaling(factor=4.0))
    assert ckpt_lib.model_config_from_dict(ckpt_lib.model_config_to_dict(cfg)) == cfg


def _train_command(workdir, steps):
    return [
        sys.executable,
        "-m",
        "experiments.main",
        f"--config={REPO}/configs/train.py:model=tiny_target,steps={steps}",
        "--config.checkpoint_every=25",
        "--config.eval_every=100000",
        "--config.log_every=50",
        f"--workdir={workdir}",
    ]


def _steps_on_disk(workdir):
    directory = os.path.join(workdir, "checkpoints")
    if not os.path.isdir(directory):
        return []
    return sorted(int(n) for n in os.listdir(directory) if n.isdigit())


@pytest.mark.slow
def test_sigkill_then_restart_matches_an_uninterrupted_run(tmp_path):
    # A training process is killed with SIGKILL once its checkpoint at step >= 50 is on disk
    # (of 150 steps), restarted, and must end with exactly the parameters of a run that was
    # never interrupted. Each process is bounded by a timeout. The uninterrupted run shares
    # nothing with the killed one (own workdir), so it runs beside it instead of after it. A
    # checkpoint every 25 steps (orbax saves cost more than these steps) and 100 steps after
    # step 50 leave the 20 ms poll ample time to kill mid-run, between checkpoints.
    steps = 150
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    killed_dir, whole_dir = str(tmp_path / "killed"), str(tmp_path / "whole")
    whole_log = open(tmp_path / "whole.log", "wb")  # noqa: SIM115 (closed below)
    whole = subprocess.Popen(
        _train_command(whole_dir, steps),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=whole_log,
    )
    proc = subprocess.Popen(
        _train_command(killed_dir, steps),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 240
        while not any(s >= 50 for s in _steps_on_disk(killed_dir)):
            assert proc.poll() is None, "training ended before it could be killed"
            assert time.monotonic() < deadline, "no checkpoint at step >= 50 within 240 s"
            time.sleep(0.02)
        assert proc.poll() is None, "training finished before the kill: make it longer"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        killed_at = max(_steps_on_disk(killed_dir))
        assert killed_at < steps
        logs = {}
        done = subprocess.run(
            _train_command(killed_dir, steps), cwd=REPO, env=env, capture_output=True, timeout=300
        )
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        logs[killed_dir] = done.stderr.decode()
        whole.wait(timeout=300)
        assert whole.returncode == 0, (tmp_path / "whole.log").read_text()[-3000:]
    finally:
        for p in (proc, whole):
            if p.poll() is None:
                p.kill()
                p.wait()
        whole_log.close()
    assert f"(step {killed_at})" in logs[killed_dir] and "Resuming from" in logs[killed_dir]
    _, p_killed, meta_killed = ckpt_lib.load_model(killed_dir)
    _, p_whole, meta_whole = ckpt_lib.load_model(whole_dir)
    assert meta_killed["step"] == meta_whole["step"] == steps
    _assert_trees_equal(p_killed, p_whole)
