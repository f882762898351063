"""Checks of the config fields every experiment reads the same way, before anything runs.

A mode reads `gammas`, `temperatures`, `repeats`, `max_new_tokens` and their kin deep inside
its pipeline: a `gammas=0` reached the decoder only after the models were loaded (or trained),
and a `repeats=0` failed at the end of the timing with "min() arg is an empty sequence". The
launcher checks them first (`experiments/main.run_mode`), wherever they sit in the ConfigDict
(`config.adaptive.gammas` too), and names the field: "config.gammas[0] = 0: ...". Only names
with one meaning across configs/ are checked (counts such as `cache_len`, `alpha_prompts` and
`num_prompts`, tree `sizes`, `prompts` as a count or a list, learning rates, `noise` and
`ce_weight`); a mode checks the rest itself, in its optional `check(config)`, which the
launcher also runs before the workdir exists (the extensions' policy names).
"""

from __future__ import annotations

import math

import ml_collections

from specjax import checks

# Fields that are counts of at least one: timed rounds, tokens, prompts.
POSITIVE_INTS = frozenset(
    {
        "repeats",
        "timing_repeats",
        "cost_repeats",
        "cost_rounds",
        "alpha_rounds",
        "max_new_tokens",
        "gamma",
        "gamma_max",
        "alpha_prompts",
        "num_prompts",
        "cache_len",
    }
)
# Non-empty sequences of integers >= 1: tree sizes (sequoia2024: n >= 1 tokens per call; trees:
# nodes, where the tree itself refuses n < 2).
COUNT_LISTS = frozenset({"sizes"})
# Step sizes: finite and > 0. Loss weights and noise scales: finite and >= 0.
POSITIVE_REALS = frozenset({"learning_rate", "peak_lr"})
NONNEGATIVE_REALS = frozenset({"noise", "ce_weight"})
# Non-empty sequences of γ values (each an integer >= 1).
GAMMA_LISTS = frozenset({"gammas", "outer_gammas", "inner_gammas"})
# Non-empty sequences of names: with none, a mode skipped its tables and still exited 0.
NAME_LISTS = frozenset({"drafts"})


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_temperature(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} = {value!r}: a temperature must be a number >= 0 (0: greedy)")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} = {value!r}: a temperature must be a finite number >= 0")


def _check_field(name: str, key: str, value) -> None:
    if key in POSITIVE_INTS and value is not None:
        if not _is_int(value) or value < 1:
            raise ValueError(f"{name} = {value!r}: must be an integer >= 1")
    elif key in GAMMA_LISTS | COUNT_LISTS:
        what = "γ" if key in GAMMA_LISTS else "entry"
        if not isinstance(value, (tuple, list)) or not value:
            raise ValueError(f"{name} = {value!r}: must be a non-empty sequence of integers >= 1")
        for i, n in enumerate(value):
            if not _is_int(n) or n < 1:
                raise ValueError(f"{name}[{i}] = {n!r}: every {what} must be an integer >= 1")
    elif key == "prompts" and not isinstance(value, str):
        # A count (extensions) or the prompts themselves (generate): at least one either way.
        if _is_int(value) and value < 1 or isinstance(value, (tuple, list)) and not value:
            raise ValueError(f"{name} = {value!r}: must give at least one prompt")
    elif key in POSITIVE_REALS | NONNEGATIVE_REALS and value is not None:
        low = "> 0" if key in POSITIVE_REALS else ">= 0"
        if not checks.is_finite_real(value, above_zero=key in POSITIVE_REALS):
            raise ValueError(f"{name} = {value!r}: must be a finite number {low}")
    elif key in NAME_LISTS:
        if not isinstance(value, (tuple, list)) or not value:
            raise ValueError(f"{name} = {value!r}: must name at least one")
    elif key == "temperatures":
        if not isinstance(value, (tuple, list)) or not value:
            raise ValueError(f"{name} = {value!r}: must be a non-empty sequence of temperatures")
        for i, t in enumerate(value):
            _check_temperature(f"{name}[{i}]", t)
    elif key == "temperature" and value is not None:
        _check_temperature(name, value)


def check_config(config: ml_collections.ConfigDict, prefix: str = "config") -> None:
    """Raises ValueError naming the first field of `config` (nested ones too) that is out of range.

    Args:
      config: a mode's ConfigDict (as `configs/*.py:get_config` returns it, options applied).
      prefix: the name the message gives the root ("config").
    """
    for key, value in config.items():
        name = f"{prefix}.{key}"
        if isinstance(value, ml_collections.ConfigDict):
            check_config(value, name)
        else:
            _check_field(name, key, value)
