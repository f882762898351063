"""`draw_children` draws the law `tree_accept` verifies children with, checked by enumeration.

Without replacement (Sequoia) the law of k children in draw order is
P(x_1..x_k) = prod_i q(x_i) / (1 - sum_{j<i} q(x_j)), and once supp q is exhausted the rest are
uniform without replacement among the untried tokens (`tree_accept(replacement=False)`'s
assumption); with replacement (SpecInfer) it is prod_i q(x_i). `exact_law` enumerates both;
the draws (2^18 rows, fixed seed) are compared with it by a pooled Pearson chi-square over the
ordered k-tuples: without replacement on a dense q and on a q whose support (2 tokens) is
smaller than the number of children (the uniform fallback), with replacement on the dense q.

False failures: 3 law checks at P_THRESHOLD = 1e-6, each within a factor ~2 of nominal after
pooling (every bin expecting >= 5): a correct sampler fails this file with probability below
3 x 2e-6 = 6e-6 (Bonferroni). Negative controls, each rejected at p < 1e-12 by the same check:
three planted bugs of the Gumbel race, two of which make no sequence impossible, only
mis-weighted (tokens outside supp q keyed at log 0 = -inf, so they tie and come out in index
order instead of uniformly; the race run over q instead of log q), and independent draws
verified as draws without replacement.
"""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decoding.trees.topology import draw_children
from specjax.testing import pooled_chi2

P_THRESHOLD = 1e-6
DETECTION_PVALUE = 1e-12
ROWS = 1 << 18

DENSE = np.array([0.35, 0.25, 0.18, 0.12, 0.07, 0.03])  # 6 tokens, 3 children: 120 tuples
SPARSE = np.array([0.0, 0.7, 0.0, 0.3, 0.0])  # support 2 < 4 children: the uniform fallback
CASES = {"dense": (DENSE, 3), "sparse": (SPARSE, 4)}


def exact_law(q: np.ndarray, num: int, replacement: bool) -> np.ndarray:
    """float64 [vocab] * num: the ordered law of `num` children drawn from q."""
    vocab = len(q)
    if replacement:
        return functools.reduce(np.multiply.outer, [q.astype(np.float64)] * num)
    law = np.zeros((vocab,) * num)
    for seq in itertools.permutations(range(vocab), num):
        prob, left = 1.0, q.astype(np.float64).copy()
        untried = np.ones(vocab, bool)
        for x in seq:
            weights = left if left.sum() > 0 else untried.astype(np.float64)
            prob *= weights[x] / weights.sum()
            left[x], untried[x] = 0.0, False
        law[seq] = prob
    return law


def _counts(children: np.ndarray, vocab: int) -> np.ndarray:
    flat = np.ravel_multi_index(tuple(children.T), (vocab,) * children.shape[1])
    return np.bincount(flat, minlength=vocab ** children.shape[1])


def _draw_children(key, probs, num, replacement):
    return draw_children(key, probs, num, replacement=replacement)


def _ties_outside_support(key, probs, num, replacement):
    """Planted bug: log 0 = -inf outside supp q; those tokens tie and top_k takes them in index
    order once the support is exhausted."""
    del replacement
    gumbel = jax.random.gumbel(key, probs.shape, jnp.float32, mode="high")
    return jax.lax.top_k(jnp.log(probs) + gumbel, num)[1]


def _race_over_q(key, probs, num, replacement):
    """Planted bug: the race keyed by q + Gumbel instead of log q + Gumbel."""
    del replacement
    gumbel = jax.random.gumbel(key, probs.shape, jnp.float32, mode="high")
    return jax.lax.top_k(probs + gumbel, num)[1]


def _independent(key, probs, num, replacement):
    """Planted bug: independent draws (the with-replacement children) verified as without."""
    del replacement
    return draw_children(key, probs, num, replacement=True)


@functools.partial(jax.jit, static_argnums=(2, 3, 4))
def _draw(key, q, num, replacement, sampler):
    return sampler(key, jnp.broadcast_to(q, (ROWS, q.shape[0])), num, replacement)


def _check(q, num, replacement, sampler):
    children = _draw(jax.random.key(7), jnp.asarray(q, jnp.float32), num, replacement, sampler)
    return pooled_chi2(_counts(np.asarray(children), len(q)), exact_law(q, num, replacement))


@pytest.mark.parametrize(
    "case, replacement",
    [("dense", False), ("sparse", False), ("dense", True)],
    ids=["without-dense", "without-sparse", "with-dense"],
)
def test_children_follow_the_ordered_law(case, replacement):
    q, num = CASES[case]
    result = _check(q, num, replacement, _draw_children)
    print(case, replacement, result)
    assert result.impossible == 0 and result.pvalue > P_THRESHOLD, result


@pytest.mark.parametrize(
    "case, bug",
    [("sparse", _ties_outside_support), ("dense", _race_over_q), ("dense", _independent)],
    ids=["ties-outside-support", "race-over-q", "independent"],
)
def test_planted_bugs_are_detected(case, bug):
    q, num = CASES[case]
    result = _check(q, num, False, bug)
    print(bug.__name__, result)
    assert result.pvalue < DETECTION_PVALUE, result
