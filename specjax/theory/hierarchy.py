"""Three-level speculation (target <- middle <- small): the cost model applied recursively."""

from __future__ import annotations

import numpy as np

from specjax.theory._checks import _check_alpha, _check_broadcast
from specjax.theory.costs import iteration_time, measured_speedup
from specjax.theory.formulas import expected_tokens_per_iteration


def hierarchical_draft_cost(alpha_inner, gamma_inner, t_middle, t_small) -> np.ndarray:
    """Time per drafted token when the draft is itself speculative (middle <- small).

    One inner iteration costs T_middle(γ_in + 1) + γ_in T_small and emits
    E[tokens/iter](α_in, γ_in) tokens, each an exact sample of the middle model, so to an outer
    target <- middle decoder the inner level is a draft of this cost per token (the paper's cost
    model applied recursively).

    Args:
      alpha_inner: the inner level's (middle <- small) acceptance rate(s) in [0, 1].
      gamma_inner: its drafted tokens per iteration, integers >= 1.
      t_middle: the middle model's cost curve, see `cost_curve`; needs T_middle(γ_in + 1).
      t_small: time of one small-model draft step (same unit), >= 0.

    Returns:
      float64 array of the broadcast shape of the arguments.
    """
    names = ("t_middle", "gamma_inner", "t_small", "T_middle")
    _, gamma_inner, inner_iteration = iteration_time(t_middle, gamma_inner, t_small, names)
    alpha_checked = _check_alpha(alpha_inner, "alpha_inner")
    _check_broadcast(alpha_inner=alpha_checked, gamma_inner=gamma_inner, t_small=t_small)
    return inner_iteration / expected_tokens_per_iteration(alpha_inner, gamma_inner)


def hierarchical_speedup(
    alpha, gamma, t_target, alpha_inner, gamma_inner, t_middle, t_small
) -> np.ndarray:
    """Expected speedup of target <- middle <- small over autoregressive target decoding.

    `measured_speedup` with the inner level's cost per drafted token
    (`hierarchical_draft_cost`). The 3-level drafts follow the middle model's law exactly, so
    `alpha` is the acceptance rate of target <- middle.

    Args:
      alpha, gamma, t_target: the outer level, as for `measured_speedup`.
      alpha_inner, gamma_inner, t_middle, t_small: the inner level, as for
        `hierarchical_draft_cost`.
    """
    t_mid = hierarchical_draft_cost(alpha_inner, gamma_inner, t_middle, t_small)
    return measured_speedup(alpha, gamma, t_target, t_mid)
