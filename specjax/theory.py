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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

# Tolerance for "sums to one" on probability vectors: loose enough for float32 softmax outputs.
_PROB_SUM_ATOL = 1e-4


# ----------------------------------------------------------------------------- validation


def _as_float(x, name: str) -> np.ndarray:
    """Converts `x` to a float64 array, rejecting booleans, strings and non-finite values."""
    arr = np.asarray(x)
    if arr.dtype == bool or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise TypeError(f"{name} must be a real number or array of them, got {x!r}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {x!r}")
    return arr


def _check_alpha(alpha, name: str = "alpha") -> np.ndarray:
    arr = _as_float(alpha, name)
    if np.any((arr < 0.0) | (arr > 1.0)):
        raise ValueError(f"{name} must lie in [0, 1], got {alpha!r}")
    return arr


def _check_nonnegative(x, name: str) -> np.ndarray:
    arr = _as_float(x, name)
    if np.any(arr < 0.0):
        raise ValueError(f"{name} must be >= 0, got {x!r}")
    return arr


def _check_gamma(gamma, name: str = "gamma") -> np.ndarray:
    """Returns gamma as an int64 array; integral floats (e.g. 3.0) are accepted."""
    arr = _as_float(gamma, name)
    if np.any(arr != np.round(arr)) or np.any(arr < 1):
        raise ValueError(f"{name} must be an integer >= 1 (or an array of them), got {gamma!r}")
    return arr.astype(np.int64)


def _check_positive_int(x, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {x!r}")
    return int(x)


def _check_distributions(p, q, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Validates two (batches of) probability vectors along `axis`."""
    p = _as_float(p, "p")
    q = _as_float(q, "q")
    try:
        np.broadcast_shapes(p.shape, q.shape)
    except ValueError:
        raise ValueError(
            f"p and q must have broadcastable shapes, got {p.shape} and {q.shape}"
        ) from None
    for name, arr in (("p", p), ("q", q)):
        if arr.ndim == 0:
            raise ValueError(f"{name} must have at least one axis (the vocabulary), got a scalar")
        if np.any(arr < 0.0):
            raise ValueError(f"{name} has negative probabilities (min {arr.min()})")
        sums = arr.sum(axis=axis)
        if not np.allclose(sums, 1.0, rtol=0.0, atol=_PROB_SUM_ATOL):
            worst = sums.flat[np.argmax(np.abs(sums - 1.0))]
            raise ValueError(f"{name} must sum to 1 along axis {axis}, found a sum of {worst}")
    return p, q


# ----------------------------------------------------------------------------- divergences


def acceptance_rate(p, q, axis: int = -1) -> np.ndarray:
    """Per-position acceptance rate beta = sum_x min(p(x), q(x)).

    This is the paper's Definition 3.1, beta = E_{x~q}[min(1, p(x)/q(x))], which equals
    sum_x min(p, q) (Section 3.2): the probability that a draft token x ~ q is accepted.

    Args:
      p: target probabilities, [..., vocab] (non-negative, summing to 1 along `axis`).
      q: draft probabilities, broadcastable against `p`.
      axis: the vocabulary axis.

    Returns:
      beta with `axis` reduced, float64 in [0, 1].
    """
    p, q = _check_distributions(p, q, axis)
    # Rounding in a float32 softmax can push the sum a hair past 1.
    return np.clip(np.minimum(p, q).sum(axis=axis), 0.0, 1.0)


def total_variation(p, q, axis: int = -1) -> np.ndarray:
    """The paper's divergence D_LK(p, q) = 1 - sum_x min(p, q), i.e. the total variation distance.

    Section 3.2 of the paper defines D_LK(p, q) = sum_x |p(x) - M(x)| with M = (p + q) / 2
    (Definition 3.3), shows D_LK = 1 - sum_x min(p, q) (Lemma 3.4) and so beta = 1 - D_LK(p, q).

    Args:
      p: target probabilities, [..., vocab].
      q: draft probabilities, broadcastable against `p`.
      axis: the vocabulary axis.

    Returns:
      D_LK with `axis` reduced, float64 in [0, 1].
    """
    return 1.0 - acceptance_rate(p, q, axis=axis)


def expected_alpha(p, q, weights=None) -> float:
    """alpha = E[beta]: the mean acceptance rate over positions (the paper's Definition 3.2).

    Args:
      p: target probabilities, [..., vocab]; every leading index is one position (prefix).
      q: draft probabilities, same shape as `p`.
      weights: optional non-negative weights with the leading shape of `p` (e.g. a padding mask
        [batch, length]); the mean is weighted by them. Default: uniform.

    Returns:
      alpha as a Python float.
    """
    beta = acceptance_rate(p, q, axis=-1)  # [...] one beta per position
    if weights is None:
        return float(np.mean(beta))
    w = _check_nonnegative(weights, "weights")
    if w.shape != beta.shape:
        raise ValueError(f"weights must have the positions' shape {beta.shape}, got {w.shape}")
    if w.sum() <= 0.0:
        raise ValueError("weights must have a positive sum")
    return float(np.sum(w * beta) / np.sum(w))


# ----------------------------------------------------------------------------- paper formulas


def expected_tokens_per_iteration(alpha, gamma) -> np.ndarray:
    """Expected tokens per draft-and-verify iteration: (1 - alpha^(gamma+1)) / (1 - alpha).

    The paper's Equation (1), under its simplifying assumption that the betas are i.i.d. At
    alpha = 1 the value is the limit gamma + 1, returned exactly (no 0/0).

    Args:
      alpha: mean acceptance rate(s) in [0, 1].
      gamma: number(s) of drafted tokens, integers >= 1; broadcasts against `alpha`.

    Returns:
      float64 array of the broadcast shape, in [1, gamma + 1].
    """
    alpha = _check_alpha(alpha)
    gamma = _check_gamma(gamma)
    n = (gamma + 1).astype(np.float64)
    one_minus = 1.0 - alpha  # exact in float64 for alpha near 1 (Sterbenz)
    with np.errstate(divide="ignore", invalid="ignore"):
        # 1 - alpha^n = -expm1(n log alpha) avoids cancellation when alpha is close to 1.
        numer = -np.expm1(n * np.log1p(-one_minus))
        value = numer / one_minus
    return np.where(one_minus == 0.0, n, value)


def positional_tokens_per_iteration(acceptance_by_position, gamma: int) -> float:
    """Expected tokens per iteration when acceptance depends on the draft position.

    With a_i = P(draft i accepted | drafts 1..i-1 accepted), an iteration emits its accepted
    prefix plus one target token: E = 1 + sum_{i=1}^{gamma} prod_{j<=i} a_j. Real drafts are
    not i.i.d. (prompt lookup's first draft is its weakest, a feature head's its strongest), so
    this model, fed the rates measured at a larger gamma, predicts each smaller gamma. With every
    a_i = alpha it equals `expected_tokens_per_iteration(alpha, gamma)`.

    Args:
      acceptance_by_position: conditional acceptance rates a_1, a_2, ... in [0, 1], at least
        `gamma` of them.
      gamma: drafted tokens per iteration, >= 1.

    Returns:
      The expected tokens per iteration, in [1, gamma + 1].
    """
    gamma = _check_positive_int(gamma, "gamma")
    rates = _check_alpha(np.asarray(acceptance_by_position, np.float64), "acceptance_by_position")
    if rates.ndim != 1 or rates.shape[0] < gamma:
        raise ValueError(
            f"acceptance_by_position needs at least gamma={gamma} rates, got shape {rates.shape}"
        )
    return float(1.0 + np.sum(np.cumprod(rates[:gamma])))


def walltime_improvement(alpha, gamma, c) -> np.ndarray:
    """Expected walltime speedup over autoregressive decoding (the paper's Theorem 3.8).

    (1 - alpha^(gamma+1)) / ((1 - alpha)(c gamma + 1)): an iteration costs gamma draft steps plus
    one target step (scoring gamma + 1 tokens in parallel is assumed to cost one step).

    Args:
      alpha: mean acceptance rate(s) in [0, 1].
      gamma: drafted tokens per iteration, integers >= 1.
      c: draft-step time / target-step time, >= 0.

    Returns:
      float64 array of the broadcast shape.
    """
    c = _check_nonnegative(c, "c")
    gamma_f = _check_gamma(gamma).astype(np.float64)
    return expected_tokens_per_iteration(alpha, gamma) / (c * gamma_f + 1.0)


def arithmetic_operations_factor(alpha, gamma, c_hat) -> np.ndarray:
    """Expected factor of increase in arithmetic operations (the paper's Theorem 3.11).

    (1 - alpha)(gamma c_hat + gamma + 1) / (1 - alpha^(gamma+1)): an iteration runs gamma draft
    steps and scores gamma + 1 tokens with the target, for E[tokens] accepted tokens.

    Args:
      alpha: mean acceptance rate(s) in [0, 1].
      gamma: drafted tokens per iteration, integers >= 1.
      c_hat: draft arithmetic operations per token / target operations per token, >= 0.

    Returns:
      float64 array of the broadcast shape (>= 1 whenever c_hat >= 0).
    """
    c_hat = _check_nonnegative(c_hat, "c_hat")
    gamma_f = _check_gamma(gamma).astype(np.float64)
    return (gamma_f * c_hat + gamma_f + 1.0) / expected_tokens_per_iteration(alpha, gamma)


def optimal_gamma(alpha, c, gamma_max: int = 32) -> np.ndarray:
    """The integer gamma in [1, gamma_max] maximising `walltime_improvement` (paper's Figure 3).

    Brute force over all candidates; ties go to the smallest gamma. Note the optimum can still
    be a slowdown: Corollary 3.9 guarantees a speedup only when alpha > c.

    Args:
      alpha: mean acceptance rate(s) in [0, 1].
      c: draft/target step-time ratio(s), >= 0; broadcasts against `alpha`.
      gamma_max: largest gamma considered.

    Returns:
      int64 array of the broadcast shape of `alpha` and `c`.
    """
    gamma_max = _check_positive_int(gamma_max, "gamma_max")
    alpha = _check_alpha(alpha)
    c = _check_nonnegative(c, "c")
    gammas = np.arange(1, gamma_max + 1)  # [G]
    speedup = walltime_improvement(alpha[..., None], gammas, c[..., None])  # [..., G]
    return gammas[np.argmax(speedup, axis=-1)]


def oracle_bound(alpha) -> np.ndarray:
    """Speedup limit 1 / (1 - alpha) as c -> 0 and gamma -> infinity (inf at alpha = 1).

    Args:
      alpha: mean acceptance rate(s) in [0, 1].

    Returns:
      float64 array of `alpha`'s shape.
    """
    alpha = _check_alpha(alpha)
    with np.errstate(divide="ignore"):
        return 1.0 / (1.0 - alpha)


# ----------------------------------------------------------------------------- measured costs


def cost_curve(points: Mapping[int, float] | Sequence[float] | np.ndarray) -> np.ndarray:
    """Target scoring cost T(k) for k = 1..K as an array, from measurements.

    Args:
      points: either a 1-D sequence [T(1), T(2), ..., T(K)], or a dict {k: T(k)} with k = 1
        present; missing k between measured ones are interpolated linearly (no extrapolation).
        Any time unit works as long as the draft cost uses the same one.

    Returns:
      float64 array [K] with entry k - 1 holding T(k); all entries > 0.
    """
    if isinstance(points, Mapping):
        if not points:
            raise ValueError("t_target dict is empty")
        ks = np.array(sorted(points), dtype=np.float64)
        if np.any(ks != np.round(ks)) or ks[0] != 1:
            raise ValueError(
                f"t_target keys must be integers k >= 1 including 1, got {sorted(points)}"
            )
        values = _as_float([points[k] for k in sorted(points)], "t_target")
        curve = np.interp(np.arange(1, ks[-1] + 1), ks, values)  # [K]
    else:
        curve = _as_float(points, "t_target")
        if curve.ndim != 1 or curve.size == 0:
            raise ValueError(f"t_target must be a non-empty 1-D array, got shape {curve.shape}")
    if np.any(curve <= 0.0):
        raise ValueError(f"t_target values must be > 0, got {curve.tolist()}")
    return curve


def measured_speedup(alpha, gamma, t_target, t_draft) -> np.ndarray:
    """Expected speedup when scoring k tokens at once costs T_target(k) (beyond the paper).

    E[tokens/iter](alpha, gamma) * T_target(1) / (T_target(gamma + 1) + gamma * T_draft). With
    T_target(k) = T_target(1) for all k and T_draft = c T_target(1) this is Theorem 3.8.

    Args:
      alpha: mean acceptance rate(s) in [0, 1].
      gamma: drafted tokens per iteration, integers >= 1; needs T_target(gamma + 1).
      t_target: target cost curve, see `cost_curve` (1-D array [T(1)..T(K)] or dict {k: T(k)}).
      t_draft: time of one draft step (same unit), >= 0; broadcasts like `alpha`.

    Returns:
      float64 array of the broadcast shape of `alpha`, `gamma` and `t_draft`.
    """
    curve = cost_curve(t_target)  # [K]
    gamma = _check_gamma(gamma)
    t_draft = _check_nonnegative(t_draft, "t_draft")
    if np.max(gamma) + 1 > curve.size:
        raise ValueError(
            f"t_target covers k = 1..{curve.size}, but gamma = {int(np.max(gamma))} needs "
            f"T_target({int(np.max(gamma)) + 1})"
        )
    iteration_time = curve[gamma] + gamma * t_draft  # curve[gamma] is T(gamma + 1)
    return expected_tokens_per_iteration(alpha, gamma) * curve[0] / iteration_time


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
    curve = cost_curve(t_middle)
    gamma_inner = _check_gamma(gamma_inner, "gamma_inner")
    t_small = _check_nonnegative(t_small, "t_small")
    if np.max(gamma_inner) + 1 > curve.size:
        raise ValueError(
            f"t_middle covers k = 1..{curve.size}, but gamma_inner = {int(np.max(gamma_inner))} "
            f"needs T_middle({int(np.max(gamma_inner)) + 1})"
        )
    inner_iteration = curve[gamma_inner] + gamma_inner * t_small  # curve[g] is T(g + 1)
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


def measured_optimal_gamma(alpha, t_target, t_draft) -> np.ndarray:
    """The gamma in 1..K-1 maximising `measured_speedup` (ties go to the smallest gamma).

    Args:
      alpha: mean acceptance rate(s) in [0, 1].
      t_target: target cost curve with K >= 2 entries, see `cost_curve`.
      t_draft: draft step time(s), >= 0; broadcasts against `alpha`.

    Returns:
      int64 array of the broadcast shape of `alpha` and `t_draft`.
    """
    curve = cost_curve(t_target)
    if curve.size < 2:
        raise ValueError("t_target must cover at least k = 1, 2 to choose a gamma >= 1")
    alpha = _check_alpha(alpha)
    t_draft = _check_nonnegative(t_draft, "t_draft")
    gammas = np.arange(1, curve.size)  # [K - 1]
    speedup = measured_speedup(alpha[..., None], gammas, curve, t_draft[..., None])  # [..., K-1]
    return gammas[np.argmax(speedup, axis=-1)]


# ----------------------------------------------------------------------------- tables


@dataclasses.dataclass(frozen=True)
class GammaTable:
    """Paper-formula speedups on a grid of alpha x c x gamma.

    Attributes:
      alphas: [A] acceptance rates.
      cs: [C] cost ratios.
      gammas: [G] drafted tokens per iteration.
      speedup: [A, C, G] `walltime_improvement`.
      tokens_per_iteration: [A, G] `expected_tokens_per_iteration`.
      best_gamma: [A, C] the gamma among `gammas` with the largest speedup.
      best_speedup: [A, C] that speedup.
    """

    alphas: np.ndarray
    cs: np.ndarray
    gammas: np.ndarray
    speedup: np.ndarray
    tokens_per_iteration: np.ndarray
    best_gamma: np.ndarray
    best_speedup: np.ndarray

    def to_dict(self) -> dict:
        """Returns the table as JSON-ready nested lists."""
        return {f.name: getattr(self, f.name).tolist() for f in dataclasses.fields(self)}

    def format(self) -> str:
        """Returns one text block per c: rows alpha, columns gamma, best gamma starred."""
        lines = []
        for j, c in enumerate(self.cs):
            lines.append(f"speedup (paper, Theorem 3.8), c = {c:g}; * = best gamma")
            lines.append(
                format_grid(self.alphas, self.gammas, self.speedup[:, j], self.best_gamma[:, j])
            )
        return "\n".join(lines)


def gamma_table(alphas, cs, gammas) -> GammaTable:
    """Evaluates the paper's speedup formula on every (alpha, c, gamma) combination.

    Args:
      alphas: 1-D acceptance rates in [0, 1].
      cs: 1-D draft/target cost ratios >= 0.
      gammas: 1-D integers >= 1 (need not be contiguous).

    Returns:
      A `GammaTable`.
    """
    alphas = np.atleast_1d(_check_alpha(alphas, "alphas"))  # [A]
    cs = np.atleast_1d(_check_nonnegative(cs, "cs"))  # [C]
    gammas = np.atleast_1d(_check_gamma(gammas, "gammas"))  # [G]
    for name, arr in (("alphas", alphas), ("cs", cs), ("gammas", gammas)):
        if arr.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    speedup = walltime_improvement(
        alphas[:, None, None], gammas[None, None, :], cs[None, :, None]
    )  # [A, C, G]
    best = np.argmax(speedup, axis=-1)  # [A, C]
    return GammaTable(
        alphas=alphas,
        cs=cs,
        gammas=gammas,
        speedup=speedup,
        tokens_per_iteration=expected_tokens_per_iteration(alphas[:, None], gammas[None, :]),
        best_gamma=gammas[best],
        best_speedup=np.take_along_axis(speedup, best[..., None], axis=-1)[..., 0],
    )


def format_grid(alphas, gammas, values, best_gamma=None, fmt: str = "{:.3f}") -> str:
    """Formats an [A, G] array as a text table, one row per alpha, starring each row's best gamma.

    Args:
      alphas: [A] row labels.
      gammas: [G] column labels.
      values: [A, G] numbers.
      best_gamma: optional [A] gamma to star in each row.
      fmt: format of one number.

    Returns:
      The table as a multi-line string.
    """
    values = np.asarray(values)
    # A trailing space on unstarred cells keeps the decimal points aligned.
    cells = [[fmt.format(v) + " " for v in row] for row in values]
    if best_gamma is not None:
        for i, g in enumerate(np.asarray(best_gamma)):
            col = int(np.flatnonzero(np.asarray(gammas) == g)[0])
            cells[i][col] = cells[i][col][:-1] + "*"
    width = max(len(s) for row in cells for s in row) + 1
    width = max(width, max(len(f"g={g}") for g in gammas) + 1)
    header = "alpha |" + "".join(f"{f'g={g}':>{width}}" for g in gammas)
    rows = [header, "-" * len(header)]
    for a, row in zip(alphas, cells, strict=True):
        rows.append(f"{a:5.2f} |" + "".join(f"{s:>{width}}" for s in row))
    return "\n".join(rows)


# ----------------------------------------------------------------------------- simulation


def simulate_iterations(alpha: float, gamma: int, num_iterations: int, seed: int) -> np.ndarray:
    """Monte-Carlo samples of tokens produced per iteration under i.i.d. acceptance.

    Each of the gamma drafted tokens is accepted independently with probability alpha; the
    iteration stops at the first rejection. It always yields one more token than it accepted
    (the target's correction on a rejection, or its bonus token after all gamma are accepted).

    Args:
      alpha: acceptance probability in [0, 1].
      gamma: drafted tokens per iteration, integer >= 1.
      num_iterations: number of iterations to simulate.
      seed: seed of the numpy generator.

    Returns:
      int64 array [num_iterations] with values in 1..gamma + 1.
    """
    if np.ndim(alpha) != 0 or np.ndim(gamma) != 0:
        raise ValueError(f"alpha and gamma must be scalars, got {alpha!r} and {gamma!r}")
    alpha_f = float(_check_alpha(alpha))
    gamma_i = int(_check_gamma(gamma))
    num_iterations = _check_positive_int(num_iterations, "num_iterations")
    rng = np.random.default_rng(seed)
    accepted = rng.random((num_iterations, gamma_i)) < alpha_f  # [N, gamma]
    # A draft token counts only if it and every token before it were accepted.
    num_accepted = np.cumprod(accepted, axis=1).sum(axis=1)  # [N]
    return num_accepted.astype(np.int64) + 1
