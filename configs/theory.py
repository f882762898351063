r"""Theory mode: expected speedup of speculative decoding as a function of alpha, c and gamma.

Paper: Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via Speculative
Decoding", https://arxiv.org/abs/2211.17192 (Equation 1, Theorems 3.8 and 3.11).

Launch (from the repository root; CPU only, about 1 s including Python start-up):

    python -m experiments.main --config=configs/theory.py --workdir=runs/theory
    python -m experiments.main --config=configs/theory.py:alpha=0.8,c=0.1 --workdir=runs/theory

Outputs in the workdir: theory.json (every number printed) and theory_speedup.png (speedup vs
gamma, one colour per alpha; solid: the paper's formula, dashed: our measured-cost model).

String options after the colon (comma-separated, big_vision style):
    alpha=0.8          a single alpha (replaces the list)
    alphas=0.5/0.7/0.9 several alphas, separated by "/"
    c=0.1              draft/target step-time ratio for the paper's formula
    gamma_max=16       largest gamma tabulated
    t_draft=1.3        draft step time (ms) for the measured-cost model
    formula_only       skip the measured-cost model
Any field can also be set with the usual `--config.c=0.1` flags.
"""

import ml_collections
import numpy as np

from configs.options import parse_options

# Measured cost (ms) of scoring k tokens at once with model A (GPT-2 style, d=512, 8 layers,
# 25.6M params, float32, batch 1) on our 2-core AMD EPYC CPU with JAX 0.10.2: a CPU measurement
# from /work/shared/PERF-NOTES.md. Only k = 1, 2, 5, 9 were measured; other k are interpolated
# linearly below. On TPU/GPU T(k) is close to T(1), which is what the paper assumes.
_MEASURED_K = (1, 2, 5, 9)
_MEASURED_MS = (8.5, 15.5, 24.6, 29.1)

_FLOAT_OPTIONS = ("alpha", "c", "t_draft")
_INT_OPTIONS = ("gamma_max",)
_SWITCHES = ("formula_only",)


def _parse_arg(arg: str | None) -> dict:
    """Parses "k=v,k2=v2,switch" into a dict (switches map to True)."""
    options = parse_options(
        arg, ints=_INT_OPTIONS, floats=_FLOAT_OPTIONS, lists=("alphas",), switches=_SWITCHES
    )
    if "alpha" in options and "alphas" in options:
        raise ValueError("Give either alpha= or alphas=, not both")
    return options


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """Returns the theory-mode config; `arg` holds the string options of the module docstring."""
    options = _parse_arg(arg)
    config = ml_collections.ConfigDict()

    config.mode = "theory"

    # Mean acceptance rates alpha = E[beta]; one table row and one plot curve each.
    config.alphas = [0.6, 0.7, 0.8, 0.9]
    # Draft step time / target step time for the paper's formula (Theorem 3.8).
    config.c = 0.05
    # Tables and plots cover gamma = 1..gamma_max.
    config.gamma_max = 10

    # Measured-cost model: target time (ms) to score k = 1, 2, ... tokens at once (CPU
    # measurement, see _MEASURED_MS above), linearly interpolated between measured k. An empty
    # list turns the model off. It limits that model to gamma <= len(t_target) - 1.
    ks = np.arange(1, _MEASURED_K[-1] + 1)
    config.t_target = np.round(np.interp(ks, _MEASURED_K, _MEASURED_MS), 4).tolist()
    # Draft step time (ms): draft S (d=128, 2 layers) inside a device while_loop, from the same
    # notes; the draft called from a Python loop costs ~0.5 ms instead.
    config.t_draft = 0.22

    if "alpha" in options:
        config.alphas = [options["alpha"]]
    if "alphas" in options:
        config.alphas = options["alphas"]
    for key in ("c", "gamma_max", "t_draft"):
        if key in options:
            config[key] = options[key]
    if options.get("formula_only"):
        config.t_target = []
    return config
