"""experiments/common/config_checks.py: the launcher names a bad common field before any work.

Every shipped config, under each of its switches, passes; each kind of bad value is caught with
the field's full name (nested ones too); and `run_mode` raises before it creates the workdir or
imports the mode, so a `gammas=0` no longer waits for the models to load (or train).
"""

import importlib
import math
import pathlib

import ml_collections
import numpy as np
import pytest

from experiments.common.config_checks import check_config
from experiments.main import run_mode

CONFIGS = pathlib.Path(__file__).resolve().parent.parent / "configs"
# Each config file's switches (configs/*.py: parse_options(switches=...)), one at a time
# (smollm2,quick: a variant of smollm2).
SWITCHES = {
    "extensions": ("tiny", "smollm2"),
    "generate": (),
    "heads": ("eagle1", "eagle3", "medusa", "distilled", "tiny"),
    "leviathan2023": ("tiny", "smoke", "compare_block", "smollm2", "smollm2,quick"),
    "mesh": (),
    "scale": ("tiny",),
    "sequoia2024": ("tiny", "zoo", "smollm2"),
    "theory": (),
    "train": ("tiny",),
    "trees": ("tiny", "zoo"),
}


@pytest.mark.parametrize("name", sorted(SWITCHES))
def test_every_shipped_config_passes(name):
    module = importlib.import_module(f"configs.{name}")
    for arg in (None, *SWITCHES[name]):
        check_config(module.get_config(arg))


def test_every_config_file_is_listed():
    files = {p.stem for p in CONFIGS.glob("*.py")} - {"__init__", "options"}
    assert files == set(SWITCHES)


def _config(**fields) -> ml_collections.ConfigDict:
    base = dict(gammas=(1, 2), temperatures=(0.0, 1.0), repeats=3, max_new_tokens=16)
    return ml_collections.ConfigDict({**base, **fields})


@pytest.mark.parametrize(
    "fields, named",
    [
        (dict(gammas=(1, 0)), r"config\.gammas\[1\] = 0"),
        (dict(gammas=()), r"config\.gammas = \(\)"),
        (dict(gammas=(True,)), r"config\.gammas\[0\] = True"),
        (dict(gammas=(2.0,)), r"config\.gammas\[0\] = 2\.0"),
        (dict(outer_gammas=(-1,)), r"config\.outer_gammas\[0\] = -1"),
        (dict(drafts=()), r"config\.drafts = \(\): must name at least one"),
        (dict(temperatures=(0.0, -1.0)), r"config\.temperatures\[1\] = -1\.0"),
        (dict(temperatures=(math.nan,)), r"config\.temperatures\[0\] = nan"),
        (dict(temperatures=()), r"config\.temperatures = \(\)"),
        (dict(temperature=math.inf), r"config\.temperature = inf"),
        (dict(repeats=0), r"config\.repeats = 0"),
        (dict(cost_rounds=1.5), r"config\.cost_rounds = 1\.5"),
        (dict(max_new_tokens=0), r"config\.max_new_tokens = 0"),
        (dict(gamma=0), r"config\.gamma = 0"),
        (dict(alpha_prompts=0), r"config\.alpha_prompts = 0"),
        (dict(cache_len=0), r"config\.cache_len = 0"),
        (dict(sizes=()), r"config\.sizes = \(\)"),
        (dict(sizes=(4, -4)), r"config\.sizes\[1\] = -4"),
        (dict(prompts=0), r"config\.prompts = 0: must give at least one prompt"),
        (dict(prompts=[]), r"config\.prompts = \[\]: must give at least one prompt"),
        (dict(learning_rate=math.nan), r"config\.learning_rate = nan: must be a finite number > 0"),
        (dict(peak_lr=0.0), r"config\.peak_lr = 0\.0: must be a finite number > 0"),
        (dict(noise=-0.1), r"config\.noise = -0\.1: must be a finite number >= 0"),
        (dict(ce_weight=math.inf), r"config\.ce_weight = inf"),
    ],
)
def test_a_bad_field_is_named(fields, named):
    with pytest.raises(ValueError, match=named):
        check_config(_config(**fields))


def test_nested_fields_are_checked_by_their_full_name():
    config = _config(adaptive=ml_collections.ConfigDict(dict(gammas=(1, 2), repeats=0)))
    with pytest.raises(ValueError, match=r"config\.adaptive\.repeats = 0"):
        check_config(config)
    check_config(_config(adaptive=ml_collections.ConfigDict(dict(gammas=(3,), repeats=1))))


def test_fields_of_other_meanings_are_left_alone():
    # `sizes` holds 1 in some configs (a T(N) sweep) and >= 2 in others (tree sizes); `max_depth`
    # and `stop_at_step` are 0 by default; None means "unset" for the scalar fields. (top_k and
    # top_p are the generate mode's own, checked there with its messages.)
    check_config(_config(sizes=(1, 2), max_depth=0, stop_at_step=0, gamma=None))


def test_numpy_numbers_pass_as_python_ones():
    check_config(_config(learning_rate=np.float32(1e-3), noise=np.float64(0.1), repeats=3))


def test_heads_prompts_zero_is_named_as_its_nested_field():
    from configs import heads

    config = heads.get_config("tiny")
    config.data.num_prompts = 0
    with pytest.raises(ValueError, match=r"config\.data\.num_prompts = 0"):
        check_config(config)


@pytest.mark.parametrize(
    "policies, named",
    [
        (("heuristic", "bogus"), r"config\.adaptive\.policies\[1\] = 'bogus': not a policy"),
        (("theory+static",), r"policies\[0\] = 'theory\+static'"),
        (("confidence:1.5",), r"policies\[0\] = 'confidence:1\.5'"),
        (("confidence:x",), r"policies\[0\] = 'confidence:x'"),
        ((), r"config\.adaptive\.policies = \(\): must list at least one"),
    ],
)
def test_extension_policies_are_named_before_any_part_runs(tmp_path, policies, named):
    from configs import extensions

    config = extensions.get_config("tiny")
    config.parts = ("hierarchy", "adaptive")  # the bad part second: still refused first
    config.adaptive.policies = policies
    workdir = tmp_path / "run"
    with pytest.raises(ValueError, match=named):
        run_mode("extensions", config, str(workdir))
    assert not workdir.exists()


def test_every_shipped_policy_name_passes():
    from configs import extensions
    from experiments.extensions import adaptive

    for arg in (None, "tiny", "smollm2"):
        adaptive.check(extensions.get_config(arg).adaptive)
    adaptive.check(ml_collections.ConfigDict(dict(policies=("confidence", "confidence:0.3+auto"))))


def test_the_launcher_checks_before_it_creates_the_workdir(tmp_path):
    from configs import trees

    config = trees.get_config("tiny")
    config.gammas = (0,)
    workdir = tmp_path / "run"
    with pytest.raises(ValueError, match=r"config\.gammas\[0\] = 0"):
        run_mode("trees", config, str(workdir))
    assert not workdir.exists()
