"""experiments/real/head_layout.py on a tiny packed target: both layouts decode, their tokens
agree with each other and with AR at t = 0, and every row is filled in."""

import math

import numpy as np

from experiments.real.head_layout import format_head_layout, head_layout_table
from specjax.decoding import DynamicTree
from specjax.models import with_matmul
from specjax.testing import tiny_llama


def test_head_layout_table_rows_and_tokens():
    target, params = with_matmul(*tiny_llama(40, 2, embed=32), "packed")
    prompts = [np.array([3, 5, 7], np.int32), np.array([9, 1], np.int32)]
    table = head_layout_table(
        target, params, prompts, gamma=2, dynamic=[DynamicTree(2, 2, 4)], draft_vocab=16,
        max_new_tokens=4, rounds=2, cache_len=32,
    )  # fmt: skip
    rows = table["rows"]
    assert [(r["head"], r["structure"]) for r in rows] == [
        ("EAGLE-1", "chain γ=2"),
        ("EAGLE-1", "dynamic tree 2-2-4"),
        ("EAGLE-3 over 16 tokens", "chain γ=2"),
        ("EAGLE-3 over 16 tokens", "dynamic tree 2-2-4"),
    ]
    for r in rows:
        assert r["same_tokens"], r
        assert r["packed_iterations"] == r["iterations"]  # the same tokens at t = 0
        assert 2 <= r["iterations"] <= 8  # 4 tokens per prompt, at least one per iteration
        assert r["xla_ms"] > 0 and r["packed_ms"] > 0 and r["interval"] is not None
        assert math.isclose(r["break_even_packed"] / r["break_even_xla"], r["ratio"])
    text = format_head_layout(table, 0.0)
    assert text.count("\n| EAGLE") == 4 and "ms/token" in text


def test_trained_heads_are_timed_as_given_and_other_drafts_refused():
    """`heads=` replaces the random heads; the speedups are AR time / decoder time."""
    import jax
    import pytest

    from specjax.models import EagleHead

    target, params = with_matmul(*tiny_llama(40, 2, embed=32), "packed")
    head = EagleHead(target)
    head_params = head.init_params(jax.random.PRNGKey(3))
    prompts = [np.array([3, 5, 7], np.int32)]
    table = head_layout_table(
        target, params, prompts, gamma=2, heads={"mine": (head, head_params)},
        max_new_tokens=4, rounds=2, cache_len=32,
    )  # fmt: skip
    [row] = table["rows"]
    assert (row["head"], row["structure"]) == ("mine", "chain γ=2")
    assert row["same_tokens"] and 1.0 <= row["tokens_per_iteration"] <= 3.0
    ar_ms = table["ar_ms_per_token"]
    assert math.isclose(row["speedup_xla"], row["tokens_per_iteration"] * ar_ms / row["xla_ms"])
    assert row["speedup_packed_interval"] is not None
    packed = head.with_matmul(head_params, "packed")
    with pytest.raises(ValueError, match=r"heads\['p'\] must be an EagleHead in the xla layout"):
        head_layout_table(target, params, prompts, heads={"p": packed}, max_new_tokens=4)
