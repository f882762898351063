"""The paper's closed forms: tokens per iteration, walltime and operations factors, the best γ
(Equation 1, Theorems 3.8 and 3.11, Figure 3), and the positional model of tokens per iteration."""

from __future__ import annotations

import numpy as np

from specjax.theory._checks import (
    _check_alpha,
    _check_broadcast,
    _check_gamma,
    _check_nonnegative,
    _check_positive_int,
)


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
    _check_broadcast(alpha=alpha, gamma=gamma)
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
    _check_broadcast(alpha=_check_alpha(alpha), gamma=gamma_f, c=c)
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
    _check_broadcast(alpha=_check_alpha(alpha), gamma=gamma_f, c_hat=c_hat)
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
    _check_broadcast(alpha=alpha, c=c)
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
