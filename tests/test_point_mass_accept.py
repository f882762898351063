"""`point_mass_accept` is the lossless chain rules' outcome for a greedy target, from tokens alone.

Exact checks, no statistics: for a point-mass p the rules decide without chance (proof in
specjax/decoding/rules/point_mass.py), so `speculative_accept` and `block_accept` must return
exactly its tokens and counts for every key and every q, on random cases (any q with mass on the
drafted tokens, drafts that match the target's token with probability 1/2 per position, ragged
`num_drafted`). A planted off-by-one (drafts compared with the target's next token) must fail
the same comparison, and greedy decoders with and without the shortcut emit the same streams.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decoding import SpeculativeDecoder, make_warper
from specjax.decoding.argmax import has_nan
from specjax.decoding.categorical import sample_from_probs
from specjax.decoding.rules import block_accept, point_mass_rule, speculative_accept
from specjax.decoding.rules.point_mass import point_mass_accept
from specjax.decoding.sampling import Greedy, Temperature, TopK, Warper

BATCH, GAMMA, VOCAB = 512, 4, 6


def test_hand_written_rows():
    drafts = jnp.asarray([[5, 7, 9], [5, 7, 9], [1, 2, 3], [5, 7, 9]])
    target = jnp.asarray([[5, 7, 2, 4], [5, 7, 9, 4], [0, 2, 3, 4], [5, 7, 9, 4]])
    tokens, n = point_mass_accept(
        drafts, target, fill_value=-1, num_drafted=jnp.asarray([3, 3, 3, 1])
    )
    assert n.tolist() == [2, 3, 0, 1]
    assert tokens.tolist() == [[5, 7, 2, -1], [5, 7, 9, 4], [0, -1, -1, -1], [5, 7, -1, -1]]
    assert tokens.dtype == jnp.int32 and n.dtype == jnp.int32


def _case(seed: int, ragged: bool, no_mass: bool = False):
    """Random drafts, q (with mass on each draft), a point-mass target and num_drafted; with
    `no_mass`, a tenth of the target's positions have no mass (token -1, an all-zero p row)."""
    rng = np.random.default_rng(seed)
    q = rng.dirichlet(np.full(VOCAB, 0.5), (BATCH, GAMMA))
    q[rng.random((BATCH, GAMMA, VOCAB)) < 0.4] = 0.0  # sparse supports, one-hot q among them
    target = rng.integers(0, VOCAB, (BATCH, GAMMA + 1))
    drafts = np.where(
        rng.random((BATCH, GAMMA)) < 0.5, target[:, :GAMMA], rng.integers(0, VOCAB, (BATCH, GAMMA))
    )
    q[np.arange(BATCH)[:, None], np.arange(GAMMA)[None, :], drafts] += 0.05  # q(x) > 0
    q /= q.sum(-1, keepdims=True)
    if no_mass:
        target[rng.random(target.shape) < 0.1] = -1
    p = np.eye(VOCAB + 1, dtype=np.float32)[target][..., :VOCAB]  # one-hot; -1: all zero
    num = rng.integers(0, GAMMA + 1, BATCH) if ragged else None
    as_j = lambda x: None if x is None else jnp.asarray(x)  # noqa: E731
    return (
        as_j(drafts.astype(np.int32)),
        jnp.asarray(q, jnp.float32),
        jnp.asarray(p),
        jnp.asarray(target),
        as_j(num),
    )


@functools.cache
def _jitted(rule):
    """The rule under jit, one wrapper per rule, so every seed reuses its programs.

    Under jit: the rules refuse a concrete all-zero p row, but run on one when traced."""
    return jax.jit(lambda k, d, q, p, n: rule(k, d, q, p, fill_value=-1, num_drafted=n))


def _agrees(rule, shortcut, seed: int, ragged: bool, no_mass=False, point_q=False) -> bool:
    drafts, q, p, target, num = _case(seed, ragged, no_mass)
    q = None if point_q else q  # a deterministic draft: q is a point mass on each token
    want_t, want_n = shortcut(drafts, target, fill_value=-1, num_drafted=num)
    got_t, got_n = _jitted(rule)(jax.random.key(seed), drafts, q, p, num)
    return bool(np.array_equal(got_t, want_t) and np.array_equal(got_n, want_n))


@pytest.mark.parametrize("rule", [speculative_accept, block_accept], ids=["tokenwise", "block"])
@pytest.mark.parametrize("ragged", [False, True], ids=["gamma", "ragged"])
def test_the_rules_equal_it_on_one_hot_targets(rule, ragged):
    assert point_mass_rule(rule) is point_mass_accept
    for seed in range(4):  # 4 x 512 rows; every count 0..gamma occurs in each
        assert _agrees(rule, point_mass_accept, seed, ragged), seed
    _, _, _, target, num = _case(0, ragged)
    n = point_mass_accept(_case(0, ragged)[0], target, num_drafted=num)[1]
    assert set(np.asarray(n).tolist()) == set(range(GAMMA + 1))


@pytest.mark.parametrize("rule", [speculative_accept, block_accept], ids=["tokenwise", "block"])
def test_the_rules_equal_it_with_point_mass_q_and_targets_without_mass(rule):
    # No mass at a target position (its logits all -inf, or NaN at the argmax; NaN rows are
    # also flagged in nan_rows): the rules reject every draft there and emit 0.
    for seed in range(2):
        assert _agrees(rule, point_mass_accept, seed, ragged=True, point_q=True), seed
        assert _agrees(rule, point_mass_accept, seed, ragged=True, no_mass=True), seed


def _off_by_one(drafts, target, *, fill_value, num_drafted):
    """Planted bug: drafts compared with the target's token one position later."""
    shifted = jnp.concatenate([target[:, 1:], target[:, -1:]], axis=1)
    return point_mass_accept(drafts, shifted, fill_value=fill_value, num_drafted=num_drafted)


def test_a_planted_off_by_one_is_caught():
    assert not _agrees(speculative_accept, _off_by_one, 0, ragged=False)


def test_the_lossy_rules_and_user_rules_have_no_shortcut():
    from specjax.decoding.rules import accept_rule

    assert point_mass_rule(accept_rule("lenient:0.5")) is None
    assert point_mass_rule(lambda *a, **k: None) is None


def test_wrong_shapes_name_the_argument():
    with pytest.raises(ValueError, match="target_tokens"):
        point_mass_accept(jnp.zeros((2, 3), jnp.int32), jnp.zeros((2, 3), jnp.int32))
    with pytest.raises(ValueError, match="num_drafted"):
        point_mass_accept(
            jnp.zeros((2, 3), jnp.int32),
            jnp.zeros((2, 4), jnp.int32),
            num_drafted=jnp.zeros(3, jnp.int32),
        )


# ----------------------------------------------------------------------------- the warper's side


def test_greedy_tokens_is_what_sampling_the_one_hot_returns():
    logits = jax.random.randint(jax.random.key(0), (64, 50), 0, 4).astype(jnp.float32)  # ties
    logits = logits.at[0].set(-jnp.inf).at[1, 7].set(jnp.inf).at[2, 3].set(jnp.nan)
    logits = logits.at[3].set(jnp.nan).at[4, 9].set(-jnp.inf)
    for warper in (make_warper(0.0), Warper((Temperature(0.5), TopK(3), Greedy()))):
        want = sample_from_probs(jax.random.key(1), warper.probs(logits))
        np.testing.assert_array_equal(warper.greedy_tokens(logits), want)
        np.testing.assert_array_equal(warper.sample(jax.random.key(2), logits), want)
        # draw's law is Greedy's one-hot, all zero where the row has no mass (row 0), and NaN
        # across a row whose logits hold NaN (rows 2 and 3), so a NaN draft shows in q.
        q = np.asarray(warper.draw(jax.random.key(3), logits)[1])
        assert np.isnan(q[2:4]).all() and not np.isnan(np.delete(q, [2, 3], axis=0)).any()
        np.testing.assert_array_equal(
            np.delete(q, [2, 3], axis=0), np.delete(warper.probs(logits), [2, 3], axis=0)
        )
    assert make_warper(0.0).greedy_tokens(logits)[:4].tolist() == [0, 7, 0, 0]


def test_greedy_tokens_needs_a_chain_ending_in_greedy():
    with pytest.raises(ValueError, match="greedy_tokens"):
        make_warper(1.0).greedy_tokens(jnp.zeros((2, 5)))
    assert not Warper((Greedy(), Temperature(2.0))).ends_greedy


def test_has_nan_is_isnan_any():
    x = jax.random.normal(jax.random.key(3), (6, 3, 40))
    x = (
        x.at[0, 1, 5]
        .set(jnp.nan)
        .at[1]
        .set(jnp.inf)
        .at[2, 0]
        .set(-jnp.inf)
        .at[3, 2, 39]
        .set(jnp.nan)
    )
    x = x.at[4, 0, 0].set(jnp.inf).at[4, 0, 1].set(-jnp.inf)
    for f in (has_nan, jax.jit(has_nan, static_argnums=1)):
        np.testing.assert_array_equal(f(x, -1), jnp.isnan(x).any(-1))
        np.testing.assert_array_equal(f(x, (1, 2)), jnp.isnan(x).any((1, 2)))
    assert has_nan(x, axis=(1, 2)).tolist() == [True, False, False, True, False, False]


# ----------------------------------------------------------------------------- decoders


def _without_shortcut(*args, **kwargs):
    """`speculative_accept` without its point-mass marker: the decoder runs it on one-hot p."""
    return speculative_accept(*args, **kwargs)


_without_shortcut.lossless = True


def test_greedy_decoders_emit_the_same_with_and_without_the_shortcut():
    import decoding_setup as ds  # tests/decoding_setup.py

    drafts = ds.drafts()
    for name in (
        "noisy_self",
        "bigram",
        "prompt_lookup",
    ):  # a model draft, a table, a Drafter-less LM
        draft, d_params = drafts[name]
        runs = []
        for accept in (speculative_accept, _without_shortcut):
            decoder = dataclasses.replace(ds.spec_decoder(draft), accept=accept)
            runs.append(
                decoder.generate(
                    ds.target_params(), d_params, prompts=ds.PROMPTS, key=jax.random.key(0),
                    max_new_tokens=ds.MAX_NEW,
                )
            )  # fmt: skip
        np.testing.assert_array_equal(runs[0].tokens, runs[1].tokens, err_msg=name)
        np.testing.assert_array_equal(runs[0].lengths, runs[1].lengths, err_msg=name)
        stats = [jax.tree.leaves(r.stats) for r in runs]
        for leaf_a, leaf_b in zip(*stats, strict=True):
            np.testing.assert_array_equal(leaf_a, leaf_b, err_msg=name)
        assert int(np.asarray(runs[0].stats.accepted_at).sum()) > 0, name  # drafts were kept


def test_a_subclass_that_replaces_verify_keeps_it_at_temperature_zero():
    import decoding_setup as ds

    calls = []

    @dataclasses.dataclass(frozen=True)
    class Spy(SpeculativeDecoder):
        def verify(self, key, proposal, p):
            calls.append(p.shape)
            return super().verify(key, proposal, p)

    draft, d_params = ds.drafts()["bigram"]
    base = ds.spec_decoder(draft)
    spy = Spy(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)})
    assert base.point_mass_accept is point_mass_accept  # greedy, tokenwise: a shortcut exists
    assert spy.point_mass_accept is None  # ... but the replaced verify decides
    assert spy.verify_point_mass(None, None) is None
    args = (ds.target_params(), d_params)
    kwargs = dict(prompts=ds.PROMPTS[:1], key=jax.random.key(0), max_new_tokens=4)
    out = spy.generate(*args, **kwargs)
    assert calls and calls[0][-1] == ds.V
    np.testing.assert_array_equal(out.tokens, base.generate(*args, **kwargs).tokens)
