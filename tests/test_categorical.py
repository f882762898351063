"""The two-level categorical sampler (`specjax.decoding.categorical`): its law, exact and counted.

Statistical checks: every chi-square here fails below p = 1e-6 (`specjax.testing.stats`), and a
lossless sampler runs 7 of them (4 rows of the batched case, the flat tail, 2 default-block
vocabularies), so this file fails falsely with probability <= 7e-6 (Bonferroni). Each of the three
biased samplers below must drive the same batched check under 1e-6; measured, each drives at
least two rows to p = 0.0 (below float64's range), while the unbiased sampler's smallest row p is
0.045.

Exact checks: the sampler's law is (M_b / Σ M) (w_i / S_b), with M_b the float32 block sums it
draws from and S_b the exact ones, so its distance from w / Σ w is computed in float64 with no
sampling at all (measured TV <= 2.5e-8 at V = 259, 32000 and 128256; bound 1e-7).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decoding import categorical, sample_from_probs
from specjax.decoding.categorical import block_masses, default_block
from specjax.testing.stats import PVALUE_THRESHOLD, pooled_chi2

pytestmark = pytest.mark.runtime_bound  # sampling dominates: tests/conftest.py

VOCAB, BLOCK = 1000, 32  # 32 blocks; the last holds 8 entries and 24 zero-weight pads
DRAWS = 1 << 18
CHUNK = 1 << 14


def _rows() -> np.ndarray:
    """[4, VOCAB] hand-built weights, unnormalised, with zero blocks, zeros and tiny tails."""
    rng = np.random.default_rng(7)
    smooth = np.exp(2.0 * rng.normal(size=VOCAB))
    zipf = 1.0 / np.arange(1, VOCAB + 1) ** 1.1
    zipf[64:192] = 0.0  # blocks 2..5 hold nothing
    zipf[::7] = 0.0
    spike = np.full(VOCAB, 1e-4 / VOCAB)
    spike[995] = 0.9  # the leader sits in the partial last block
    spike[500] = 0.05
    last_only = np.zeros(VOCAB)
    last_only[992:] = np.arange(1, 9)  # only the partial block has mass
    return np.stack([smooth * 1e-6, zipf, spike * 1e6, last_only]).astype(np.float32)


def _counts(sampler, weights: np.ndarray, draws: int = DRAWS, seed: int = 0) -> np.ndarray:
    """[rows, vocab] counts of `draws` independent draws of `sampler(key, weights)` per row."""
    w = jnp.asarray(weights)
    batch = jax.jit(jax.vmap(lambda k: sampler(k, w)))
    keys = jax.random.split(jax.random.key(seed), draws)
    counts = np.zeros(weights.shape, np.int64)
    for start in range(0, draws, CHUNK):
        tokens = np.asarray(batch(keys[start : start + CHUNK]))  # [chunk, rows]
        for r in range(weights.shape[0]):
            counts[r] += np.bincount(tokens[:, r], minlength=weights.shape[1])
    return counts


def _pvalues(counts: np.ndarray, weights: np.ndarray) -> list[float]:
    return [
        pooled_chi2(c, w.astype(np.float64)).pvalue for c, w in zip(counts, weights, strict=True)
    ]


def test_default_block_is_the_power_of_two_nearest_the_square_root():
    assert [default_block(v) for v in (1, 6, 259, 1024, 4096, 32000, 128256)] == [
        1,
        2,
        16,
        32,
        64,
        128,
        256,
    ]
    with pytest.raises(ValueError, match="vocab"):
        default_block(0)


@pytest.mark.parametrize("block", [0, -3, 2.5, True, "8", np.float32(4)])
def test_bad_block_is_rejected_by_name(block):
    with pytest.raises(ValueError, match="block"):
        sample_from_probs(jax.random.key(0), jnp.ones((2, 8)), block=block)


def test_batched_rows_follow_their_own_weights():
    weights = _rows()
    counts = _counts(lambda k, w: sample_from_probs(k, w, BLOCK), weights)
    assert counts[weights == 0].sum() == 0  # zero weights and zero blocks are never drawn
    pvalues = _pvalues(counts, weights)
    assert min(pvalues) > PVALUE_THRESHOLD, pvalues


# Negative controls: plausible bugs of a blocked sampler, each a different sampler's law.
def _block_by_max(key, w):
    """Chooses the block by its largest weight instead of its mass."""
    blocked = categorical._blocked(w, BLOCK)
    k1, k2 = jax.random.split(key)
    b = jax.random.categorical(k1, categorical._log_weights(blocked.max(-1)))
    row = jnp.take_along_axis(blocked, b[..., None, None], axis=-2)[..., 0, :]
    return b * BLOCK + jax.random.categorical(k2, categorical._log_weights(row))


def _block_of_row_zero(key, w):
    """Gathers every row's entries from the block chosen for row 0 (a batching bug)."""
    blocked = categorical._blocked(w, BLOCK)
    k1, k2 = jax.random.split(key)
    b = jax.random.categorical(k1, categorical._log_weights(blocked.sum(-1)))
    row = blocked[jnp.arange(w.shape[0]), b[0]]
    return b[0] * BLOCK + jax.random.categorical(k2, categorical._log_weights(row))


def _uniform_inside_the_block(key, w):
    """Right block, then a uniform entry among its positive weights."""
    blocked = categorical._blocked(w, BLOCK)
    k1, k2 = jax.random.split(key)
    b = jax.random.categorical(k1, categorical._log_weights(blocked.sum(-1)))
    row = jnp.take_along_axis(blocked, b[..., None, None], axis=-2)[..., 0, :]
    return b * BLOCK + jax.random.categorical(k2, jnp.where(row > 0, 0.0, -jnp.inf))


@pytest.mark.parametrize(
    "biased",
    [_block_by_max, _block_of_row_zero, _uniform_inside_the_block],
    ids=lambda f: f.__name__,
)
def test_negative_controls_are_caught(biased):
    weights = _rows()
    pvalues = _pvalues(_counts(biased, weights), weights)
    assert min(pvalues) < PVALUE_THRESHOLD, pvalues


def test_a_flat_tail_far_below_the_leader_keeps_its_mass():
    # One leader and 4095 entries 17 nats below it: the tail holds 1.7e-4 of the mass, each entry
    # 4e-8. JAX's default ("low") Gumbels top out near 15.9, so one Gumbel-max over the row draws
    # this tail at about a fifth of its rate (E[e^-G; G < -1.1] = 4 e^-3; measured with the same
    # keys: 37 tail draws against 178 expected); the two-level sampler compares block masses (gap
    # 12.8 nats) and drew 188. The same tail inside the leader's block, where only the Gumbel
    # mode decides, needs ~2^31 Gumbels to resolve: `scripts/check_sampler_tail.py` (90 s).
    vocab = 4096
    w = np.full((1, vocab), np.exp(-17.0), np.float32)
    w[0, 0] = 1.0
    counts = _counts(lambda k, x: sample_from_probs(k, x), w, draws=1 << 20, seed=3)[0]
    observed = np.array([counts[0], counts[1:64].sum(), counts[64:].sum()])
    probs = np.array([w[0, 0], w[0, 1:64].sum(), w[0, 64:].sum()], np.float64)
    assert pooled_chi2(observed, probs).pvalue > PVALUE_THRESHOLD, observed


@pytest.mark.parametrize("vocab", [6, 259])
def test_default_block_law_on_small_vocabularies(vocab):
    rng = np.random.default_rng(vocab)
    w = rng.gamma(0.3, size=(1, vocab)).astype(np.float32)
    w[0, rng.choice(vocab, vocab // 3, replace=False)] = 0.0
    counts = _counts(lambda k, x: sample_from_probs(k, x), w, seed=vocab)
    assert counts[w == 0].sum() == 0
    assert pooled_chi2(counts[0], w[0].astype(np.float64)).pvalue > PVALUE_THRESHOLD


def implied_tv(w: np.ndarray, block: int) -> float:
    """TV distance of the sampler's exact law from w / Σ w, in float64 (no sampling).

    The sampler draws block b with probability M_b / Σ M and entry i of it with w_i / S_b, where
    M_b are the float32 block sums its compiled program computes (`block_masses`, which it
    calls) and S_b the exact sums of w. (These rows' largest weight is <= 1: no scaling.)
    """
    vocab = w.shape[-1]
    n_blocks = -(-vocab // block)
    prepared = w.astype(np.float64)
    exact_sums = np.pad(prepared, (0, n_blocks * block - vocab)).reshape(n_blocks, block).sum(-1)
    float32_sums = np.asarray(jax.jit(block_masses, static_argnums=1)(w, block), np.float64)
    ratio = np.where(exact_sums > 0, float32_sums / np.where(exact_sums > 0, exact_sums, 1), 0)
    implied = prepared * np.repeat(ratio, block)[:vocab] / float32_sums.sum()
    w64 = w.astype(np.float64)
    return 0.5 * np.abs(implied - w64 / w64.sum()).sum()


@pytest.mark.parametrize("vocab", [259, 32000, 128256])
def test_implied_law_is_within_float32_rounding_of_the_weights(vocab):
    rng = np.random.default_rng(vocab)
    zipf = 1.0 / np.arange(1, vocab + 1) ** 1.1
    rng.shuffle(zipf)
    for w in (
        np.asarray(jax.nn.softmax(jnp.asarray(3.0 * rng.normal(size=vocab), jnp.float32))),
        np.asarray(jax.nn.softmax(jnp.asarray(8.0 * rng.normal(size=vocab), jnp.float32))),
        zipf.astype(np.float32),
    ):
        assert implied_tv(w, default_block(vocab)) < 1e-7


def test_huge_unnormalised_weights_do_not_overflow_the_block_sums():
    # Three weights near float32's maximum (due 2:2:3); unscaled, block 0's sum would be inf and
    # always win. 2^14 draws, chi-square at 1e-6 (counted in the module's false-failure bound).
    w = np.zeros((1, 1024), np.float32)
    w[0, [0, 1, 100]] = [2e38, 2e38, 3e38]
    counts = _counts(lambda k, x: sample_from_probs(k, x), w, draws=1 << 14, seed=9)[0]
    observed = counts[[0, 1, 100]]
    assert observed.sum() == 1 << 14
    assert pooled_chi2(observed, np.array([2.0, 2.0, 3.0])).pvalue > PVALUE_THRESHOLD, observed


def test_negative_weights_count_as_zero():
    w = jnp.asarray([[-1.0, 2.0, 0.0, 1.0]])
    tokens = np.asarray(
        jax.vmap(lambda k: sample_from_probs(k, w, 2))(jax.random.split(jax.random.key(4), 4096))
    )
    assert set(np.unique(tokens)) == {1, 3}


def test_one_level_reference_is_jax_random_categorical():
    w = jnp.asarray(_rows())
    key = jax.random.key(11)
    expected = jax.random.categorical(key, categorical._log_weights(w), axis=-1)
    np.testing.assert_array_equal(sample_from_probs(key, w, block=VOCAB), expected)


def test_all_zero_row_gives_index_zero_and_shapes_are_kept():
    w = jnp.zeros((2, 3, 50)).at[1, 2, 37].set(1.0)
    tokens = sample_from_probs(jax.random.key(0), w, block=8)
    assert tokens.shape == (2, 3) and tokens.dtype == jnp.int32
    assert int(tokens[0, 0]) == 0 and int(tokens[1, 2]) == 37


def test_numpy_integer_blocks_are_accepted():
    w = jnp.ones((2, 40))
    key = jax.random.key(2)
    np.testing.assert_array_equal(
        sample_from_probs(key, w, np.int64(8)), sample_from_probs(key, w, 8)
    )


def test_one_compilation_across_keys_and_weights():
    sampler = jax.jit(sample_from_probs)
    w = jnp.ones((4, 300))
    for seed in range(3):
        sampler(jax.random.key(seed), w * (seed + 1)).block_until_ready()
    assert sampler._cache_size() == 1
