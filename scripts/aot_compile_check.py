r"""Ahead-of-time compilation of sharded generation and training for a named TPU topology.

Compiles (never runs) the programs of configs/scale.py for devices that need not exist, and
prints each program's per-device memory, FLOPs and collectives, so a mesh and batch size can be
checked against a TPU slice before renting it:

    pip install "jax[tpu]==$(python -c 'import jax; print(jax.__version__)')"  # adds libtpu
    python scripts/aot_compile_check.py --config=configs/scale.py:target=llama_1b,model=4 \
        --topology=v5e:2x4
    python scripts/aot_compile_check.py --config=configs/scale.py:tiny,model=2 \
        --platform=cpu --cpu_devices=8          # the same path on fake CPU devices

It uses `jax.experimental.topologies.get_topology_desc(topology_name, "tpu")`, which loads
libtpu but needs no TPU: with jax 0.10.2 and libtpu 0.0.42.1 (what `jax[tpu]==0.10.2` pins) it
works on a CPU-only machine (libtpu prints warnings about missing TPU metadata; ignore them).
Topology names are "<generation>:<chips per dimension>", e.g. v4:2x2x1, v5e:2x2, v5e:4x4,
v5p:2x2x1, v6e:2x2. Without libtpu the script says so and exits with status 2.
"""

import os
import sys
import time

from absl import app, flags
from ml_collections import config_flags

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)  # configs/ and experiments/ are run from the checkout

import specjax  # noqa: E402

config_flags.DEFINE_config_file(
    "config", os.path.join(_REPO, "configs", "scale.py"), "configs/scale.py[:options]"
)
_TOPOLOGY = flags.DEFINE_string("topology", "v5e:2x2", "TPU topology name (platform tpu).")
_PLATFORM = flags.DEFINE_enum("platform", "tpu", ["tpu", "cpu"], "Compile for TPU or for CPU.")
_CPU_DEVICES = flags.DEFINE_integer("cpu_devices", 8, "Fake CPU devices (platform cpu).")
_PROGRAMS = flags.DEFINE_list("programs", ["generate", "train"], "generate and/or train.")
flags.register_validator(
    "programs",
    lambda v: bool(v) and set(v) <= {"generate", "train"},
    "each of --programs must be generate or train",
)

# HBM per chip, for the "fits" column (published figures; compile-only devices cannot say).
_HBM_GIB = {
    "TPU v4": 32,
    "TPU v5 lite": 16,
    "TPU v5e": 16,
    "TPU v5p": 95,
    "TPU v5": 95,
    "TPU v6 lite": 32,
    "TPU v6e": 32,
}


def topology_devices(platform: str, topology: str):
    """Compile-only TPU devices of `topology`, or this process's CPU devices."""
    import jax
    from jax.experimental import topologies

    if platform == "cpu":
        return jax.devices("cpu")
    try:
        return topologies.get_topology_desc(topology, "tpu").devices
    except RuntimeError as e:
        if "TPU support not installed" not in str(e):
            raise
        print(
            f"Cannot compile for {topology}: {e}\nInstall libtpu with "
            f"pip install 'jax[tpu]=={jax.__version__}' (no TPU needed), or use --platform=cpu.",
            file=sys.stderr,
        )
        sys.exit(2)


def report(name: str, compiled, seconds: float, device_kind: str) -> dict:
    """Prints one compiled program's per-device memory, FLOPs and collectives."""
    memory = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else (cost or {})
    text = compiled.as_text()
    mib = 2.0**20
    args_mib = memory.argument_size_in_bytes / mib
    temp_mib = memory.temp_size_in_bytes / mib
    out_mib = (memory.output_size_in_bytes - memory.alias_size_in_bytes) / mib
    total = args_mib + temp_mib + out_mib
    hbm = _HBM_GIB.get(device_kind)
    fits = "unknown HBM" if hbm is None else ("fits" if total < hbm * 1024 else "DOES NOT FIT")
    collectives = {
        op: text.count(f" {op}(") + text.count(f" {op}-start(")
        for op in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
    }
    print(
        f"{name:9s} compile {seconds:6.1f} s | per device: args {args_mib:.1f} MiB, temp "
        f"{temp_mib:.1f} MiB, out {out_mib:.1f} MiB = {total:.1f} MiB ({fits}"
        f"{'' if hbm is None else f' in {hbm} GiB'}) | {cost.get('flops', float('nan')):.3g} "
        f"FLOPs | {', '.join(f'{k} {v}' for k, v in collectives.items() if v)}"
    )
    return {"total_mib": total, "collectives": collectives}


def main(argv):
    del argv
    specjax.configure_cpu()  # before JAX starts
    if _PLATFORM.value == "cpu":
        # Read when the CPU backend starts (first device query below), so set it first.
        flag = f"--xla_force_host_platform_device_count={_CPU_DEVICES.value}"
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()

    import jax

    from experiments import scale
    from specjax import sharding as sh

    config = flags.FLAGS.config
    devices = topology_devices(_PLATFORM.value, _TOPOLOGY.value)
    kind = devices[0].device_kind
    mesh = sh.mesh_from_config(config.mesh, devices)
    target, draft = scale.build_models(config)
    print(
        f"{_TOPOLOGY.value if _PLATFORM.value == 'tpu' else 'cpu'}: {len(devices)} x {kind}; "
        f"mesh {dict(mesh.shape)}; target {config.target.size} "
        f"({target.config.num_params() / 1e6:.0f}M params), draft {config.draft.size}, "
        f"{config.dtype}"
    )
    if "generate" in _PROGRAMS.value:
        decoder = scale.sharded_decoder(config, target, draft, mesh)
        abstract = [jax.eval_shape(m.init_params, jax.random.PRNGKey(0)) for m in decoder.models]
        start = time.perf_counter()
        width = config.prompt_len
        lowered = decoder.lower(*abstract, batch=config.batch_size, prompt_width=width)
        compiled = lowered.compile()
        report("generate", compiled, time.perf_counter() - start, kind)
    if "train" in _PROGRAMS.value:
        step, state, _, _ = scale.train_program(config, target, mesh)
        start = time.perf_counter()
        compiled = step.lower(state, scale.abstract_batch(config)).compile()
        report("train", compiled, time.perf_counter() - start, kind)


if __name__ == "__main__":
    app.run(main)
