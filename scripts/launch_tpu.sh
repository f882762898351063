#!/usr/bin/env bash
# Sharded speculative generation and training on a Cloud TPU VM or a TPU pod slice.
#
# Install once on every TPU VM worker (libtpu comes with the jax[tpu] extra):
#   git clone <this repo> specjax && cd specjax
#   pip install -e . "jax[tpu]==0.10.2"
#
# Single-host TPU VM (v4-8, v5litepod-8, v6e-8, ...): one process sees every local chip.
#   bash scripts/launch_tpu.sh --config=configs/scale.py:target=llama_1b,model=4
#
# Pod slice (several hosts): run the SAME command on every worker at once. JAX's own runtime
# finds the other workers from the TPU metadata (jax.distributed.initialize() with no
# arguments), so no addresses are needed:
#   gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" --worker=all \
#     --command="cd specjax && DISTRIBUTED=auto bash scripts/launch_tpu.sh \
#                --config=configs/scale.py:target=llama_1b,model=4"
#
# Mesh: `model` should stay within one host (its per-layer all-reduces need the fast ICI links);
# `data` (-1: all remaining chips) may span hosts. The batch (config.batch_size) must be a
# multiple of the data axis. Before renting a slice, check that a configuration compiles and fits:
#   python scripts/aot_compile_check.py --config=configs/scale.py:target=llama_1b,model=4 \
#     --topology=v5e:4x4
#
# Environment knobs:
#   DISTRIBUTED  none (default on one host) | auto (pod slices)
#   TASKS        generate,train (default) | generate | train
set -euo pipefail
cd "$(dirname "$0")/.."

# libtpu's own tuning flags go in LIBTPU_INIT_ARGS (passed through; none are set here: the
# defaults are what the AOT check compiles with, so its memory figures stay comparable).
exec python scripts/run_sharded.py \
  --distributed="${DISTRIBUTED:-none}" \
  --tasks="${TASKS:-generate,train}" \
  "$@"
