"""Per-position acceptance and the paper's divergence D_LK (Section 3.2)."""

from __future__ import annotations

import numpy as np

from specjax.theory._checks import _check_distributions, _check_nonnegative


def acceptance_rate(p, q, axis: int = -1) -> np.ndarray:
    """Per-position acceptance rate beta = sum_x min(p(x), q(x)).

    This is the paper's Definition 3.1, beta = E_{x~q}[min(1, p(x)/q(x))], which equals
    sum_x min(p, q) (Section 3.2): the probability that a draft token x ~ q is accepted.

    Args:
      p: target probabilities, [..., vocab] (non-negative, summing to 1 along `axis`).
      q: draft probabilities, broadcastable against `p` over the leading axes (the vocabulary
        axis must have one size in both).
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
    if beta.size == 0:
        raise ValueError(
            f"p and q must hold at least one position; got shapes {np.shape(p)} and "
            f"{np.shape(q)} (alpha is a mean over positions)"
        )
    if weights is None:
        return float(np.mean(beta))
    w = _check_nonnegative(weights, "weights")
    if w.shape != beta.shape:
        raise ValueError(f"weights must have the positions' shape {beta.shape}, got {w.shape}")
    if w.sum() <= 0.0:
        raise ValueError("weights must have a positive sum")
    return float(np.sum(w * beta) / np.sum(w))
