"""experiments/lossy/run.py's exact parts: the first-token TV in closed form on a bigram pair,
and the tiny-pair enumeration (the timed parts are measured by the script, not tested)."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.lossy import run
from specjax import testing
from specjax.decoding import make_warper
from specjax.decoding.rules import lossy


def test_first_token_laws_are_the_models_next_token_rows():
    target, tp, draft, dp = testing.tiny_bigram_pair(5, seed=1)
    prefixes = np.array([[0, 3], [4, 1], [2, 2]], np.int32)
    p1 = run.first_token_laws(target, tp, prefixes, make_warper(1.0))
    table = np.exp(np.asarray(tp["log_probs"], np.float64))
    np.testing.assert_allclose(
        p1, table[[3, 1, 2]] / table[[3, 1, 2]].sum(-1, keepdims=True), atol=1e-6
    )


def test_first_token_tv_is_zero_for_lossless_rules_and_grows_with_leniency():
    target, tp, draft, dp = testing.tiny_bigram_pair(5, seed=1)
    prefixes = np.arange(5, dtype=np.int32)[:, None]
    warper = make_warper(1.0)
    p1 = run.first_token_laws(target, tp, prefixes, warper)
    q1 = run.first_token_laws(draft, dp, prefixes, warper)
    assert run.first_token_tv(p1, q1, "tokenwise") == 0.0 == run.first_token_tv(p1, q1, "block")
    tvs = [run.first_token_tv(p1, q1, f"lenient:{v}") for v in (0.9, 0.7, 0.5, 0.3)]
    assert 0 < tvs[0] < tvs[1] < tvs[2] < tvs[3], tvs
    expected = np.mean(lossy.total_variation(lossy.typical_first_token_law(p1, q1, 0.09, 0.3), p1))
    assert run.first_token_tv(p1, q1, "typical:0.09,0.3") == pytest.approx(expected)


def test_tiny_pair_tv_enumerates_the_shift():
    assert run.tiny_pair_tv("tokenwise")[1] < 1e-12  # lenient:1 enumerated: exact
    first, joint = run.tiny_pair_tv("lenient:0.5")
    assert 1e-3 < first <= joint  # the joint of 3 tokens moves at least as far as the first
