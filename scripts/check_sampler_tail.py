"""The sampler's "high" Gumbels draw a flat tail far below the leader at its rate; "low" do not.

    PYTHONPATH=. python scripts/check_sampler_tail.py          # ~2.5 min on a 2-core CPU

A leader and 2049 entries 17 nats below it, all but two in the leader's block of 2048, so the
block choice is trivial and the leader and the tail compete Gumbel against Gumbel. The tail holds
8.5e-5 of the mass (89 of 2^20 draws are due). JAX's "low" Gumbels stop near 15.9, so they draw
it at about a fifth of its rate (E[e^-G; G < -1.1] = 4 e^-3). Prints both counts and chi-square
p-values (fail below 1e-6). Measured (2026-11-24): high 78 tail draws, p = 0.25; low 9, p = 2e-17.
Too slow for CI (2^31 Gumbels), so `tests/test_categorical.py` tests the cheap between-block tail.
"""

import numpy as np

import specjax

specjax.configure_cpu()

import jax  # noqa: E402

from specjax.decoding import categorical  # noqa: E402
from specjax.testing.stats import PVALUE_THRESHOLD, pooled_chi2  # noqa: E402

DRAWS, CHUNK, VOCAB, BLOCK = 1 << 20, 1 << 12, 2050, 2048


def tail_counts() -> np.ndarray:
    """[leader draws, tail draws] over DRAWS draws with the current `categorical.GUMBEL_MODE`."""
    w = np.full((1, VOCAB), np.exp(-17.0), np.float32)
    w[0, 0] = 1.0
    weights = jax.numpy.asarray(w)
    draw = jax.jit(jax.vmap(lambda k: categorical.sample_from_probs(k, weights, BLOCK)))
    keys = jax.random.split(jax.random.key(3), DRAWS)
    tail = sum(
        int((np.asarray(draw(keys[i : i + CHUNK])) > 0).sum()) for i in range(0, DRAWS, CHUNK)
    )
    return np.array([DRAWS - tail, tail])


def main():
    probs = np.array([1.0, (VOCAB - 1) * np.exp(-17.0)])
    for mode in ("high", "low"):
        categorical.GUMBEL_MODE = mode
        jax.clear_caches()
        counts = tail_counts()
        p = pooled_chi2(counts, probs).pvalue
        due = DRAWS * probs[1] / probs.sum()
        verdict = "pass" if p > PVALUE_THRESHOLD else "FAIL"
        print(f"{mode!r} Gumbels: {counts[1]} tail draws, {due:.1f} due, p = {p:.2g} ({verdict})")


if __name__ == "__main__":
    main()
