r"""Sharded speculative generation and training throughput on every device of every process.

Every process runs the same command; process 0 prints. See configs/scale.py for the models and
sizes, scripts/launch_tpu.sh and scripts/launch_gpu.sh for TPU/GPU launch lines.

    # One process, 8 fake CPU devices, data 4 x model 2:
    python scripts/run_sharded.py --config=configs/scale.py:tiny,model=2 --cpu_devices=8
    # Two local processes x 2 CPU devices (what a 2-host cluster does), JAX's own runtime:
    for i in 0 1; do python scripts/run_sharded.py --config=configs/scale.py:tiny,model=2 \
        --cpu_devices=2 --distributed=explicit --coordinator_address=127.0.0.1:12355 \
        --num_processes=2 --process_id=$i & done; wait

--distributed=auto calls `jax.distributed.initialize()` with no arguments: JAX detects the
processes on TPU pod slices, SLURM and Open MPI; --distributed=explicit takes the three flags.
"""

import os
import sys
import time

import numpy as np
from absl import app, flags
from ml_collections import config_flags

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)  # configs/ and experiments/ are run from the checkout

import specjax  # noqa: E402

config_flags.DEFINE_config_file(
    "config", os.path.join(_REPO, "configs", "scale.py"), "configs/scale.py[:options]"
)
_TASKS = flags.DEFINE_list("tasks", ["generate", "train"], "generate and/or train.")
flags.register_validator(
    "tasks",
    lambda v: bool(v) and set(v) <= {"generate", "train"},
    "each of --tasks must be generate or train",
)
_DISTRIBUTED = flags.DEFINE_enum(
    "distributed", "none", ["none", "auto", "explicit"], "How processes find each other."
)
_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "host:port of process 0.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in the job.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")
_CPU_DEVICES = flags.DEFINE_integer("cpu_devices", 0, "Fake CPU devices per process (0: off).")


def log(*args):
    import jax

    if jax.process_index() == 0:
        print(*args, flush=True)


def run_generate(config, mesh):
    """Times sharded speculative generation; prints ms/token and the acceptance rate."""
    import jax

    from experiments import scale

    target, draft = scale.build_models(config)
    target, draft, tp, dp = scale.load_params(config, target, draft)
    decoder = scale.sharded_decoder(config, target, draft, mesh)
    tp, dp = decoder.shard_params(tp, dp)
    rng = np.random.default_rng(config.seed)  # same prompts in every process
    prompts = rng.integers(0, config.vocab_size, (config.batch_size, config.prompt_len))
    key = jax.random.PRNGKey(config.seed)
    times = []
    for _ in range(config.repeats + 1):
        start = time.perf_counter()
        result = decoder.generate(
            tp, dp, prompts=prompts, key=key, max_new_tokens=config.max_new_tokens
        )
        jax.block_until_ready(result.tokens)
        times.append(time.perf_counter() - start)
    summary = result.summary()
    per_token = np.median(times[1:]) * 1e3 / max(summary["tokens_emitted"], 1)
    log(
        f"generate: first call {times[0]:.1f} s (compile); {per_token:.3f} ms per token over "
        f"{summary['tokens_emitted']} tokens; alpha {summary['alpha_empirical']:.3f}, "
        f"{summary['tokens_per_iteration']:.2f} tokens/iteration"
    )


def run_train(config, mesh):
    """Times sharded AdamW steps on random token windows; prints loss and tokens/s."""
    import jax

    from experiments import scale
    from specjax import sharding as sh
    from specjax.training.steps import init_train_state

    target, _ = scale.build_models(config)
    step, _, shardings, tx = scale.train_program(config, target, mesh)
    params = target.init_params(jax.random.PRNGKey(config.seed))
    state = sh.put(init_train_state(params, tx), shardings)
    rows = sh.batch_sharding(mesh, sh.rules_from_config(config.mesh), 2)
    rng = np.random.default_rng(config.seed)
    times = []
    for i in range(config.train_steps):
        batch = rng.integers(0, config.vocab_size, (config.train_batch_size, config.seq_len + 1))
        start = time.perf_counter()
        state, metrics = step(state, sh.put(batch.astype(np.int32), rows))
        loss = float(sh.to_host(metrics)["loss"])
        times.append(time.perf_counter() - start)
        log(f"train step {i + 1}: loss {loss:.4f} ({times[-1]:.2f} s)")
    if len(times) > 1:
        tokens = config.train_batch_size * config.seq_len
        log(f"train: {tokens / np.median(times[1:]):.0f} tokens/s after the compiling step")


def main(argv):
    del argv
    specjax.configure_cpu()  # before JAX starts
    if _CPU_DEVICES.value:
        flag = f"--xla_force_host_platform_device_count={_CPU_DEVICES.value}"
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
    import jax

    from specjax import sharding as sh

    if _DISTRIBUTED.value == "auto":
        jax.distributed.initialize()
    elif _DISTRIBUTED.value == "explicit":
        if None in (_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value):
            raise app.UsageError(
                "--distributed=explicit needs --coordinator_address, --num_processes and "
                "--process_id"
            )
        sh.initialize_distributed(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
    config = flags.FLAGS.config
    mesh = sh.mesh_from_config(config.mesh)
    log(
        f"{jax.process_count()} process(es), {jax.device_count()} x {jax.devices()[0].device_kind}"
        f"; mesh {dict(mesh.shape)}; target {config.target.size}, draft {config.draft.size}"
    )
    if "generate" in _TASKS.value:
        run_generate(config, mesh)
    if "train" in _TASKS.value:
        run_train(config, mesh)
    if _DISTRIBUTED.value != "none":
        jax.distributed.shutdown()


if __name__ == "__main__":
    app.run(main)
