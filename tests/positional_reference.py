"""Exact positional acceptance P[k] at one tree node, by enumeration (numpy, small vocabularies).

Written from the rule's definition, independently of `specjax.decoding.rules.tree` and
`specjax.rank_acceptance`, so tests can hold both to it.
"""

import numpy as np


def _residual(r, q):
    d = np.maximum(r - q, 0.0)
    return d / d.sum() if d.sum() > 1e-15 else r


def exact_positional(p, q, ranks, replacement):
    """P[k], k < ranks: the probability that the (k+1)-th child tried is the one accepted.

    Children are drawn from q with replacement (independent) or without (q restricted to the
    untried tokens, uniform over them once q's support is exhausted); child x is accepted with
    probability min(1, r(x) / Q(x)), else r <- norm((r - Q)+) (kept where empty) and, without
    replacement, x leaves Q.
    """
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    out = np.zeros(ranks)
    if replacement:
        r, reach = p, 1.0
        for k in range(ranks):
            a = np.minimum(r, q).sum()
            out[k], reach, r = reach * a, reach * (1 - a), _residual(r, q)
        return out

    def walk(r, qq, tried, k, reach):
        if k == ranks or reach == 0.0:
            return
        if qq.sum() <= 1e-15:
            qq = np.array([0.0 if t in tried else 1.0 for t in range(len(p))])
        qq = qq / qq.sum()
        for x in np.flatnonzero(qq > 0):
            accept = min(1.0, r[x] / qq[x])
            out[k] += reach * qq[x] * accept
            reduced = qq.copy()
            reduced[x] = 0.0
            walk(_residual(r, qq), reduced, tried | {int(x)}, k + 1, reach * qq[x] * (1 - accept))

    walk(p, q, frozenset(), 0, 1.0)
    return out
