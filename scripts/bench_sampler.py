"""Categorical sampling and argmax, ms per call by vocabulary: the old way vs ours, one run.

    PYTHONPATH=. python scripts/bench_sampler.py
    PYTHONPATH=. python scripts/bench_sampler.py --vocabs=259,32000 --batch=5 --clock=wall

Prints `jax.random.categorical` (one Gumbel per vocabulary entry) against the two-level
`sample_from_probs`, and `jnp.argmax` against `first_argmax`, with their ratios
(`specjax.benchmark.sampler.sampler_table`).
"""

import time

from absl import app, flags

import specjax

_VOCABS = flags.DEFINE_list("vocabs", ["259", "4096", "32000", "128256"], "Vocabulary sizes.")
_BATCH = flags.DEFINE_integer("batch", 1, "Rows per call.", lower_bound=1)
_REPEATS = flags.DEFINE_integer("repeats", 7, "Timed rounds (medians).", lower_bound=1)
_CLOCK = flags.DEFINE_enum("clock", "cpu", ["cpu", "wall"], "Process CPU time or wall time.")


def main(argv):
    del argv
    specjax.configure_cpu()
    from specjax.benchmark.sampler import sampler_table

    clock = time.process_time if _CLOCK.value == "cpu" else time.perf_counter
    rows = sampler_table(
        [int(v) for v in _VOCABS.value], batch=_BATCH.value, repeats=_REPEATS.value, clock=clock
    )
    load = open("/proc/loadavg").read().split()[:3]
    print(f"batch {_BATCH.value}, {_CLOCK.value} clock, load average {' '.join(load)}; ms per call")
    print("| vocab | block | categorical | two-level | ratio | jnp.argmax | first_argmax | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['vocab']} | {r['block']} | {r['categorical']:.4f} | {r['two_level']:.4f} | "
            f"{r['categorical'] / r['two_level']:.1f}× | {r['argmax']:.4f} | "
            f"{r['first_argmax']:.4f} | {r['argmax'] / r['first_argmax']:.1f}× |"
        )


if __name__ == "__main__":
    app.run(main)
