"""`first_argmax` is `jnp.argmax`: same index, first among ties, on every dtype and axis we use."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decoding.argmax import first_argmax


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.int32])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_equals_jnp_argmax_with_ties(dtype, axis):
    # Values from a 5-level grid, so most rows hold ties for the maximum.
    x = jax.random.randint(jax.random.key(0), (7, 9, 11), 0, 5).astype(dtype)
    got = first_argmax(x, axis=axis)
    assert got.dtype == jnp.int32
    np.testing.assert_array_equal(got, jnp.argmax(x, axis=axis))


def test_minus_infinity_rows_and_large_vocabularies():
    x = jax.random.normal(jax.random.key(1), (4, 32000))
    x = x.at[0].set(-jnp.inf).at[1, 123].set(jnp.inf).at[2, 31999].set(50.0)
    np.testing.assert_array_equal(first_argmax(x), jnp.argmax(x, axis=-1))
    assert first_argmax(x).tolist()[:3] == [0, 123, 31999]


def test_nan_counts_as_plus_infinity_and_stays_in_range():
    x = jnp.asarray([[0.0, jnp.nan, 3.0], [jnp.inf, jnp.nan, 1.0], [jnp.nan, jnp.nan, jnp.nan]])
    assert first_argmax(x).tolist() == [1, 0, 0]


@pytest.mark.parametrize("axis", [2, -3])
def test_out_of_range_axis_is_an_error(axis):
    with pytest.raises(ValueError, match="axis"):
        first_argmax(jnp.zeros((2, 3)), axis=axis)
