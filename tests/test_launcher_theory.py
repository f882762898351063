"""Tests for the theory launcher mode, its config and the plotting helpers."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from configs import theory as theory_config
from experiments import theory as theory_mode
from specjax import plotting, theory

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path) -> bool:
    with open(path, "rb") as f:
        return f.read(8) == _PNG_MAGIC and os.path.getsize(path) > 1000


def test_run_in_process_writes_consistent_json_and_png(tmp_path, capsys):
    config = theory_config.get_config()
    theory_mode.run(config, str(tmp_path))
    printed = capsys.readouterr().out
    assert "Walltime speedup, paper formula" in printed and "Measured-cost model" in printed

    with open(tmp_path / "theory.json", encoding="utf-8") as f:
        result = json.load(f)
    alphas = np.array([0.6, 0.7, 0.8, 0.9])
    gammas = np.arange(1, 11)
    np.testing.assert_array_equal(result["alphas"], alphas)
    np.testing.assert_array_equal(result["gammas"], gammas)
    np.testing.assert_allclose(
        result["tokens_per_iteration"],
        theory.expected_tokens_per_iteration(alphas[:, None], gammas[None, :]),
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        result["formula"]["speedup"],
        theory.walltime_improvement(alphas[:, None], gammas[None, :], 0.05),
        rtol=1e-12,
    )
    np.testing.assert_array_equal(
        result["formula"]["optimal_gamma"], theory.optimal_gamma(alphas, 0.05, gamma_max=10)
    )
    # Hand-checked values at c = 0.05: alpha = .8 peaks at gamma = 8 (3.092x); alpha = .9 is
    # still rising at gamma_max = 10 and peaks at 13 unrestricted.
    assert result["formula"]["optimal_gamma"] == [4, 6, 8, 10]
    assert result["formula"]["optimal_gamma_unrestricted"] == [4, 6, 8, 13]
    np.testing.assert_allclose(result["formula"]["oracle_bound"], 1 / (1 - alphas))

    measured = result["measured"]
    curve = theory.cost_curve({1: 8.5, 2: 15.5, 5: 24.6, 9: 29.1})
    np.testing.assert_allclose(measured["t_target_ms"], curve, atol=1e-4)  # config rounds to 1e-4
    np.testing.assert_array_equal(measured["gammas"], np.arange(1, 9))  # T(9) caps gamma at 8
    np.testing.assert_allclose(
        measured["speedup"],
        theory.measured_speedup(alphas[:, None], np.arange(1, 9)[None, :], curve, 0.22),
        rtol=1e-4,
    )
    np.testing.assert_array_equal(
        measured["optimal_gamma"], theory.measured_optimal_gamma(alphas, curve, 0.22)
    )
    assert measured["c_effective"] == pytest.approx(0.22 / 8.5)
    assert _is_png(tmp_path / "theory_speedup.png")


def test_run_formula_only_has_no_measured_section(tmp_path):
    config = theory_config.get_config("formula_only,alphas=0.5/1.0,c=0.1,gamma_max=4")
    result = theory_mode.run(config, str(tmp_path))
    assert result["measured"] is None
    assert result["alphas"] == [0.5, 1.0] and result["gammas"] == [1, 2, 3, 4]
    # alpha = 1: every draft accepted, speedup (gamma + 1) / (c gamma + 1); bound is infinite.
    assert result["formula"]["speedup"][1] == pytest.approx([2 / 1.1, 3 / 1.2, 4 / 1.3, 5 / 1.4])
    with open(tmp_path / "theory.json", encoding="utf-8") as f:
        assert json.load(f)["formula"]["oracle_bound"] == [2.0, None]  # strict JSON, no Infinity


def test_config_string_options():
    config = theory_config.get_config("alpha=0.8,c=0.1,t_draft=1.3,gamma_max=6")
    assert config.mode == "theory"
    assert config.alphas == [0.8] and config.c == 0.1 and config.gamma_max == 6
    assert config.t_draft == 1.3
    assert config.t_target[0] == 8.5 and config.t_target[4] == 24.6 and len(config.t_target) == 9
    default = theory_config.get_config()
    assert default.alphas == [0.6, 0.7, 0.8, 0.9] and default.c == 0.05
    for bad in ("alpha=0.8,alphas=0.5/0.6", "speed=3", "tiny"):
        with pytest.raises(ValueError):
            theory_config.get_config(bad)


def test_bad_config_values_raise(tmp_path):
    config = theory_config.get_config()
    config.alphas = [0.5, 1.5]
    with pytest.raises(ValueError, match="alpha"):
        theory_mode.run(config, str(tmp_path))
    config = theory_config.get_config()
    config.gamma_max = 0
    with pytest.raises(ValueError, match="gamma_max"):
        theory_mode.run(config, str(tmp_path))


def test_launcher_subprocess(tmp_path):
    workdir = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.main",
            "--config=configs/theory.py:alpha=0.8",
            f"--workdir={workdir}",
        ],
        cwd=_REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Measured-cost model" in proc.stdout
    with open(workdir / "theory.json", encoding="utf-8") as f:
        result = json.load(f)
    assert result["alphas"] == [0.8]
    assert result["formula"]["optimal_gamma"] == [8]
    assert _is_png(workdir / "theory_speedup.png")


def test_plotting_helpers_write_pngs_and_validate(tmp_path):
    line = plotting.save_line_plot(
        str(tmp_path / "sub" / "line.png"),
        [plotting.Series([1, 2, 3], [1.0, 2.0, 1.5], label="a", highlight_x=2)],
        xlabel="x",
        ylabel="y",
        hline=1.0,
        style_legend=[("--", "dashed")],
    )
    bars = plotting.save_bar_plot(
        str(tmp_path / "bars.png"), ["a", "b"], [0.5, 0.7], ylabel="alpha", errors=[0.01, 0.02]
    )
    assert _is_png(line) and _is_png(bars)
    with pytest.raises(ValueError, match="highlight_x"):
        plotting.save_line_plot(
            str(tmp_path / "x.png"),
            [plotting.Series([1, 2], [1, 2], highlight_x=5)],
            xlabel="",
            ylabel="",
        )
    with pytest.raises(ValueError, match="one length"):
        plotting.save_bar_plot(str(tmp_path / "y.png"), ["a"], [1.0, 2.0], ylabel="")
