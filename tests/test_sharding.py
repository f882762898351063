"""Sharded generation, training and checkpoints on 8 fake CPU devices, and across 2 processes.

The device count is fixed when JAX's backend starts, and this pytest process already started it
with one device, so the work runs in tests/sharding_worker.py subprocesses (XLA_FLAGS set before
their first JAX import); each test reads the worker's JSON. One worker run serves the
single-process tests (module fixture), keeping the compile cost to one process.

Equality of sharded and unsharded tokens is exact, not statistical: same seeds, same programs up
to the summation order of split matmuls (~1e-6 relative in the logits). A token could only
differ where two logits tie to within that, which the confident tiny models (weights scaled 4x)
make vanishingly rare; with fixed seeds the outcome is deterministic, so a failure here is a
real bug (e.g. a wrong PRNG split or a cache rolled back on the wrong shard), not noise.
"""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("sharding_worker.py")
REPO = WORKER.parent.parent
# Bounds for the subprocesses: about 4x what they take on an idle 2-core CI machine.
SINGLE_PROCESS_TIMEOUT_S = 480  # worker: 116 s measured (train scenario 49 s of it)
MULTI_PROCESS_TIMEOUT_S = 180

# Sharded vs single-device training differ only in float32 summation order, whose error is at
# most ~n * eps (eps = 6e-8) of the summed magnitudes for a sum of n terms: 1e-4 relative covers
# reordered sums of ~1e3 terms, while a gradient missing its all-reduce over `data` (a quarter
# of the rows) is off by O(1) relative. Both bounds are checked against that broken step below.
SGD_REL_BOUND = 1e-4  # max |params diff| after one SGD step, over max |update|
MOMENT_BOUND = 1e-6  # max |Adam state diff| after two steps; the first moments are <= 0.011


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _worker_command(out, *args):
    return [sys.executable, str(WORKER), "--out", str(out), *args]


@pytest.fixture(scope="module")
def eight_devices(tmp_path_factory):
    """Runs the generate, train and checkpoint scenarios on 8 fake devices (data 4 x model 2)."""
    out = tmp_path_factory.mktemp("sharding") / "eight.json"
    cmd = _worker_command(out, "--devices", "8", "generate", "train", "checkpoint")
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=SINGLE_PROCESS_TIMEOUT_S, env=_env()
    )
    assert proc.returncode == 0, f"worker failed:\n{proc.stderr[-4000:]}"
    return json.loads(out.read_text())


@pytest.mark.slow
def test_worker_sees_eight_devices_on_a_4x2_mesh(eight_devices):
    assert eight_devices["devices"] == 8
    assert eight_devices["mesh"] == {"data": 4, "model": 2}


@pytest.mark.slow
def test_target_is_tensor_parallel_and_draft_replicated(eight_devices):
    layout = eight_devices["generate"]["layout"]
    assert layout["target_up_kernel"] == [None, "model"]
    assert layout["target_up_kernel_global"] == [32, 64]
    assert layout["target_up_kernel_shard"] == [32, 32]  # half the MLP per model-axis device
    assert layout["target_query_kernel"] == [None, "model", None]
    assert layout["target_embed"] == ["model", None]
    assert layout["draft_up_kernel"] == [None, None]
    # Split matmuls must be summed across devices: the compiled program has all-reduces.
    assert layout["all_reduce_ops"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("case", ["ar_greedy", "spec_greedy"])
def test_sharded_greedy_generation_equals_unsharded(eight_devices, case):
    got = eight_devices["generate"][case]
    assert got["sharded"]["lengths"] == got["unsharded"]["lengths"] == [15, 21, 17, 19]
    assert got["sharded"]["tokens"] == got["unsharded"]["tokens"]


@pytest.mark.slow
@pytest.mark.parametrize("case", ["spec_sample", "tree_sample"])
def test_sharded_speculative_sampling_with_same_key_equals_unsharded(eight_devices, case):
    got = eight_devices["generate"][case]
    assert got["sharded"]["tokens"] == got["unsharded"]["tokens"]
    assert got["sharded"]["lengths"] == got["unsharded"]["lengths"]
    if case == "tree_sample":  # paths below the first rank and depth were compacted
        summary = got["summary"]
        assert sum(summary["accepted_depth_histogram"][2:]) > 0, summary
        assert max(summary["accepted_rank_by_depth"][0][1:]) > 0, summary


@pytest.mark.slow
@pytest.mark.parametrize("case", ["spec_greedy", "spec_sample"])
def test_speculative_runs_exercise_both_acceptance_and_rollback(eight_devices, case):
    # Otherwise the equality above would not cover per-row rollback of sharded caches.
    alpha = eight_devices["generate"][case]["summary"]["alpha_empirical"]
    assert 0.2 < alpha < 0.95


@pytest.mark.slow
def test_batch_not_divisible_by_data_axis_is_rejected(eight_devices):
    message = eight_devices["generate"]["odd_batch_error"]
    assert message is not None and "batch of 3 rows cannot be split 4 ways" in message


@pytest.mark.slow
def test_sharded_train_step_matches_single_device(eight_devices):
    train = eight_devices["train"]
    for ref, got in zip(train["unsharded_metrics"], train["sharded_metrics"], strict=True):
        # Measured: loss 1.4e-7 relative, grad_norm 5.2e-7 (19x below the bound).
        assert got["loss"] == pytest.approx(ref["loss"], rel=1e-5)
        assert got["grad_norm"] == pytest.approx(ref["grad_norm"], rel=1e-5)
    # Adam moments are (clipped) gradient averages, linear and quadratic in the gradient.
    # Measured 1.7e-8 (58x below the bound; 1.0e-8 to 2.1e-8 on meshes 8x1, 4x2, 2x4, 1x8);
    # without the data all-reduce 1.3e-2 (test below).
    assert train["opt_state_max_diff"] < MOMENT_BOUND
    # Adam's params are not compared entry by entry: it divides by sqrt(v), so an entry whose
    # gradient is ~0 turns rounding noise into a step of up to lr (measured max diffs: 2e-5 to
    # 4.7e-4 on the four meshes above, 1e-3 on another CI machine). Adam's normalised step moves
    # an entry of steady gradient sign by ~lr: 1e-2 + 9.8e-3 over two steps (measured 0.0204).
    assert train["params_max_change"] > 0.01
    # One plain-SGD step: the update is -gradient, so rounding reaches the params unamplified.
    # Measured 3.3e-6 relative (30x below the bound; 1.2e-6 to 4.1e-6 over both batches on
    # meshes 8x1, 4x2, 2x4 and 1x8); without the data all-reduce 3.0 (test below).
    sgd = train["sgd"]
    assert sgd["update_max"] > 0.1
    assert sgd["max_diff"] < SGD_REL_BOUND * sgd["update_max"]
    assert train["up_kernel_spec"] == [None, "model"]
    assert train["up_kernel_mu_spec"] == [None, "model"]
    assert train["step"] == 2


@pytest.mark.slow
def test_train_comparison_catches_a_missing_data_all_reduce(eight_devices):
    """The negative control: the sharded step whose gradient skips the all-reduce over `data`.

    Each data shard then steps on its own 2 of the 8 rows (sharding_worker's
    `_without_data_all_reduce`); the bounds above must reject that by far, not by luck.
    """
    train = eight_devices["train"]
    broken = train["no_all_reduce"]
    update_max = train["sgd"]["update_max"]
    # It is the bug it emulates: the step on data shard 0's rows alone (measured 2.9e-6).
    assert broken["sgd_vs_first_rows_max_diff"] < SGD_REL_BOUND * update_max
    # Measured 2.46 (3.0 relative: 30000x the bound) and 1.3e-2 (13000x the bound).
    assert broken["sgd_max_diff"] > 100 * SGD_REL_BOUND * update_max
    assert broken["opt_state_max_diff"] > 100 * MOMENT_BOUND


@pytest.mark.slow
def test_checkpoint_saved_under_one_mesh_restores_under_another(eight_devices):
    ckpt = eight_devices["checkpoint"]
    assert ckpt["saved_mesh"] == {"data": 4, "model": 2}
    assert ckpt["restored_mesh"] == {"data": 2, "model": 4}
    assert ckpt["restored_up_kernel_spec"] == [None, "model"]
    assert ckpt["restored_up_kernel_shard"] == [32, 16]  # a quarter of the MLP per device now
    assert ckpt["max_diff"] == 0.0
    assert ckpt["restored_step"] == 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_generate_what_one_process_generates(eight_devices, tmp_path):
    """2 processes x 2 CPU devices, jax.distributed over 127.0.0.1, a 2x2 mesh across both."""
    port = _free_port()
    procs, outs = [], []
    for pid in range(2):
        outs.append(tmp_path / f"process{pid}.json")
        cmd = _worker_command(
            outs[-1],
            "--devices",
            "2",
            "--coordinator",
            f"127.0.0.1:{port}",
            "--num-processes",
            "2",
            "--process-id",
            str(pid),
            "multiprocess",
        )
        log = open(tmp_path / f"process{pid}.log", "w")  # noqa: SIM115 (closed below)
        procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=_env()), log))
    deadline = time.monotonic() + MULTI_PROCESS_TIMEOUT_S
    try:
        for proc, _ in procs:
            proc.wait(timeout=max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        pytest.fail(f"multi-process generation exceeded {MULTI_PROCESS_TIMEOUT_S} s")
    finally:
        for proc, log in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
    for pid, (proc, _) in enumerate(procs):
        log = (tmp_path / f"process{pid}.log").read_text()
        assert proc.returncode == 0, f"process {pid} failed:\n{log[-4000:]}"
    reference = eight_devices["generate"]["spec_greedy"]["unsharded"]
    for pid, out in enumerate(outs):
        result = json.loads(out.read_text())
        assert result["process_index"] == pid and result["process_count"] == 2
        assert result["devices"] == 4 and result["mesh"] == {"data": 2, "model": 2}
        assert result["multiprocess"]["spec_greedy"] == reference
