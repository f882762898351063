"""Sampling warpers: exact probability vectors from hand-written logits, validation, static-arg use.

Logits are written as log(weights), so a warper's exact output is a hand-computable ratio of
weights: temperature T turns weights w into w^(1/T), top-k/top-p zero some weights, and the result
is renormalised. Comparisons use float32 tolerance (softmax runs in float32).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from specjax.decoding import Greedy, Temperature, TopK, TopP, Warper, make_warper, sample_from_probs
from specjax.decoding.sampling import MIN_TEMPERATURE


def _logits(weights) -> jax.Array:
    return jnp.log(jnp.asarray(weights, jnp.float32))


def _probs(weights) -> np.ndarray:
    w = np.asarray(weights, np.float64)
    return w / w.sum()


def _assert_probs(actual, expected):
    actual = np.asarray(actual)
    assert actual.dtype == np.float32
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-7)


# ----------------------------------------------------------------------------- temperature


@pytest.mark.parametrize(
    "temperature, expected",
    [
        (1.0, [1, 4, 9, 16]),
        (0.5, [1, 16, 81, 256]),  # w^2
        (2.0, [1, 2, 3, 4]),  # sqrt(w)
    ],
)
def test_temperature(temperature, expected):
    probs = make_warper(temperature=temperature).probs(_logits([1, 4, 9, 16]))
    _assert_probs(probs, _probs(expected))


def test_temperature_warper_divides_logits():
    out = Temperature(4.0)(jnp.asarray([4.0, -8.0, 2.0]))
    np.testing.assert_array_equal(np.asarray(out), [1.0, -2.0, 0.5])


# ----------------------------------------------------------------------------- top-k


@pytest.mark.parametrize(
    "top_k, expected",
    [
        (1, [0, 0, 4, 0]),
        (2, [3, 0, 4, 0]),
        (3, [3, 0, 4, 2]),
        (4, [3, 1, 4, 2]),
        (100, [3, 1, 4, 2]),  # k >= vocab keeps everything
    ],
)
def test_top_k(top_k, expected):
    _assert_probs(make_warper(top_k=top_k).probs(_logits([3, 1, 4, 2])), _probs(expected))


def test_top_k_keeps_all_ties_with_the_kth_value():
    # Weights [1, 2, 2, 4], k = 2: the k-th largest value 2 is tied, both copies are kept.
    _assert_probs(make_warper(top_k=2).probs(_logits([1, 2, 2, 4])), _probs([0, 2, 2, 4]))
    # k = 1 with a tied maximum keeps both maxima (unlike Greedy, which keeps the first).
    _assert_probs(make_warper(top_k=1).probs(_logits([3, 1, 3, 2])), _probs([3, 0, 3, 0]))


def test_top_k_masks_with_minus_infinity():
    out = np.asarray(TopK(2)(jnp.asarray([0.5, 3.0, -1.0, 2.0])))
    np.testing.assert_array_equal(out, [-np.inf, 3.0, -np.inf, 2.0])


# ----------------------------------------------------------------------------- top-p


@pytest.mark.parametrize(
    "top_p, expected",
    [
        # Sorted probabilities 0.4, 0.3, 0.2, 0.1 (tokens 1, 3, 2, 0); cumulative 0.4, 0.7, 0.9.
        (0.3, [0, 1, 0, 0]),
        (0.65, [0, 4, 0, 3]),
        (0.85, [0, 4, 2, 3]),
        (0.95, [1, 4, 2, 3]),
        (1.0, [1, 4, 2, 3]),
    ],
)
def test_top_p(top_p, expected):
    probs = make_warper(top_p=top_p).probs(_logits([0.1, 0.4, 0.2, 0.3]))
    _assert_probs(probs, _probs(expected))


def test_top_p_boundary_mass_exactly_reaching_top_p():
    # Powers of two are exact in float32: the top two tokens reach exactly 0.75, which is the
    # smallest set whose mass reaches top_p, so the third token is excluded.
    logits = _logits([0.125, 0.5, 0.125, 0.25])
    assert np.cumsum(np.sort(np.asarray(jax.nn.softmax(logits)))[::-1])[1] == 0.75  # exact
    _assert_probs(make_warper(top_p=0.75).probs(logits), _probs([0, 2, 0, 1]))
    # Just above the boundary the next token is needed as well (first index among the 0.125 ties).
    _assert_probs(make_warper(top_p=0.7500001).probs(logits), _probs([1, 4, 0, 2]))
    # Four equal tokens (exactly 0.25 each) and top_p = 0.5: the first two indices.
    _assert_probs(make_warper(top_p=0.5).probs(jnp.zeros(4)), _probs([1, 1, 0, 0]))


def test_top_p_keeps_what_a_sort_by_hand_keeps_on_batched_rows_with_ties():
    # The reference: numpy's stable sort of -probs, the float32 mass before each token in that
    # order, and the kept set mapped back by the inverse permutation. Logits from a coarse grid,
    # so rows hold ties at the boundary; leading dims [2, 3].
    rng = np.random.default_rng(4)
    logits = rng.choice(np.linspace(-2.0, 2.0, 9), size=(2, 3, 50)).astype(np.float32)
    for top_p in (0.3, 0.5, 0.9):
        got = np.asarray(jax.jit(TopP(top_p))(jnp.asarray(logits)))
        probs = np.asarray(jax.nn.softmax(jnp.asarray(logits), axis=-1))
        order = np.argsort(-probs, axis=-1, kind="stable")
        sorted_probs = np.take_along_axis(probs, order, axis=-1)
        before = np.asarray(jnp.cumsum(jnp.asarray(sorted_probs), axis=-1)) - sorted_probs
        keep = np.zeros(probs.shape, bool)
        np.put_along_axis(keep, order, before < top_p, axis=-1)
        np.testing.assert_array_equal(np.isfinite(got), keep)
        np.testing.assert_array_equal(got[keep], logits[keep])


def _kept_by_hand(probs: np.ndarray, top_p: float) -> np.ndarray:
    """The nucleus by numpy's stable sort of each whole row (float32 cumulative mass)."""
    order = np.argsort(-probs, axis=-1, kind="stable")
    sorted_probs = np.take_along_axis(probs, order, axis=-1)
    before = np.asarray(jnp.cumsum(jnp.asarray(sorted_probs), axis=-1)) - sorted_probs
    keep = np.zeros(probs.shape, bool)
    np.put_along_axis(keep, order, before < top_p, axis=-1)
    return keep


def _tier_rows(rng, vocab: int) -> np.ndarray:
    """[12, vocab] float32 logits whose nuclei range from a few tokens to most of the row; every
    third row is rounded to a coarse grid, so ties sit at the boundary."""
    scales = np.geomspace(0.05, 12.0, 12)[:, None]
    logits = (rng.standard_normal((12, vocab)) * scales).astype(np.float32)
    logits[::3] = np.round(logits[::3] * 2) / 2
    return logits


@pytest.mark.parametrize("top_p", [0.3, 0.9, 0.97])
def test_top_p_tiers_keep_what_a_whole_sort_keeps(top_p):
    # TopP looks at the k most likely tokens of the smallest tier that covers every row's
    # nucleus and sorts whole rows only past the last tier. Small tiers over a vocab of 160, so
    # each branch runs: the first tier, the second, and the sort (asserted below, on the host).
    from specjax.decoding import sampling

    tiers = (8, 40)
    rng = np.random.default_rng(11)
    nucleus = jax.jit(lambda p: sampling._nucleus(p, top_p, tiers))
    branches = set()
    for _ in range(6):
        logits = _tier_rows(rng, 160)
        for rows in (logits[i : i + 3] for i in range(0, 12, 3)):  # batches of 3 rows
            probs = np.asarray(jax.nn.softmax(jnp.asarray(rows), axis=-1))
            mass = [np.sort(probs, -1)[:, ::-1][:, :k].sum(-1).min() for k in tiers]
            branches.add(
                next((k for k, m in zip(tiers, mass, strict=True) if m >= top_p + 2e-4), "sort")
            )
            got = np.asarray(nucleus(jnp.asarray(probs)))
            np.testing.assert_array_equal(got, _kept_by_hand(probs, top_p))
    assert branches == {8, 40, "sort"}


def test_top_p_tiers_at_a_real_vocabulary():
    # The shipped tiers (1,024 and 4,096 tokens) at 49,152 entries: one peaked batch (the first
    # tier covers it), one with a row whose nucleus holds ~2,500 tokens (the second), one flat
    # (the sort).
    from specjax.decoding import sampling

    rng = np.random.default_rng(12)
    vocab = 49_152
    base = rng.standard_normal((3, vocab)).astype(np.float32)
    cases = {
        sampling.NUCLEUS_TIERS[0]: base * 8.0,
        sampling.NUCLEUS_TIERS[1]: np.concatenate([base[:2] * 8.0, base[2:] * 3.0]),
        "sort": base * 0.5,
    }
    warp = jax.jit(TopP(0.9))
    for tier, logits in cases.items():
        probs = np.asarray(jax.nn.softmax(jnp.asarray(logits), axis=-1))
        mass = [np.sort(probs, -1)[:, ::-1][:, :k].sum(-1).min() for k in sampling.NUCLEUS_TIERS]
        covers = [k for k, m in zip(sampling.NUCLEUS_TIERS, mass, strict=True) if m >= 0.9 + 2e-4]
        assert (covers or ["sort"])[0] == tier, mass  # the case runs the branch it is named after
        got = np.asarray(warp(jnp.asarray(logits)))
        np.testing.assert_array_equal(np.isfinite(got), _kept_by_hand(probs, 0.9))


def test_top_p_tier_test_catches_a_tier_that_decides_for_rows_it_does_not_cover(monkeypatch):
    # Negative control: a tier that always decides (no coverage check) keeps too few tokens of
    # the rows whose nucleus reaches past it, and the comparison above must see that.
    from specjax.decoding import sampling

    monkeypatch.setattr(sampling, "_PREFILTER_MARGIN", -2.0)  # every tier "covers" every row
    logits = _tier_rows(np.random.default_rng(13), 160)
    probs = np.asarray(jax.nn.softmax(jnp.asarray(logits), axis=-1))
    got = np.asarray(jax.jit(lambda p: sampling._nucleus(p, 0.9, (8, 40)))(jnp.asarray(probs)))
    assert not np.array_equal(got, _kept_by_hand(probs, 0.9))


def test_top_p_after_top_k_leads_with_top_k_and_still_sees_ties_past_it():
    # make_warper's TopP first looks at top_k tokens. TopK keeps every tie of the k-th value, so
    # here 7 tokens survive top_k = 3 (weights 4 and six 1s, mass 0.4 and 0.1 each) and the
    # nucleus at 0.85 holds 6 of them: the first tier (mass 0.6) does not cover it and the next
    # one decides.
    warper = make_warper(1.0, top_k=3, top_p=0.85)
    assert warper.warpers[-1].tiers[0] == 3
    logits = _logits([1, 1, 0.5, 4, 1, 1, 1, 0.25, 1, 0.5] + [0.01] * 1100)
    want = np.zeros(1110)
    want[[0, 1, 3, 4, 5, 6]] = [1, 1, 4, 1, 1, 1]  # the mass before the 7th (index 8) is 0.9
    _assert_probs(jax.jit(warper.probs)(logits), want / want.sum())
    assert make_warper(1.0, top_k=5000, top_p=0.9).warpers[-1].tiers == (1024, 4096)


@pytest.mark.parametrize(
    "tiers, message",
    [((0, 8), "integers >= 1"), ((8, 8), "increase strictly"), ((64, 8), "increase"), (8, "tuple")],
)
def test_top_p_rejects_bad_tiers(tiers, message):
    with pytest.raises(ValueError, match=f"TopP.tiers.*{message}"):
        TopP(0.9, tiers)


def test_top_p_tiny_keeps_only_the_argmax():
    _assert_probs(make_warper(top_p=1e-9).probs(_logits([0.2, 0.3, 0.4, 0.1])), [0, 0, 1, 0])


def test_top_p_one_is_the_identity():
    logits = jnp.asarray([0.3, -1.0, 2.0, 0.0])
    np.testing.assert_array_equal(np.asarray(TopP(1.0)(logits)), np.asarray(logits))


def test_top_p_per_row():
    logits = jnp.stack([_logits([0.1, 0.4, 0.2, 0.3]), _logits([0.7, 0.1, 0.1, 0.1])])
    expected = np.stack([_probs([0, 4, 0, 3]), _probs([1, 0, 0, 0])])
    _assert_probs(make_warper(top_p=0.65).probs(logits), expected)


# ----------------------------------------------------------------------------- greedy


def test_greedy_is_one_hot_of_first_argmax():
    probs = make_warper(temperature=0).probs(jnp.asarray([[1.0, 3.0, 3.0, 2.0], [5.0, 0, 0, 5.0]]))
    np.testing.assert_array_equal(np.asarray(probs), [[0, 1, 0, 0], [1, 0, 0, 0]])
    assert np.asarray(probs).dtype == np.float32
    assert make_warper(temperature=0).is_greedy
    assert not make_warper(temperature=0.5).is_greedy


def test_greedy_ignores_top_k_and_top_p():
    warper = make_warper(temperature=0, top_k=3, top_p=0.5)
    assert warper == Warper((Greedy(),))


def test_greedy_sample_is_the_argmax():
    logits = jnp.asarray([[0.0, 9.0, 9.0, 1.0]] * 8)
    tokens = make_warper(temperature=0).sample(jax.random.key(0), logits)
    np.testing.assert_array_equal(np.asarray(tokens), [1] * 8)


# ----------------------------------------------------------------------------- composition


def test_chain_order_is_temperature_then_top_k_then_top_p():
    warper = make_warper(temperature=0.5, top_k=3, top_p=0.6)
    assert warper.warpers == (Temperature(0.5), TopK(3), TopP(0.6, (3, 1024, 4096)))
    # Weights [1, 2, 3, 4] -> temperature 0.5 -> [1, 4, 9, 16] -> top-3 -> [0, 4, 9, 16] (mass
    # 4/29, 9/29, 16/29) -> top-p 0.6: 16/29 = 0.55 < 0.6 so 9 is kept too -> [0, 0, 9, 16].
    _assert_probs(warper.probs(_logits([1, 2, 3, 4])), _probs([0, 0, 9, 16]))


def test_top_p_sees_the_tempered_distribution():
    # Weights [1, 2, 3, 4], temperature 0.5, top_p 0.8. Tempered first: [1, 4, 9, 16] / 30, top
    # two reach 25/30 >= 0.8 -> [0, 0, 9, 16]. (Top-p first would keep three tokens.)
    warper = make_warper(temperature=0.5, top_p=0.8)
    _assert_probs(warper.probs(_logits([1, 2, 3, 4])), _probs([0, 0, 9, 16]))
    reversed_order = Warper((TopP(0.8), Temperature(0.5)))
    _assert_probs(reversed_order.probs(_logits([1, 2, 3, 4])), _probs([0, 4, 9, 16]))


def test_top_p_sees_the_top_k_renormalised_distribution():
    # Weights [1, 2, 3, 4], top_k 2, top_p 0.55: after top-k, 4/7 = 0.571 >= 0.55 -> only token 3.
    # (Top-p on the original 0.4 < 0.55 would keep token 2 as well.)
    _assert_probs(make_warper(top_k=2, top_p=0.55).probs(_logits([1, 2, 3, 4])), [0, 0, 0, 1])


def test_make_warper_defaults_are_the_identity():
    assert make_warper() == Warper(())
    assert make_warper(temperature=1.0, top_k=None, top_p=1.0) == Warper(())
    assert make_warper(top_k=0) == Warper(())
    _assert_probs(make_warper().probs(_logits([1, 2, 3, 4])), _probs([1, 2, 3, 4]))


# ----------------------------------------------------------------------------- dtypes


def test_bfloat16_logits_give_float32_probs_summing_to_one():
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(3, 5, 50)), jnp.bfloat16)
    for warper in (
        make_warper(),
        make_warper(temperature=0.7, top_k=10, top_p=0.9),
        make_warper(temperature=0),
    ):
        probs = np.asarray(warper.probs(logits))
        assert probs.dtype == np.float32
        assert probs.shape == (3, 5, 50)
        np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-6)
    greedy = np.asarray(make_warper(temperature=0).probs(logits))
    np.testing.assert_array_equal(greedy.argmax(-1), np.asarray(jnp.argmax(logits, -1)))
    np.testing.assert_array_equal(greedy.sum(-1), 1.0)  # exactly one-hot


# ----------------------------------------------------------------------------- static argument


def test_warpers_are_frozen_and_hashable():
    a = make_warper(temperature=0.8, top_k=40, top_p=0.95)
    b = make_warper(temperature=0.8, top_k=40, top_p=0.95)
    assert a == b and hash(a) == hash(b)
    assert a != make_warper(temperature=0.8, top_k=41, top_p=0.95)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.warpers = ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.warpers[0].temperature = 1.0
    assert Warper([TopK(2)]).warpers == (TopK(2),)  # lists become tuples: hashable


def test_warper_is_a_jit_static_argument():
    traces = []

    def probs_fn(logits, warper):
        traces.append(warper)  # runs once per trace
        return warper.probs(logits)

    probs = jax.jit(probs_fn, static_argnums=1)
    logits = _logits([1, 2, 3, 4])
    first = probs(logits, make_warper(temperature=0.5, top_k=3))
    again = probs(logits * 2, make_warper(temperature=0.5, top_k=3))  # equal warper: cached
    assert len(traces) == 1
    _assert_probs(first, _probs([0, 4, 9, 16]))
    _assert_probs(again, _probs([0, 16, 81, 256]))
    probs(logits, make_warper(temperature=0.5, top_k=2))  # different warper: new trace
    assert len(traces) == 2


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": math.nan}, "temperature"),
        ({"temperature": math.inf}, "temperature"),
        ({"temperature": "1"}, "temperature"),
        ({"top_k": -1}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_k": 2.0}, "top_k"),
        ({"top_k": True}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": -0.5}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_p": math.nan}, "top_p"),
        ({"temperature": True}, "temperature"),
        ({"top_p": True}, "top_p"),
        ({"temperature": 1e-10}, r"temperature must be 0 \(greedy\) or >= 0.0001"),
        ({"temperature": 9.9e-5}, r"temperature must be 0 \(greedy\) or >= 0.0001"),
        ({"temperature": np.array([0.7])}, "temperature"),  # one value, not an array of them
        ({"top_k": jnp.array(True)}, "top_k"),
    ],
)
def test_make_warper_rejects_invalid_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_warper(**kwargs)


def test_make_warper_reads_zero_dimensional_arrays_as_their_value():
    # A 0-d array was refused as "not a finite number >= 0", which is false for 0.7.
    got = make_warper(jnp.array(0.5), top_k=np.array(3), top_p=jnp.array(0.5))
    assert got == make_warper(0.5, top_k=3, top_p=0.5)
    assert make_warper(np.array(0.0)) == make_warper(0.0)


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: Temperature(0.0), "temperature"),
        (lambda: Temperature(-1.0), "temperature"),
        (lambda: Temperature(math.nan), "temperature"),
        (lambda: TopK(0), "top_k"),
        (lambda: TopK(3.0), "top_k"),
        (lambda: TopP(0.0), "top_p"),
        (lambda: TopP(1.01), "top_p"),
    ],
)
def test_warper_constructors_reject_invalid_settings(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_the_smallest_temperature_gives_finite_compiled_probabilities():
    # Below MIN_TEMPERATURE compiled softmax overflows (XLA scales by 1/T in one fusion and
    # divides by T in another): on these logits (|x| up to ~120), jit(probs) held NaN from
    # T = 1e-8 down, at vocab 5 and 64 alike (measured; 1e-10 at |x| ~ 1). At the floor, four
    # orders of magnitude above, they stay finite, sum to 1 and peak at the argmax, also at 10x
    # the logits.
    for vocab in (5, 64):
        logits = 40.0 * jax.random.normal(jax.random.PRNGKey(vocab), (16, vocab))
        for scale in (1.0, 10.0):
            probs = jax.jit(make_warper(MIN_TEMPERATURE).probs)(scale * logits)
            assert bool(jnp.all(jnp.isfinite(probs))), (vocab, scale)
            np.testing.assert_array_equal(jnp.argmax(probs, -1), jnp.argmax(logits, -1))
            np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)


def test_make_warper_accepts_numpy_scalars():
    warper = make_warper(temperature=np.float32(0.5), top_k=np.int64(3), top_p=np.float64(0.9))
    assert warper == make_warper(temperature=0.5, top_k=3, top_p=0.9)


def test_warper_chain_rejects_non_callables():
    with pytest.raises(TypeError, match="warpers"):
        Warper((0.5,))


# ----------------------------------------------------------------------------- sample_from_probs


def test_sample_from_probs_never_draws_zero_weights_and_matches_the_weights():
    # Unnormalised weights with zeros; 2^17 draws. chi-square threshold p-value 1e-6 is the only
    # statistical check in this file: false-failure probability <= 1e-6.
    weights = jnp.asarray([0.0, 3.0, 0.0, 1.0, 4.0, 0.0], jnp.float32)
    tokens = np.asarray(
        sample_from_probs(jax.random.key(42), jnp.broadcast_to(weights, (1 << 17, 6)))
    )
    assert tokens.dtype == np.int32
    counts = np.bincount(tokens, minlength=6)
    assert counts[[0, 2, 5]].sum() == 0
    expected = (1 << 17) * np.array([3, 1, 4]) / 8
    statistic = ((counts[[1, 3, 4]] - expected) ** 2 / expected).sum()
    assert stats.chi2.sf(statistic, 2) > 1e-6, counts
