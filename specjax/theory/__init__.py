"""Closed-form speed analysis of speculative decoding (host-side numpy, float64).

Formulas from Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via Speculative
Decoding" (ICML 2023, arXiv:2211.17192), plus a measured cost model for hardware where scoring
gamma + 1 tokens at once costs more than one target step (e.g. CPU, see PERF-NOTES).

Notation (the paper's): p is the target distribution, q the draft's, beta = sum_x min(p, q) the
per-position acceptance rate, alpha = E[beta], gamma the number of drafted tokens per iteration,
c the ratio of one draft step's time to one target step's time, c_hat the same ratio for
arithmetic operations.

Everything here is plain numpy: these are analysis tools for tables and plots, not code that runs
inside jit. Scalar-or-array arguments broadcast against each other like numpy ufuncs.

Modules: `divergences` (β, D_LK, α), `formulas` (the paper's closed forms and the positional
model), `costs` (the measured T(k) model), `hierarchy` (its three-level form), `tables` (grids
and their text), `simulation` (Monte-Carlo iterations). Import from here: `from specjax import
theory; theory.walltime_improvement(...)`.
"""

from specjax.theory.costs import (
    cost_curve,
    iteration_time,
    measured_optimal_gamma,
    measured_speedup,
)
from specjax.theory.divergences import acceptance_rate, expected_alpha, total_variation
from specjax.theory.formulas import (
    arithmetic_operations_factor,
    expected_tokens_per_iteration,
    optimal_gamma,
    oracle_bound,
    positional_tokens_per_iteration,
    walltime_improvement,
)
from specjax.theory.hierarchy import hierarchical_draft_cost, hierarchical_speedup
from specjax.theory.simulation import simulate_iterations
from specjax.theory.tables import GammaTable, format_grid, gamma_table

__all__ = [
    "acceptance_rate",
    "total_variation",
    "expected_alpha",
    "expected_tokens_per_iteration",
    "positional_tokens_per_iteration",
    "walltime_improvement",
    "arithmetic_operations_factor",
    "optimal_gamma",
    "oracle_bound",
    "cost_curve",
    "iteration_time",
    "measured_speedup",
    "measured_optimal_gamma",
    "hierarchical_draft_cost",
    "hierarchical_speedup",
    "GammaTable",
    "gamma_table",
    "format_grid",
    "simulate_iterations",
]
