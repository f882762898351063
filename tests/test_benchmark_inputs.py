"""Benchmark harness and scripts refuse bad input by name, before any work.

Each case here used to give a silent wrong answer or a late, nameless error: a negative `steps`
gave negative times, `batch=0` a time for no work, `repeats=0` nan medians (and nan tables),
a zero or nan time a nan interval or a passing verdict, and a bad output path threw away every
measurement at the end of a script. The checks fire before anything compiles.
"""

import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from experiments.real import speed
from specjax.benchmark import costs, overhead, sampler
from specjax.benchmark.script_checks import gguf_model, prepare_output
from specjax.benchmark.timing import (
    Timing,
    coefficient_of_variation,
    interleaved,
    judge_speedup,
    mean_interval,
    ratio_interval,
    speedup_interval,
    time_call,
)
from specjax.decoding import AutoregressiveDecoder, SpeculativeDecoder, TokenTree, make_warper
from specjax.testing import tiny_llama

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHAPE = dict(context=4, cache_len=32)

# Script cases that repeat another's check with another JAX start-up: run with --long.
LONG = pytest.mark.long


@pytest.fixture(scope="module")
def model():
    return tiny_llama(16, 0)


# --- S4: counts of the cost measurements --------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(steps=-4), "steps must be an integer >= 1; got -4"),
        (dict(steps=0), "steps must be an integer >= 1; got 0"),
        (dict(batch=0), "batch must be an integer >= 1; got 0"),
        (dict(context=-3), "context must be an integer >= 0; got -3"),
        (dict(repeats=0), "repeats must be an integer >= 1; got 0"),
    ],
)
def test_call_cost_refuses_bad_counts(model, kwargs, match):
    m, p = model
    with pytest.raises(ValueError, match=match):
        costs.call_cost(m, p, 2, **{**SHAPE, "repeats": 2, **kwargs})


def test_call_runner_refuses_bad_k_and_float_steps(model):
    m, p = model
    with pytest.raises(ValueError, match="k must be an integer >= 1; got 0"):
        costs.call_runner(m, p, 0, **SHAPE)
    with pytest.raises(TypeError, match="steps must be an integer; got 2.5"):
        costs.call_runner(m, p, 2, steps=2.5, **SHAPE)
    with pytest.raises(ValueError, match="batch must be an integer >= 1; got 0"):
        costs.prefilled_state(m, p, 0, 4, 32)


def test_tree_call_cost_refuses_bad_counts(model):
    m, p = model
    tree = TokenTree.from_branching((2,))
    with pytest.raises(ValueError, match="steps must be an integer >= 1; got 0"):
        costs.tree_call_cost(m, p, tree, steps=0, **SHAPE)
    with pytest.raises(ValueError, match="batch must be an integer >= 1; got 0"):
        costs.tree_call_cost(m, p, tree, batch=0, **SHAPE)
    with pytest.raises(ValueError, match="context must be an integer >= 1; got -1"):
        costs.tree_call_cost(m, p, tree, context=-1, cache_len=32)


@pytest.mark.parametrize("max_k", [0, -2])
def test_cost_curve_refuses_an_empty_range(model, max_k):
    m, p = model
    with pytest.raises(ValueError, match=f"max_k must be an integer >= 1; got {max_k}"):
        costs.cost_curve(m, p, max_k, **SHAPE)


def test_iteration_cost_refuses_bad_counts(model):
    m, p = model
    ar = AutoregressiveDecoder(m, make_warper(0.0), cache_len=32)
    with pytest.raises(ValueError, match="steps must be an integer >= 1; got 0"):
        costs.iteration_cost(ar, (p,), [[1, 2, 3]], steps=0)
    with pytest.raises(ValueError, match="steps must be an integer >= 1; got -1"):
        costs.iteration_runner(ar, (p,), [[1, 2, 3]], steps=-1)
    with pytest.raises(ValueError, match="repeats must be an integer >= 1; got 0"):
        costs.iteration_cost(ar, (p,), [[1, 2, 3]], repeats=0)


def test_overhead_refuses_bad_counts(model):
    m, p = model
    decoder = SpeculativeDecoder(m, m, 2, make_warper(1.0), cache_len=32)
    for kwargs, match in [
        (dict(context=-1), "context must be an integer >= 0; got -1"),
        (dict(steps=0), "steps must be an integer >= 1; got 0"),
        (dict(repeats=0), "repeats must be an integer >= 1; got 0"),
    ]:
        with pytest.raises(ValueError, match=match):
            overhead.overhead_breakdown(decoder, (p, p), [[1, 2, 3]], **kwargs)
    with pytest.raises(ValueError, match="steps must be an integer >= 1; got 0"):
        overhead.piece_cost(lambda i: i, (), steps=0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(steps=-2), "steps must be an integer >= 1; got -2"),
        (dict(rounds=0), "rounds must be an integer >= 1; got 0"),
        (dict(context=-1), "context must be an integer >= 0; got -1"),
        (dict(ks=(1, 0)), "each of ks must be an integer >= 1; got 0"),
    ],
)
def test_speed_table_refuses_bad_counts(model, kwargs, match):
    m, p = model
    with pytest.raises(ValueError, match=match):
        speed.speed_table(m, p, **{"layouts": ("xla",), "ks": (1,), **SHAPE, **kwargs})


# --- S5: rounds of the round-robin harness ------------------------------------------------


@pytest.mark.parametrize("repeats", [0, -3])
def test_interleaved_refuses_no_rounds(repeats):
    ran = []
    with pytest.raises(ValueError, match=f"repeats must be an integer >= 1; got {repeats}"):
        interleaved({"a": lambda: ran.append(1)}, repeats=repeats)
    assert not ran  # refused before the warm-up
    with pytest.raises(ValueError, match="warmup must be an integer >= 0; got -1"):
        interleaved({"a": lambda: 0.0}, repeats=2, warmup=-1)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(repeats=0), ValueError, "repeats must be an integer >= 1; got 0"),
        (dict(repeats=True), TypeError, "repeats must be an integer; got True"),
        (dict(repeats=2.5), TypeError, "repeats must be an integer; got 2.5"),
        (dict(warmup=-1), ValueError, "warmup must be an integer >= 0; got -1"),
    ],
)
def test_time_call_names_bad_counts_before_calling(kwargs, error, match):
    ran = []
    with pytest.raises(error, match=match):
        time_call(lambda: ran.append(1), **kwargs)
    assert not ran


def test_spread_without_samples_is_nan():
    assert math.isnan(Timing(float("nan"), ()).spread)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(vocabs=(16,), draws=0), "draws must be an integer >= 1; got 0"),
        (dict(vocabs=(16,), batch=0), "batch must be an integer >= 1; got 0"),
        (dict(vocabs=(16, 0)), "each of vocabs must be an integer >= 1; got 0"),
        (dict(vocabs=(16,), repeats=0), "repeats must be an integer >= 1; got 0"),
    ],
)
def test_sampler_table_names_bad_counts(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sampler.sampler_table(**kwargs)


def _script(name, *args, cwd=None):
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / name), *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


@pytest.mark.parametrize(
    ("script", "flag"),
    [("bench_sampler.py", "--repeats=0"), ("bench_real.py", "--overhead_rounds=0")],
)
def test_script_rounds_flags_refuse_zero(script, flag):
    proc = _script(script, flag)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"flag {flag}" in proc.stderr and "nan" not in proc.stdout


# --- S6: samples and verdicts -------------------------------------------------------------


@pytest.mark.parametrize(
    ("num", "den", "match"),
    [
        ([1.0, 2.0], [0.0, 1.0], r"denominator: times must be finite and positive.*\[0.0\]"),
        ([1.0, -2.0], [1.0, 1.0], r"numerator: times must be finite and positive.*\[-2.0\]"),
        ([1.0, math.nan], [1.0, 1.0], "numerator"),
        ([math.inf], [1.0], "numerator"),
    ],
)
def test_ratio_interval_refuses_bad_times(num, den, match):
    with pytest.raises(ValueError, match=match):
        ratio_interval(num, den)


def test_speedup_interval_names_the_row_samples():
    with pytest.raises(ValueError, match=r"row\['spec_samples'\]: times must be finite"):
        speedup_interval({"ar_samples": [1, 2], "spec_samples": [0, 0]})


def test_mean_interval_and_cv_refuse_bad_samples():
    with pytest.raises(ValueError, match="samples: values must be finite"):
        mean_interval([1.0, math.nan])
    low, high = mean_interval([-1.0, -2.0, -1.5])  # an overhead's share may be negative
    assert low < -1.5 < high
    with pytest.raises(ValueError, match="samples: times must be finite and positive"):
        coefficient_of_variation([1.0, math.nan])
    with pytest.raises(ValueError, match="samples: times must be finite and positive"):
        coefficient_of_variation([-1.0, -2.0])


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((math.nan, 1.0, 1.4, 1.2), {}, "speedup must be a finite number > 0; got nan"),
        ((1.2, 1.4, 1.0, 1.2), {}, "low must be <= high; got low=1.4, high=1.0"),
        ((1.2, 1.0, 1.4, 0.0), {}, "predicted must be a finite number > 0; got 0.0"),
        ((1.2, math.nan, 1.4, 1.2), {}, "low must be a finite number > 0"),
        ((1.2, None, None, 1.2), dict(tol=-0.1), "tol must be a finite number >= 0"),
    ],
)
def test_judge_speedup_refuses_bad_input(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        judge_speedup(*args, **kwargs)


# --- U1: output paths are checked before the work -----------------------------------------


def test_prepare_output_makes_the_folder_and_refuses_wrong_kinds(tmp_path):
    path = tmp_path / "new" / "deeper" / "x.json"
    assert prepare_output(str(path), "--out") == str(path)
    assert path.parent.is_dir() and not path.exists()
    (tmp_path / "afile").write_text("")
    with pytest.raises(ValueError, match="--out=.* is a directory"):
        prepare_output(str(tmp_path), "--out")
    with pytest.raises(ValueError, match="--json_out=.*afile.* cannot be a directory"):
        prepare_output(str(tmp_path / "afile" / "x.json"), "--json_out")
    with pytest.raises(ValueError, match="--out=.*afile.* cannot be a directory"):
        prepare_output(str(tmp_path / "afile"), "--out", folder=True)
    assert prepare_output(str(tmp_path / "runs"), "--out", folder=True)
    assert (tmp_path / "runs").is_dir()
    with pytest.raises(ValueError, match="--out must be a non-empty path"):
        prepare_output("", "--out")


@pytest.mark.parametrize(
    ("script", "flag", "folder", "extra"),
    [
        ("audit_decoders.py", "--out", False, ["--runs=1", "--draws=512"]),
        ("bench_real.py", "--out", True, []),
        # The same helper wired into four more scripts: a JAX start-up (~1.5 s) each, so in CI
        # one file and one folder case stand for them; `--long` runs them all.
        pytest.param("tree_vs_chain.py", "--out", True, ["--acceptance=0.2,0.1"], marks=LONG),
        pytest.param("zoo_alpha.py", "--json_out", False, [], marks=LONG),
        pytest.param("profile_iteration.py", "--markdown", False, [], marks=LONG),
        pytest.param("bench_batch.py", "--out", False, [], marks=LONG),
    ],
)
def test_scripts_check_their_output_before_the_work(tmp_path, script, flag, folder, extra):
    blocker = tmp_path / "afile"  # a file where a folder must go
    blocker.write_text("")
    bad = blocker if folder else blocker / "out.json"
    proc = _script(script, f"{flag}={bad}", *extra, cwd=tmp_path)
    assert proc.returncode != 0
    assert f"ValueError: {flag}='{bad}'" in proc.stderr, proc.stderr[-3000:]
    assert proc.stdout == ""  # nothing was measured (audit_decoders prints its header first)


# --- U8: --model names the flag and the registered models ---------------------------------


def test_gguf_model_names_the_flag(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"--model='nope-model'.*smollm2-135m-instruct"):
        gguf_model("nope-model")
    with pytest.raises(ValueError, match=r"--model=.* is not a GGUF file"):
        gguf_model(str(tmp_path))


@pytest.mark.parametrize(
    ("script", "extra"),
    [
        ("bench_real.py", []),
        pytest.param("bench_greedy_tree.py", [], marks=LONG),  # the same helper (see above)
        pytest.param("tree_vs_chain.py", ["--acceptance=0.2,0.1"], marks=LONG),
    ],
)
def test_scripts_name_an_unknown_model(tmp_path, script, extra):
    proc = _script(script, "--model=nope-model", *extra, cwd=tmp_path)
    assert proc.returncode != 0
    assert "--model='nope-model' does not exist" in proc.stderr, proc.stderr[-3000:]
    assert "smollm2-135m-instruct" in proc.stderr.splitlines()[-1]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(gammas=[]), "gammas must hold at least one"),  # returned [] after timing AR
        (dict(gammas=[2, 0]), r"gammas\[1\] must be an integer >= 1; got 0"),
        (dict(prompts=[]), "prompts must hold at least one prompt"),  # was an IndexError
        (dict(batch_size=-1), "batch_size must be an integer >= 1; got -1"),
        (dict(repeats=0), "repeats must be an integer >= 1; got 0"),
    ],
)
def test_measure_walltime_refuses_before_timing(model, kwargs, match):
    from specjax.benchmark.walltime import measure_walltime

    m, p = model
    kwargs = dict(kwargs)
    prompts = kwargs.pop("prompts", [np.array([1, 2, 3])])
    gammas = kwargs.pop("gammas", [2])
    with pytest.raises(ValueError, match=match):
        measure_walltime(m, p, m, p, prompts, make_warper(0), gammas, **kwargs)
