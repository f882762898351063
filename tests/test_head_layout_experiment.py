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
