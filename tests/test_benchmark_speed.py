"""The speed benchmarks' bookkeeping: overhead breakdown and batch table (no timings asserted).

Tiny random models; what is checked is what the functions compute from their timings (ovh is
the iteration minus the model calls, the speedup is the ratio of the two throughputs, tokens per
iteration lie in [1, γ + 1]) and how they reject bad arguments.
"""

import decoding_setup as ds
import pytest

from specjax.benchmark.batch import BatchRow, batch_table, break_even
from specjax.benchmark.overhead import overhead_breakdown


def _row(batch, speedup):
    return BatchRow(batch, 1.0, speedup, speedup, None, None, 1.0, 1.0, 1.0, 1.0, 0.0, 1, 1)


def test_break_even_is_the_first_batch_that_loses():
    assert break_even([_row(1, 1.8), _row(4, 1.2), _row(16, 0.9), _row(64, 0.6)]) == 16
    assert break_even([_row(1, 1.8), _row(4, 1.1)]) is None


def test_batch_table_rejects_bad_arguments():
    draft, dparams = ds.drafts()["bigram"]
    args = (ds.TARGET, ds.target_params(), draft, dparams)
    with pytest.raises(ValueError, match="batches"):
        batch_table(*args, list(ds.PROMPTS), ds.SAMPLING, 2, batches=(0, 2), log=None)
    with pytest.raises(ValueError, match="prompts"):
        batch_table(*args, list(ds.PROMPTS)[:1], ds.SAMPLING, 2, batches=(1, 2), log=None)


def test_batch_table_rows_are_consistent():
    draft, dparams = ds.drafts()["bigram"]
    prompts = list(ds.PROMPTS)
    rows = batch_table(
        ds.TARGET,
        ds.target_params(),
        draft,
        dparams,
        prompts,
        ds.SAMPLING,
        2,
        batches=(1, len(prompts)),
        max_new_tokens=8,
        cache_len=ds.CACHE_LEN,
        repeats=2,
        log=None,
    )
    assert [r.batch for r in rows] == [1, len(prompts)]
    for r in rows:
        assert r.speedup == pytest.approx(r.spec_tokens_per_s / r.ar_tokens_per_s)
        assert r.speedup_low <= r.speedup_high
        assert r.emitted == r.batch * 8  # no EOS: every row emits max_new_tokens
        # γ = 2: 1 to 3 tokens per row-iteration, and the row's ratio is the counts' ratio.
        assert r.emitted / 3 <= r.row_iterations <= r.emitted
        assert r.tokens_per_iteration == r.emitted / r.row_iterations
        assert r.verify_ratio == pytest.approx(r.t_target_verify_ms / r.t_target_1_ms)
        assert r.row_spread >= 0.0
    assert rows[0].row_spread == 0.0  # one row: nothing ragged


def test_overhead_breakdown_is_the_iteration_minus_its_model_calls():
    draft, dparams = ds.drafts()["transformer"]
    decoder = ds.spec_decoder(draft, ds.SAMPLING, gamma=2)
    b = overhead_breakdown(decoder, (ds.target_params(), dparams), list(ds.PROMPTS)[:1], repeats=1)
    assert b["calls"] == pytest.approx(b["t_verify"] + 2 * b["t_draft"])
    assert b["ovh"] == pytest.approx(b["iteration"] - b["calls"])  # one round: no median
    assert b["ovh_share"] == pytest.approx(b["ovh"] / b["t_target_1"])
    assert b["ovh_share_mean"] == pytest.approx(b["ovh_share"])  # one round: mean = median
    assert b["t_draft"] > 0 and b["ar_ratio"] == pytest.approx(b["ar_iteration"] / b["t_target_1"])
    expected = {"target warp (γ+1 rows)", "acceptance rule", "draft draw (per step)"}
    assert expected <= set(b["pieces"]) and all(v > 0 for v in b["pieces"].values())


def test_a_greedy_decoders_pieces_are_its_point_mass_path():
    from specjax.benchmark.costs import loop_start
    from specjax.benchmark.overhead import _pieces

    draft, dparams = ds.drafts()["transformer"]
    decoder = ds.spec_decoder(draft, ds.GREEDY, gamma=2)
    state = loop_start(decoder, (ds.target_params(), dparams), list(ds.PROMPTS)[:1])
    names = set(_pieces(decoder, state, model_draft=True))
    assert {"target argmax (γ+1 rows)", "acceptance rule (point mass)"} <= names
    assert "target warp (γ+1 rows)" not in names and "acceptance rule" not in names


def test_sampler_table_times_every_sampler_per_vocabulary():
    from specjax.benchmark.sampler import sampler_table

    rows = sampler_table((6, 300), draws=2, repeats=1)
    assert [(r["vocab"], r["block"]) for r in rows] == [(6, 2), (300, 16)]
    for r in rows:
        assert all(r[k] > 0 for k in ("categorical", "two_level", "argmax", "first_argmax"))
