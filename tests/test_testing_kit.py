"""The lossless test kit `specjax.testing`: its p-values, and its calibration.

`test_calibration` runs `testing.calibrate` at reduced cost (γ = 3, 2^16 streams per case, 10
cases: the 9 default kinds and ragged num_drafted): `check_acceptance_rule` on
`speculative_accept` and `block_accept` must pass and on each bundled biased rule
(`specjax.testing.biased`) must fail. The library rules' 2 x 50 checks at p < 1e-6 fail with
probability <= 1e-4 (Bonferroni); the biased rules fail at p <= 1e-13 (the weakest,
residual_without_b, fails the prefix and position cases at 1e-13 and 1e-47 with these fixed
seeds; the others at p < 1e-80). Seeds are fixed: a run is deterministic. The full-size table
(γ = 1, 4, 2^20 streams) is in the README.
"""

from __future__ import annotations

import ast
import functools
import os

import numpy as np
import pytest
from scipy import stats

from specjax import testing

pytestmark = pytest.mark.runtime_bound  # sampling dominates: tests/conftest.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("dof", [1, 2, 3, 4, 15, 124, 624, 3124])
def test_chi2_sf_matches_scipy(dof):
    for x in np.concatenate([np.linspace(0.0, 4.0 * dof, 41), [dof + 7.0 * np.sqrt(2.0 * dof)]]):
        ours, ref = testing.chi2_sf(x, dof), stats.chi2.sf(x, dof)
        assert abs(ours - ref) <= 1e-10 * ref + 1e-300, (x, dof, ours, ref)


def test_pooled_chi2_pools_sparse_bins_and_fails_impossible_tokens():
    probs = np.array([0.5, 0.49, 0.004, 0.003, 0.003, 0.0])
    counts = np.array([510, 480, 4, 3, 3, 0])
    result = testing.pooled_chi2(counts, probs)
    assert result.bins == 3 and result.dof == 2  # 4 + 3 + 3 expected: one pooled bin of 10
    expected = 1000 * np.array([0.5, 0.49, 0.01])
    assert np.isclose(result.statistic, np.sum(([510, 480, 10] - expected) ** 2 / expected))
    assert result.pvalue == pytest.approx(stats.chi2.sf(result.statistic, 2), rel=1e-12)
    bad = testing.pooled_chi2(counts + np.array([0, 0, 0, 0, 0, 1]), probs)
    assert bad.impossible == 1 and bad.pvalue == 0.0


def test_the_kit_needs_no_scipy():
    folder = os.path.join(ROOT, "specjax", "testing")
    for name in os.listdir(folder):
        if name.endswith(".py"):
            tree = ast.parse(open(os.path.join(folder, name)).read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    names = [a.name for a in node.names] + [getattr(node, "module", "") or ""]
                    assert not any(n.split(".")[0] == "scipy" for n in names), name


@functools.cache
def _calibration() -> testing.Calibration:
    return testing.calibrate(gammas=(3,), draws=1 << 16, verbose=False)


@pytest.mark.slow
def test_calibration():
    calibration = _calibration()
    print(calibration)
    verdicts = {name: report.passed for name, _, report in calibration.rows}
    assert verdicts == {
        "speculative_accept": True,
        "block_accept": True,
        "no_residual": False,
        "scaled_ratio": False,
        "h_is_b": False,
        "residual_without_b": False,
        "contiguous_prefix": False,
    }
    assert calibration.ok
    for name, must_pass, report in calibration.rows:
        assert len(report.cases) == 10 and report.num_checks == 50, name
        if not must_pass:
            assert report.min_pvalue < 1e-12, (name, report.min_pvalue)
    # The table and the per-case report say what they found.
    assert "WRONG" not in str(calibration)
    text = str(calibration.rows[1][2])
    assert "block_accept" in text and "ragged_g3" in text and "5.0e-05" in text
    assert "NOT LOSSLESS" in str(calibration.rows[2][2])


@pytest.mark.slow
def test_biased_traps_are_exact_at_gamma_one():
    # At γ = 1 the block traps coincide with token-wise verification (h_1 = b_1, b_0 = 1, and
    # no second position): the kit passes them, so γ >= 2 is what exposes them. 2 cases x 4
    # checks at 1e-6 per trap (false failure <= 2.4e-5 for the three).
    for name in ("h_is_b", "residual_without_b", "contiguous_prefix"):
        report = testing.check_acceptance_rule(
            testing.biased.biased_accept,
            gammas=(1,),
            draws=1 << 16,
            kinds=("prefix", "sparse"),
            params=(np.int32(testing.biased.BIASED[name]),),
            name=name,
        )
        assert report.passed, str(report)


def test_settings_under_which_nothing_can_fail_are_refused():
    """threshold <= 0 made every check pass, and no case at all gave a report of no checks that
    said "passed": a biased rule was reported lossless either way."""
    from specjax.decoding import speculative_accept
    from specjax.testing.kit import Report

    for kwargs, match in (
        (dict(threshold=0.0), r"threshold must be a p-value in \(0, 1\)"),
        (dict(threshold=-1), r"threshold must be a p-value in \(0, 1\)"),
        (dict(threshold=1.5), r"threshold must be a p-value in \(0, 1\)"),
        (dict(gammas=()), "gammas and kinds must each name at least one"),
        (dict(kinds=()), "gammas and kinds must each name at least one"),
        (dict(draws=0), "draws must be an integer >= 1"),
        (dict(vocab=1), "vocab must be an integer >= 2"),
        (dict(gammas=(0,)), r"gammas\[...\] must be an integer >= 1"),
    ):
        with pytest.raises(ValueError, match=match):
            testing.check_acceptance_rule(speculative_accept, **kwargs)
    assert not Report("empty", 1, 1e-6, (), 0.0).passed
    from specjax.decoding import AutoregressiveDecoder, make_warper

    target, params = testing.tiny_llama(5, 0)
    decoder = AutoregressiveDecoder(target, make_warper(1.0), cache_len=16)
    with pytest.raises(ValueError, match=r"threshold must be a p-value in \(0, 1\)"):
        testing.check_decoder(decoder, params, threshold=-1)
    with pytest.raises(ValueError, match="prompts must hold at least one prompt"):
        testing.check_decoder(decoder, params, prompts=())
