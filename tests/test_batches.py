"""Tests for specjax.data.batches: determinism, seekability, window bounds, eval and prompts."""

import numpy as np
import pytest

from specjax.data import batches
from specjax.data.tokenizer import PAD_ID

# tokens[i] == i, so a window's content reveals where it was cut from.
_ARANGE = np.arange(1000, dtype=np.uint16)


def test_batch_at_rows_are_contiguous_windows_inside_the_corpus():
    for step in range(50):
        b = batches.batch_at(_ARANGE, step, batch_size=8, seq_len=31, seed=3)
        assert b.shape == (8, 32) and b.dtype == np.int32
        starts = batches.window_starts(_ARANGE.size, step, 8, 31, 3)
        np.testing.assert_array_equal(b, starts[:, None] + np.arange(32))
        assert starts.min() >= 0 and starts.max() <= 1000 - 32


def test_batch_at_reaches_both_ends_of_the_corpus():
    # 2 tokens longer than the window -> 3 possible starts: 0, 1, 2. Over 200 windows the chance
    # that start 0 or start 2 never appears is <= 2 * (2/3)**200 ~ 1e-35.
    tokens = np.arange(12, dtype=np.int32)
    starts = np.concatenate(
        [batches.window_starts(tokens.size, s, 20, 9, 0) for s in range(10)]
    )  # [200]
    assert set(starts.tolist()) == {0, 1, 2}


def test_batch_at_is_a_pure_function_of_seed_and_step():
    a = batches.batch_at(_ARANGE, 5, 4, 16, seed=1)
    np.testing.assert_array_equal(a, batches.batch_at(_ARANGE, 5, 4, 16, seed=1))
    # Different step or seed gives different windows (4 starts drawn from 984 values each; a
    # full collision has probability 984**-4 ~ 1e-12).
    assert not np.array_equal(a, batches.batch_at(_ARANGE, 6, 4, 16, seed=1))
    assert not np.array_equal(a, batches.batch_at(_ARANGE, 5, 4, 16, seed=2))


def test_train_batches_resume_sees_the_same_batches():
    full = batches.TrainBatches(_ARANGE, batch_size=4, seq_len=16, seed=7)
    seen = [next(full) for _ in range(11)]  # steps 0..10
    assert full.state == 11
    resumed = batches.TrainBatches(_ARANGE, batch_size=4, seq_len=16, seed=7, start_step=7)
    assert resumed.state == 7
    for step in range(7, 11):
        np.testing.assert_array_equal(next(resumed), seen[step])
    assert resumed.state == 11


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(batch_size=0), ValueError, "batch_size must be >= 1, got 0"),
        (dict(seq_len=0), ValueError, "seq_len must be >= 1, got 0"),
        (dict(seq_len=1000), ValueError, "needs 1001 tokens but the corpus has only 1000"),
        (dict(seed=-1), ValueError, "seed must be >= 0"),
        (dict(step=-3), ValueError, "step must be >= 0"),
        (dict(batch_size=2.0), TypeError, "batch_size must be an int, got float"),
    ],
)
def test_batch_at_rejects_bad_arguments(kwargs, error, match):
    args = dict(step=0, batch_size=2, seq_len=8, seed=0) | kwargs
    with pytest.raises(error, match=match):
        batches.batch_at(_ARANGE, **args)


def test_train_batches_validates_at_construction():
    with pytest.raises(ValueError, match="corpus has only 10"):
        batches.TrainBatches(np.arange(10), batch_size=1, seq_len=10, seed=0)
    with pytest.raises(ValueError, match="1-D"):
        batches.batch_at(np.zeros((4, 4), np.int32), 0, 1, 2, 0)


def test_eval_windows_cover_targets_exactly_once():
    tokens = np.arange(11, dtype=np.int32)
    w = batches.eval_windows(tokens, seq_len=3)
    np.testing.assert_array_equal(w, [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]])
    # Targets 1..9 each once; token 10 does not fill a window and is dropped.
    np.testing.assert_array_equal(np.sort(w[:, 1:].ravel()), np.arange(1, 10))
    np.testing.assert_array_equal(batches.eval_windows(tokens, 3, max_windows=2), w[:2])
    with pytest.raises(ValueError, match="max_windows must be >= 1"):
        batches.eval_windows(tokens, 3, max_windows=0)


def test_eval_batches_pad_the_last_batch():
    tokens = np.arange(11, dtype=np.int32)
    out = list(batches.eval_batches(tokens, batch_size=2, seq_len=3))
    assert len(out) == 2
    np.testing.assert_array_equal(out[0][0], [[0, 1, 2, 3], [3, 4, 5, 6]])
    np.testing.assert_array_equal(out[0][1], [True, True])
    np.testing.assert_array_equal(out[1][0], [[6, 7, 8, 9], [PAD_ID] * 4])
    np.testing.assert_array_equal(out[1][1], [True, False])


def test_sample_prompts_distinct_in_range_and_reproducible():
    p = batches.sample_prompts(_ARANGE, num_prompts=50, prompt_len=10, seed=0, continuation_len=5)
    assert p.tokens.shape == (50, 10) and p.continuations.shape == (50, 5)
    assert len(set(p.offsets.tolist())) == 50 and np.all(np.diff(p.offsets) > 0)
    assert p.offsets.min() >= 0 and p.offsets.max() <= 1000 - 15
    np.testing.assert_array_equal(p.tokens, p.offsets[:, None] + np.arange(10))
    np.testing.assert_array_equal(p.continuations, p.offsets[:, None] + np.arange(10, 15))
    q = batches.sample_prompts(_ARANGE, 50, 10, seed=0, continuation_len=5)
    np.testing.assert_array_equal(p.offsets, q.offsets)
    # Every start is used when asked for all of them.
    small = batches.sample_prompts(np.arange(6), num_prompts=3, prompt_len=4, seed=1)
    np.testing.assert_array_equal(small.offsets, [0, 1, 2])
    with pytest.raises(ValueError, match="num_prompts=4 exceeds the 3 distinct"):
        batches.sample_prompts(np.arange(6), num_prompts=4, prompt_len=4, seed=1)
