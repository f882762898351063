#!/usr/bin/env bash
# Sharded speculative generation and training on one or several multi-GPU hosts.
#
# Install once per host (CUDA 12 wheels bring their own CUDA/cuDNN/NCCL):
#   pip install -e . "jax[cuda12]==0.10.2"
#
# One host, all its GPUs in one process (simplest; e.g. 8 GPUs as data 2 x model 4):
#   bash scripts/launch_gpu.sh --config=configs/scale.py:target=llama_1b,model=4
#
# Several hosts, one process per host, JAX's own runtime (coordinator = host 0, any free port):
#   host 0: COORDINATOR=host0:12355 NUM_PROCESSES=2 PROCESS_ID=0 bash scripts/launch_gpu.sh ...
#   host 1: COORDINATOR=host0:12355 NUM_PROCESSES=2 PROCESS_ID=1 bash scripts/launch_gpu.sh ...
# Under SLURM (srun) or Open MPI (mpirun) JAX detects all three; set DISTRIBUTED=auto instead:
#   srun --nodes=2 --ntasks-per-node=1 --gpus-per-node=8 \
#     env DISTRIBUTED=auto bash scripts/launch_gpu.sh --config=configs/scale.py:target=llama_1b,model=8
#
# Mesh: keep `model` within a host (NVLink carries its per-layer all-reduces); `data` spans hosts
# (InfiniBand/Ethernet carries only per-step gradient all-reduces and the loop's stop flag).
#
# The same launcher runs on CPU for a dry run of the multi-process path (what the tests do):
#   for i in 0 1; do JAX_PLATFORMS=cpu CPU_DEVICES=2 COORDINATOR=127.0.0.1:12355 \
#     NUM_PROCESSES=2 PROCESS_ID=$i bash scripts/launch_gpu.sh \
#     --config=configs/scale.py:tiny,model=2 & done; wait
#
# Environment knobs: COORDINATOR, NUM_PROCESSES, PROCESS_ID, DISTRIBUTED (none|auto|explicit),
# TASKS (generate,train), CPU_DEVICES (fake CPU devices for dry runs).
set -euo pipefail
cd "$(dirname "$0")/.."

# Let XLA take most of the GPU memory up front (the default is 75%), and overlap collectives.
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}"
export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_enable_latency_hiding_scheduler=true"

distributed="${DISTRIBUTED:-none}"
args=()
if [[ -n "${COORDINATOR:-}" ]]; then
  distributed=explicit
  args+=(--coordinator_address="$COORDINATOR" --num_processes="${NUM_PROCESSES:?}" \
         --process_id="${PROCESS_ID:?}")
fi

exec python scripts/run_sharded.py \
  --distributed="$distributed" \
  --tasks="${TASKS:-generate,train}" \
  --cpu_devices="${CPU_DEVICES:-0}" \
  "${args[@]}" \
  "$@"
