"""Randomized losslessness audit of every decoder kind (`specjax.testing.audit`).

    PYTHONPATH=. python scripts/audit_decoders.py --runs=40 --seed=0 --out=/tmp/audit.jsonl
    PYTHONPATH=. python scripts/audit_decoders.py --families=eagle,medusa --runs=12
    PYTHONPATH=. python scripts/audit_decoders.py --replay="$(sed -n 3p /tmp/audit.jsonl)"

Draws `runs` decoder configurations (round-robin over the families) and checks each with
`testing.check_decoder` (exact target law by enumeration, pooled chi-square, p < 1e-6 fails;
greedy equality with autoregressive decoding). Prints one row per run and the audit's
false-failure bound; `--out` writes one JSON line per run (its spec, min p-value, verdict), and
`--replay` checks one such line's configuration again. Exits 1 if any run fails. About 5-20 s a
run at 2^16 rows on a 2-core CPU (the EAGLE and Medusa runs are the slow ones, beam 1-5 s):
80 runs of seed 2026 took 12.2 min (README, "Testing losslessness" kit section).
"""

import json
import os
import sys

# Four XLA:CPU devices, so the `sharded` family splits rows over 1, 2 or 4 of them (before jax
# starts; a device count you set yourself is kept).
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()

from absl import app, flags  # noqa: E402

import specjax  # noqa: E402

specjax.configure_cpu()

from specjax.benchmark.script_checks import prepare_output  # noqa: E402
from specjax.testing import audit  # noqa: E402

_RUNS = flags.DEFINE_integer("runs", 40, "Configurations drawn.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the configurations and of the checks.")
_DRAWS = flags.DEFINE_integer("draws", 1 << 16, "Rows per prompt.")
_FAMILIES = flags.DEFINE_list("families", None, f"Subset of {sorted(audit.FAMILIES)}.")
_OUT = flags.DEFINE_string("out", None, "Write one JSON line per run here.")
_REPLAY = flags.DEFINE_string("replay", None, "A JSON line of --out (or a Spec): check it alone.")


def main(argv):
    del argv
    if _OUT.value:
        prepare_output(_OUT.value, "--out")  # before the runs, not after them
    if _REPLAY.value:
        line = json.loads(_REPLAY.value)
        spec = audit.Spec(line["family"], line["knobs"])
        result = audit.replay(spec, draws=_DRAWS.value, seed=line.get("seed", _SEED.value))
    else:
        print(audit.HEADER, flush=True)
        result = audit.run(
            _RUNS.value, seed=_SEED.value, draws=_DRAWS.value, families=_FAMILIES.value,
            log=lambda row: print(row, flush=True),
        )  # fmt: skip
    print(result)
    if _OUT.value:
        with open(_OUT.value, "w") as f:
            for run in result.runs:
                f.write(json.dumps(run.to_record(), sort_keys=True) + "\n")
    sys.exit(0 if result.passed else 1)


if __name__ == "__main__":
    app.run(main)
