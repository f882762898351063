"""Judging a measured speedup against a prediction by its interval (issue 20, section 5).

`specjax.benchmark.timing` holds the interval and the verdict; the leviathan2023 report uses them.

Hand-made numbers only: the interval of paired rounds, recomputed from stored samples, and the
verdict (within 10 %, or the prediction inside the interval).
"""

import math

import pytest

from experiments.leviathan2023 import report
from specjax.benchmark.timing import judge_speedup, speedup_interval


def test_a_prediction_inside_the_interval_agrees_even_when_far_from_the_median():
    v = judge_speedup(1.5, 1.1, 2.0, 1.2)  # 25 % off, but 1.2 in [1.1, 2.0]
    assert v["inside"] and v["ok"] and not v["within_tol"]
    assert v["rel_err"] == pytest.approx(0.25)
    assert not v["below_noise"]


def test_a_narrow_interval_away_from_the_prediction_disagrees():
    v = judge_speedup(1.5, 1.45, 1.55, 1.2)
    assert not (v["inside"] or v["within_tol"] or v["ok"])


def test_within_ten_percent_agrees_without_an_interval():
    assert judge_speedup(1.05, None, None, 1.0)["ok"]
    assert not judge_speedup(1.15, None, None, 1.0)["ok"]
    assert not judge_speedup(1.0, 0.5, 2.0, None)["ok"]  # nothing to judge against


def test_an_interval_containing_one_is_below_the_noise():
    assert judge_speedup(1.1, 0.9, 1.3, 1.1)["below_noise"]
    assert not judge_speedup(1.4, 1.2, 1.6, 1.1)["below_noise"]


def test_the_interval_is_recomputed_from_stored_paired_rounds():
    # Pair ratios 2.0, 2.0 * 1.1, 2.0 / 1.1: log-ratios log 2 + (0, +l, -l), l = log 1.1.
    row = {
        "ar_samples": [2.0, 2.2, 2.0],
        "spec_samples": [1.0, 1.0, 1.1],
        "speedup_low": 0.1,  # a stale recorded interval is ignored in favour of the samples
        "speedup_high": 9.0,
    }
    low, high = speedup_interval(row)
    half = 4.303 * math.log(1.1) / math.sqrt(3)  # t(0.975, 2 dof) · sd / √n, sd = log 1.1
    assert low == pytest.approx(2.0 * math.exp(-half), rel=1e-3)
    assert high == pytest.approx(2.0 * math.exp(half), rel=1e-3)
    # Without samples (older results.json) the recorded interval is used.
    assert speedup_interval({"speedup_low": 1.0, "speedup_high": 1.2}) == (1.0, 1.2)
    assert speedup_interval({}) == (None, None)


def test_table2_judges_rows_from_their_stored_samples():
    """A row whose samples give a wide interval around the loop model agrees; the same speedup
    with tight samples does not."""

    def results(ar, spec):
        row = dict(
            gamma=2,
            ar_ms_per_token=1.0,
            spec_ms_per_token=1 / 1.5,
            speedup=1.5,
            ar_samples=ar,
            spec_samples=spec,
            predicted_speedup_paper=None,
            predicted_speedup_measured=None,
            predicted_speedup_loop=1.2,
            alpha_empirical=0.5,
            tokens_per_iteration=1.75,
            predicted_tokens_per_iteration=1.75,
        )
        return {
            "config": {},
            "alpha": {},
            "costs": {"t_target": {"3": 1e-4}, "t_draft": {"bigram": 0.0}},
            "walltime": {"t1/bigram": [row]},
        }

    wide = report.table2_rows(results([1.0, 1.9, 1.5], [1.0, 1.0, 1.0]))[0]
    assert wide["speedup_in_interval"] and wide["speedup_ok"]
    tight = report.table2_rows(results([1.5, 1.51, 1.49], [1.0, 1.0, 1.0]))[0]
    assert not tight["speedup_ok"] and tight["speedup_low"] > 1.2
