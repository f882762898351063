"""Pearson chi-square with sparse categories pooled, and its p-value without scipy.

Every check of the kit fails below `PVALUE_THRESHOLD` = 1e-6, so a run of k checks on a lossless
rule fails with probability <= k * 1e-6 (Bonferroni: valid under any dependence between the
checks), up to the accuracy of the chi-square approximation, which with every pooled bin expecting
>= `MIN_EXPECTED` = 5 counts and >= 1e5 samples is well within a factor of 2 at this tail.

`chi2_sf` is the regularised upper incomplete gamma function Q(dof / 2, x / 2) in float64 (series
below a + 1, Lentz's continued fraction above; Numerical Recipes §6.2), accurate to ~1e-14
relative against scipy.stats.chi2.sf, so the library needs no scipy.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from specjax import checks

PVALUE_THRESHOLD = 1e-6
MIN_EXPECTED = 5.0


def check_threshold(threshold) -> None:
    """A check's p-value threshold must lie in (0, 1): at 0 or below nothing can fail, so a
    biased rule would be reported lossless; at 1 or above everything fails."""
    if not (checks.is_real(threshold) and 0 < threshold < 1):
        raise ValueError(f"threshold must be a p-value in (0, 1), got {threshold!r}")


def _upper_gamma_regularised(a: float, x: float) -> float:
    """Q(a, x) = Γ(a, x) / Γ(a) for a > 0, x >= 0."""
    if x <= 0.0:
        return 1.0
    log_prefix = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1.0:  # series for P(a, x), Q = 1 - P
        term = total = 1.0 / a
        ap = a
        for _ in range(100_000):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-16:
                break
        return max(0.0, 1.0 - total * math.exp(log_prefix))
    # Continued fraction for Q(a, x) (modified Lentz).
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 100_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-16:
            break
    return math.exp(log_prefix) * h


def chi2_sf(statistic: float, dof: int) -> float:
    """P(X >= statistic) for X chi-square with `dof` degrees of freedom (float64, no scipy)."""
    if dof <= 0:
        raise ValueError(f"dof must be >= 1; got {dof}")
    return float(_upper_gamma_regularised(dof / 2.0, max(float(statistic), 0.0) / 2.0))


@dataclasses.dataclass(frozen=True)
class Chi2:
    """A pooled Pearson chi-square goodness-of-fit test.

    Attributes:
      statistic: sum over bins of (observed - expected)^2 / expected.
      dof: bins - 1.
      pvalue: chi2_sf(statistic, dof); 0.0 when a category of probability 0 was observed.
      bins: bins after pooling.
      impossible: count of observations in categories of probability exactly 0 (a lossless rule
        never emits one: any such observation fails the check outright).
    """

    statistic: float
    dof: int
    pvalue: float
    bins: int
    impossible: int = 0


def pooled_chi2(counts, probs) -> Chi2:
    """Pearson chi-square of `counts` against `probs`, pooling sparse categories.

    Categories of probability 0 are left out of the statistic; observations in them are counted in
    `Chi2.impossible` and set the p-value to 0. Categories expecting fewer than MIN_EXPECTED counts
    are merged into one bin; if that bin still expects fewer, it absorbs the smallest remaining
    bins until it does not.

    Args:
      counts: observed counts, any shape.
      probs: probabilities of the same shape (normalised here).

    Returns:
      `Chi2`; with a single bin there is nothing to test and the p-value is 1 (or 0 if an
      impossible category was observed).
    """
    counts = np.asarray(counts, np.float64).ravel()
    probs = np.asarray(probs, np.float64).ravel()
    keep = probs > 0
    impossible = int(counts[~keep].sum())
    counts, probs = counts[keep], probs[keep]
    total = counts.sum()
    expected = total * probs / probs.sum()
    order = np.argsort(expected)
    expected, counts = expected[order], counts[order]
    # Smallest-first: pool the prefix of sparse categories, extending it while the pool is sparse.
    cut = int(np.searchsorted(expected, MIN_EXPECTED))
    while cut < len(expected) and 0 < expected[:cut].sum() < MIN_EXPECTED:
        cut += 1
    if cut > 0:
        expected = np.concatenate([[expected[:cut].sum()], expected[cut:]])
        counts = np.concatenate([[counts[:cut].sum()], counts[cut:]])
    bins = len(expected)
    if bins < 2:
        return Chi2(0.0, 0, 0.0 if impossible else 1.0, bins, impossible)
    statistic = float(np.sum((counts - expected) ** 2 / expected))
    dof = bins - 1
    pvalue = 0.0 if impossible else chi2_sf(statistic, dof)
    return Chi2(statistic, dof, pvalue, bins, impossible)
