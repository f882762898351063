"""The one round-robin harness (`timing.interleaved`) and decoder-vs-AR (`versus`), on a fake clock.

Hand-made costs only: each fake call advances a fake clock by a known number of seconds, so the
medians, the speedup and its interval are exact numbers (speed itself is never asserted).
"""

import types

import numpy as np
import pytest

from specjax.benchmark.timing import interleaved, ratio_interval
from specjax.benchmark.versus import emitted_tokens, versus_autoregressive


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _output(tokens_per_row):
    """A stand-in GenerationResult: prompts of 3 tokens, then `tokens_per_row` new tokens."""
    lengths = np.asarray(tokens_per_row) + 3
    return types.SimpleNamespace(lengths=lengths, prompt_lengths=np.full(len(lengths), 3))


def _call(clock, costs, output):
    """A call whose i-th invocation takes costs[i] seconds (warm-up included) on `clock`."""
    it = iter(costs)

    def fn():
        clock.now += next(it)
        return output

    return fn


def test_interleaved_keeps_every_round_the_cpu_time_and_the_last_output():
    clock = FakeClock()
    outs = iter(range(10))
    calls = {"a": lambda: next(outs), "b": lambda: "b"}
    timed = interleaved(calls, repeats=3, warmup=1, clock=clock)
    assert [len(t.samples) for t in timed.values()] == [3, 3]
    assert all(len(t.cpu_samples) == 3 and t.cpu_median >= 0 for t in timed.values())
    # a ran at 0 (warm-up), 1, 2, 3: its last output is 3's.
    assert timed["a"].output == 3 and timed["b"].output == "b"


def test_interleaved_rotates_the_round_order_when_asked():
    order = []
    calls = {n: (lambda n=n: order.append(n)) for n in "abc"}
    interleaved(calls, repeats=4, warmup=1)
    assert "".join(order) == "abc" * 5  # the warm-up, then four rounds in the same order
    order.clear()
    timed = interleaved(calls, repeats=4, warmup=1, rotate=True)
    # Warm-up in order; round r starts at call r mod 3: abc, bca, cab, abc.
    assert "".join(order) == "abc" + "abc" + "bca" + "cab" + "abc"
    assert [len(t.samples) for t in timed.values()] == [4, 4, 4]


def test_versus_counts_tokens_and_divides_by_them():
    clock = FakeClock()
    ar_costs = [9.0, 2.0, 2.2, 2.0]  # warm-up, then 3 rounds
    spec_costs = [9.0, 1.0, 1.0, 1.1]
    calls = {
        "ar": _call(clock, ar_costs, [_output([4, 4])]),  # 8 tokens a call
        "spec": _call(clock, spec_costs, _output([4, 2])),  # 6 tokens (an EOS row)
    }
    v = versus_autoregressive(calls, repeats=3, clock=clock)
    assert v.tokens == {"ar": 8, "spec": 6}
    assert v.ms_per_token("ar") == pytest.approx(2.0e3 / 8)
    assert v.ms_per_token("spec") == pytest.approx(1.0e3 / 6)
    assert v.speedup("spec") == pytest.approx((2.0 / 8) / (1.0 / 6))
    # The interval is the paired rounds' ratio interval, per token.
    low, high = ratio_interval(ar_costs[1:], spec_costs[1:])
    got = v.interval("spec")
    assert got == pytest.approx((low * 6 / 8, high * 6 / 8))
    assert got[0] < v.speedup("spec") < got[1]
    assert v.ms_per_token("spec", cpu=True) >= 0  # CPU time recorded in the same rounds


def test_versus_times_extra_calls_without_counting_them():
    clock = FakeClock()
    calls = {
        "ar": _call(clock, [1.0] * 3, _output([2])),
        "spec": _call(clock, [0.5] * 3, _output([2])),
    }
    extra = {"fixed": _call(clock, [0.1] * 3, None)}
    v = versus_autoregressive(calls, repeats=2, clock=clock, extra=extra)
    assert set(v.timings) == {"ar", "spec", "fixed"} and set(v.tokens) == {"ar", "spec"}
    assert v.timings["fixed"].median == pytest.approx(0.1)
    assert v.speedup("spec") == pytest.approx(2.0)
    assert v.interval("spec") == pytest.approx((2.0, 2.0))  # no spread: a point


def test_versus_rejects_a_missing_baseline_and_no_rounds():
    with pytest.raises(ValueError, match="baseline 'ar'"):
        versus_autoregressive({"spec": lambda: None})
    with pytest.raises(ValueError, match="repeats"):
        versus_autoregressive({"ar": lambda: None}, repeats=0)


def test_emitted_tokens_sums_lists_of_results():
    assert emitted_tokens(_output([1, 2])) == 3
    assert emitted_tokens([_output([1]), _output([5, 0])]) == 6
