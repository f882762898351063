"""Throughput at batch: AR vs speculative tokens/s on the mini Python pair (issue 20, section 4).

    PYTHONPATH=. python scripts/bench_batch.py                  # t = 1, γ = 4, batch 1/4/16/64
    PYTHONPATH=. python scripts/bench_batch.py --target=zoo_random --draft=bigram

Ragged prompts (16..48 tokens) from the Python validation split, sampling at --temperature, so
rows accept different numbers of drafts. Prints `specjax.benchmark.batch.format_batch_rows`
and where speculation stops paying; --markdown appends the table to a file.
"""

import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import profile_iteration as flags_  # noqa: E402  (its flags, load_pair and clock)

_DRAFT = flags.DEFINE_enum("draft", "mini_draft distilled", ["mini_draft distilled", "bigram"], "")
_TEMPERATURE = flags.DEFINE_float("temperature", 1.0, "Sampling temperature.")
_BATCHES = flags.DEFINE_string("batches", "1,4,16,64", "Batch sizes.")
_NEW = flags.DEFINE_integer("max_new_tokens", 64, "Tokens per row.")
_OUT = flags.DEFINE_string("out", None, "Append the table to this markdown file.")


def ragged_prompts(count: int):
    """`count` prompts of 16..48 tokens from the Python validation split."""
    import numpy as np

    from specjax.data import load_corpus
    from specjax.data.batches import sample_prompts

    lengths = [16 + (7 * i) % 33 for i in range(count)]
    val = np.asarray(load_corpus("python", "validation"))
    full = sample_prompts(val, count, max(lengths), seed=3).tokens
    return [np.asarray(p)[:n] for p, n in zip(full, lengths, strict=True)]


def main(argv):
    del argv
    from specjax.benchmark.batch import batch_table, break_even, format_batch_rows
    from specjax.benchmark.script_checks import prepare_output
    from specjax.decoding import make_warper

    if _OUT.value:
        prepare_output(_OUT.value, "--out")  # before the measuring, not after it
    target, tparams, drafts, what = flags_.load_pair()
    draft, dparams = drafts[_DRAFT.value]
    batches = [int(b) for b in _BATCHES.value.split(",")]
    gamma = flags_._GAMMA.value
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    head = (
        f"{what}, draft {_DRAFT.value}, t = {_TEMPERATURE.value:g}, γ = {gamma}, "
        f"{_NEW.value} new tokens per row, ragged prompts 16..48, cache {flags_._CACHE_LEN.value}, "
        f"medians of {flags_._REPEATS.value} round-robin rounds, {flags_._CLOCK.value} clock, "
        f"load average {load} at start"
    )
    print(head, flush=True)
    rows = batch_table(
        target,
        tparams,
        draft,
        dparams,
        ragged_prompts(max(batches)),
        make_warper(_TEMPERATURE.value),
        gamma,
        batches=batches,
        max_new_tokens=_NEW.value,
        cache_len=flags_._CACHE_LEN.value,
        repeats=flags_._REPEATS.value,
        clock=flags_.clock(),
    )
    where = break_even(rows)
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    verdict = (
        "speculation paid at every batch size measured"
        if where is None
        else f"speculation stops paying at batch {where}"
    )
    text = "\n".join([head, "", format_batch_rows(rows, gamma), "", f"{verdict}; load {load}"])
    print(text)
    if _OUT.value:
        with open(_OUT.value, "a", encoding="utf-8") as f:
            f.write(text + "\n\n")


if __name__ == "__main__":
    app.run(main)
