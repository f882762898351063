"""The sparse bigram draft: the interpolated distribution it promises, at any vocabulary."""

import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models.sparse_ngram import SparseBigramLM, fit_sparse_bigram


def _dense_reference(docs, vocab, top_k, smoothing):
    """q(b | a) written out with numpy (Witten-Bell over the top-k successors)."""
    unigram = sum(np.bincount(d, minlength=vocab) for d in docs) + smoothing
    unigram = unigram / unigram.sum()
    pairs = np.zeros((vocab, vocab))
    for d in docs:
        np.add.at(pairs, (d[:-1], d[1:]), 1)
    q = np.tile(unigram, (vocab, 1))
    for a in range(vocab):
        c = pairs[a]
        total, distinct = c.sum(), (c > 0).sum()
        if total == 0:
            continue
        lam = total / (total + distinct)
        order = sorted(np.nonzero(c)[0], key=lambda b: (-c[b], b))
        kept = order[:top_k]
        dropped = c.sum() - c[kept].sum()
        q[a] = ((1 - lam) + lam * dropped / total) * unigram
        q[a, kept] += lam * c[kept] / total
    return q


@pytest.mark.parametrize("top_k", [1, 3])
def test_distribution_matches_the_formula(top_k):
    rng = np.random.default_rng(top_k)
    vocab = 40
    docs = [rng.integers(0, 9, 400), rng.integers(0, vocab, 60), np.asarray([39, 0, 39, 0])]
    params = fit_sparse_bigram(docs, vocab, top_k=top_k, smoothing=0.5)
    model = SparseBigramLM(vocab, top_k)
    prev = jnp.asarray([np.arange(vocab)])  # every previous token, seen or not
    logits, state = model.apply(params, model.init_state(1, 64), prev, jnp.array([vocab]))
    want = _dense_reference(docs, vocab, top_k, 0.5)
    np.testing.assert_allclose(np.exp(np.asarray(logits[0], np.float64)), want, rtol=2e-5)
    assert int(state.lengths[0]) == vocab


def test_bad_arguments():
    with pytest.raises(ValueError, match="top_k"):
        fit_sparse_bigram([np.arange(5)], 10, top_k=0)
    with pytest.raises(ValueError, match=r"tokens must lie in \[0, 10\)"):
        fit_sparse_bigram([np.arange(12)], 10)
