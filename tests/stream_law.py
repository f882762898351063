"""Independent float64 references of token-wise and block verification, and of block
verification's published mistakes, as exact (n, y) laws of one call (`RuleLaw`).

The prefix-dependent cases, the target's law and the exact law of the stream of chained calls for
any `RuleLaw` (enumeration) live in the library's test kit, `specjax.testing.law`; the rule laws
below are written without the library, so the kit's enumeration checks the library's JAX rules
against code that shares nothing with them.
"""

from __future__ import annotations

import numpy as np


def _point_masses(drafts, vocab) -> np.ndarray:
    return np.eye(vocab)[np.asarray(drafts)]


def tokenwise_law(drafts, q, p, d) -> np.ndarray:
    """Exact (n, y) law of token-wise verification (Leviathan et al. 2023, Algorithm 1)."""
    gamma, vocab = len(drafts), p.shape[-1]
    q = _point_masses(drafts, vocab) if q is None else q
    law = np.zeros((gamma + 1, vocab))
    reach = 1.0  # P(the first i drafts are accepted)
    for i in range(d + 1):
        if i == d:  # everything drafted was accepted: the bonus from p at the row's length
            law[i] = reach * p[i]
            break
        x = drafts[i]
        accept = 1.0 if p[i, x] >= q[i, x] else p[i, x] / q[i, x]
        residual = np.maximum(p[i] - q[i], 0.0)
        mass = residual.sum()
        law[i] = reach * (1.0 - accept) * (residual / mass if mass > 0 else p[i])
        reach *= accept
    return law


BLOCK_BUGS = ("h_is_b", "residual_without_b", "contiguous_prefix")


def block_law(drafts, q, p, d, bug: str | None = None) -> np.ndarray:
    """Exact (n, y) law of block verification (Sun et al. 2024, Algorithm 2), or a mistake.

    bug: None, or one of BLOCK_BUGS:
      "h_is_b": the stopping chance h_i = b_i at every position (the token-wise coin reused);
      "residual_without_b": the correction from norm(max(p_{τ+1} - q_{τ+1}, 0)), b_τ dropped;
      "contiguous_prefix": τ = the position before the first failed coin (the "fix" a review bot
        proposed in vllm-ascend#11985), instead of the last successful coin.
    """
    gamma, vocab = len(drafts), p.shape[-1]
    q = _point_masses(drafts, vocab) if q is None else q
    b = [1.0]
    for i in range(gamma):
        x = drafts[i]
        num = b[-1] * p[i, x]
        b.append((1.0 if num > 0 else 0.0) if num >= q[i, x] else num / q[i, x])
    h = np.zeros(gamma + 1)  # h[i] for i = 1..gamma (h[0] unused)
    for i in range(1, d + 1):
        if i == d:
            h[i] = b[i]
        elif bug == "h_is_b":
            h[i] = b[i]
        else:
            rho = np.maximum(b[i] * p[i] - q[i], 0.0).sum()
            denom = rho + 1.0 - b[i]
            h[i] = rho / denom if denom > 0 else 1.0
    stop = np.zeros(gamma + 1)  # P(n = i)
    for i in range(d + 1):
        if bug == "contiguous_prefix":  # coins 1..i succeed, coin i + 1 fails
            stop[i] = np.prod(h[1 : i + 1]) * (1.0 - h[i + 1] if i < d else 1.0)
        else:  # coin i succeeds (i = 0: always), every later coin fails
            stop[i] = (h[i] if i else 1.0) * np.prod(1.0 - h[i + 1 : d + 1])
    law = np.zeros((gamma + 1, vocab))
    for i in range(d + 1):
        if i == d:
            law[i] = stop[i] * p[i]
            continue
        weight = 1.0 if bug == "residual_without_b" else b[i]
        residual = np.maximum(weight * p[i] - q[i], 0.0)
        mass = residual.sum()
        law[i] = stop[i] * (residual / mass if mass > 0 else p[i])
    return law
