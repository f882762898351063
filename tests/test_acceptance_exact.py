"""Exact outputs of `speculative_accept` on hand-written distributions, bad input, no retracing.

Every case here is constructed so that the outcome does not depend on the key (probabilities 0 or
1 at each step), and is checked for several keys, eagerly and under jit.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decoding import make_warper, residual_distribution, speculative_accept

KEYS = [jax.random.key(seed) for seed in (0, 1, 2, 12345)]
jit_accept = jax.jit(speculative_accept, static_argnames="fill_value")


def _one_hot(tokens, vocab=8) -> np.ndarray:
    return np.eye(vocab, dtype=np.float32)[np.asarray(tokens)]


def _batch(*rows) -> jax.Array:
    return jnp.asarray(np.stack(rows))


def _assert_outcome(draft_tokens, draft_probs, target_probs, tokens, num_accepted, **kwargs):
    """Checks the exact output for every key jitted, and for the first key eagerly."""
    calls = [(speculative_accept, KEYS[0])] + [(jit_accept, key) for key in KEYS]
    for fn, key in calls:
        out_tokens, out_n = fn(key, draft_tokens, draft_probs, target_probs, **kwargs)
        assert out_tokens.dtype == jnp.int32 and out_n.dtype == jnp.int32
        np.testing.assert_array_equal(np.asarray(out_tokens), tokens)
        np.testing.assert_array_equal(np.asarray(out_n), num_accepted)


# ----------------------------------------------------------------------------- outcomes


def test_forced_accept_emits_all_drafts_and_the_bonus():
    # q = p = one-hot on each drafted token: every draft is accepted; p at the bonus position is a
    # point mass on token 7.
    drafts = _batch([3, 1, 4])
    q = _batch(_one_hot([3, 1, 4]))
    p = _batch(_one_hot([3, 1, 4, 7]))
    _assert_outcome(drafts, q, p, [[3, 1, 4, 7]], [3])


def test_forced_reject_resamples_the_only_residual_token():
    # p(x_1) = 0 rejects x_1 = 0; max(0, p - q) = [0, 0, 0.6, 0, 0] has a single token.
    q = np.array([0.5, 0.5, 0, 0, 0], np.float32)
    p = np.array([0, 0.4, 0.6, 0, 0], np.float32)
    drafts = _batch([0, 1, 1])
    _assert_outcome(drafts, _batch([q, q, q]), _batch([p, p, p, p]), [[2, -1, -1, -1]], [0])


def test_greedy_target_deterministic_draft_stops_at_first_mismatch():
    # Target argmaxes [a, d, e, f] = [5, 2, 6, 0]; drafts [a, b, c] = [5, 3, 1].
    logits = np.full((4, 8), -1.0, np.float32)
    logits[np.arange(4), [5, 2, 6, 0]] = 3.0
    p = make_warper(temperature=0).probs(jnp.asarray(logits))[None]  # [1, 4, 8] one-hot
    _assert_outcome(_batch([5, 3, 1]), None, p, [[5, 2, -1, -1]], [1])


def test_greedy_target_deterministic_draft_all_accepted_plus_bonus():
    p = _batch(_one_hot([5, 2, 6, 0]))
    _assert_outcome(_batch([5, 2, 6]), None, p, [[5, 2, 6, 0]], [3])


def test_zero_draft_probability_with_positive_target_probability():
    # Under jit, where no value is checked (a q that underflowed to 0): min(1, p / q) = 1,
    # accepted without dividing by zero.
    q = np.array([0.5, 0.5, 0, 0, 0], np.float32)
    p = np.array([0, 0, 0.3, 0.7, 0], np.float32)
    bonus = np.array([0, 0, 0, 0, 1], np.float32)
    for key in KEYS:
        out_tokens, out_n = jit_accept(key, _batch([2]), _batch([q]), _batch([p, bonus]))
        np.testing.assert_array_equal(np.asarray(out_tokens), [[2, 4]])
        np.testing.assert_array_equal(np.asarray(out_n), [1])
    # Eagerly the values are there: a token with q(x) = exactly 0 was not drawn from that q, and
    # accepting it whatever p(x) is would bias the output, so it is refused by name.
    with pytest.raises(ValueError, match=r"draft_probs\[0, 0, 2\] = 0 \(1 such entries\)"):
        speculative_accept(KEYS[0], _batch([2]), _batch([q]), _batch([p, bonus]))
    # Past num_drafted a row's entries are padding, not drafts: not checked.
    out_tokens, out_n = speculative_accept(
        KEYS[0], _batch([2]), _batch([q]), _batch([p, bonus]), num_drafted=jnp.array([0])
    )
    np.testing.assert_array_equal(np.asarray(out_n), [0])


def test_identical_p_and_q_accepts_everything_without_nan():
    # p == q: every draft accepted, the residual max(0, p - q) has zero mass (no 0/0).
    row = np.array([0.1, 0.2, 0.3, 0.4, 0, 0, 0, 0], np.float32)
    q = _batch([row, row])
    p = _batch([row, row, _one_hot(6)])
    _assert_outcome(_batch([3, 0]), q, p, [[3, 0, 6]], [2])
    residual = np.asarray(residual_distribution(jnp.asarray(row), jnp.asarray(row)))
    assert np.isfinite(residual).all()
    np.testing.assert_allclose(residual, row)  # falls back to p


def test_bfloat16_inputs():
    drafts = _batch([3, 1, 4])
    q = _batch(_one_hot([3, 1, 4])).astype(jnp.bfloat16)
    p = _batch(_one_hot([3, 6, 4, 7])).astype(jnp.bfloat16)  # p(x_2) = 0: reject at 2
    _assert_outcome(drafts, q, p, [[3, 6, -1, -1]], [1])
    _assert_outcome(drafts, None, p, [[3, 6, -1, -1]], [1])


def test_bfloat16_rows_are_renormalised():
    # Rows summing to 1.5 and 2: as distributions both are [0.5, 0.5, 0, 0], so draft token 0 has
    # p = q and is always accepted. Read as given (u * 1.0 < 0.75) it would be rejected a quarter
    # of the time: 32 rows x 4 keys all accepted has probability 0.75^128 ~ 1e-16 without
    # renormalisation.
    p_row = np.array([0.75, 0.75, 0, 0], np.float32)
    q_row = np.array([1.0, 1.0, 0, 0], np.float32)
    bonus = np.array([0, 0, 0.75, 0], np.float32)
    p = jnp.asarray(np.broadcast_to([p_row, bonus], (32, 2, 4)), jnp.bfloat16)
    q = jnp.asarray(np.broadcast_to([q_row], (32, 1, 4)), jnp.bfloat16)
    _assert_outcome(jnp.zeros((32, 1), jnp.int32), q, p, [[0, 2]] * 32, [1] * 32)


@pytest.mark.parametrize("fill_value", [-1, 0, 99])
def test_fill_value(fill_value):
    p = _batch(_one_hot([3, 6, 4, 7]))
    tokens = [[3, 6, fill_value, fill_value]]
    _assert_outcome(_batch([3, 1, 4]), None, p, tokens, [1], fill_value=fill_value)


def test_batch_rows_are_independent():
    # One call, four rows with four different outcomes: all accepted, reject at 3, at 2, at 1.
    drafts = _batch([3, 1, 4], [3, 1, 4], [0, 0, 0], [5, 5, 5])
    q = jnp.asarray(_one_hot(np.asarray(drafts)))  # [4, 3, 8] consistent with the drafts
    p = _batch(
        _one_hot([3, 1, 4, 7]),
        _one_hot([3, 1, 2, 7]),
        _one_hot([0, 5, 0, 0]),
        _one_hot([1, 5, 5, 5]),
    )
    tokens = [[3, 1, 4, 7], [3, 1, 2, -1], [0, 5, -1, -1], [1, -1, -1, -1]]
    _assert_outcome(drafts, q, p, tokens, [3, 2, 1, 0])
    _assert_outcome(drafts, None, p, tokens, [3, 2, 1, 0])


def test_residual_distribution_values():
    p = jnp.asarray([[0.5, 0.3, 0.2, 0.0], [0.6, 0.3, 0.1, 0.0]])
    q = jnp.asarray([[0.2, 0.5, 0.3, 0.0], [0.2, 0.2, 0.2, 0.4]])
    expected = [[1.0, 0.0, 0.0, 0.0], [0.8, 0.2, 0.0, 0.0]]  # max(0, p - q) normalised
    np.testing.assert_allclose(np.asarray(residual_distribution(p, q)), expected, atol=1e-6)
    # A shape mismatch or a non-float argument is named (a raw broadcasting error before).
    with pytest.raises(ValueError, match="draft_probs must have shape target_probs' shape"):
        residual_distribution(p, q[..., :2])
    with pytest.raises(TypeError, match="target_probs must be a floating array"):
        residual_distribution(jnp.array([1, 0]), jnp.array([0.5, 0.5]))


# ----------------------------------------------------------------------------- bad input


def _valid(batch=2, gamma=3, vocab=8):
    drafts = jnp.zeros((batch, gamma), jnp.int32)
    q = jnp.full((batch, gamma, vocab), 1.0 / vocab)
    p = jnp.full((batch, gamma + 1, vocab), 1.0 / vocab)
    return drafts, q, p


def _bad_cases():
    drafts, q, p = _valid()
    nan_p = p.at[1, 2, 3].set(jnp.nan)
    nan_q = q.at[0, 1, 5].set(jnp.nan)
    return [
        ("draft_tokens_rank", (drafts[0], q, p), ValueError, "draft_tokens must have shape"),
        ("target_probs_rank", (drafts, q, p[0]), ValueError, "target_probs must have shape"),
        ("draft_probs_rank", (drafts, q[0], p), ValueError, "draft_probs must have shape"),
        ("target_gamma", (drafts, q, p[:, :3]), ValueError, r"target_probs must have shape.*2, 4"),
        ("draft_gamma", (drafts, q[:, :2], p), ValueError, r"draft_probs must have shape.*2, 3"),
        ("batch", (drafts, q, p[:1]), ValueError, "target_probs must have shape"),
        ("vocab", (drafts, q[..., :7], p), ValueError, "vocab mismatch: draft_probs has vocab 7"),
        ("gamma_zero", (drafts[:, :0], q[:, :0], p[:, :1]), ValueError, "gamma >= 1"),
        ("int_target", (drafts, q, p.astype(jnp.int32)), TypeError, "target_probs must be a float"),
        ("int_draft", (drafts, q.astype(jnp.int32), p), TypeError, "draft_probs must be a float"),
        ("float_tokens", (drafts.astype(jnp.float32), q, p), TypeError, "draft_tokens must be an"),
        ("nan_target", (drafts, q, nan_p), ValueError, r"target_probs contains NaN.*\[1, 2, 3\]"),
        ("nan_draft", (drafts, nan_q, p), ValueError, r"draft_probs contains NaN.*\[0, 1, 5\]"),
        ("inf_target", (drafts, q, p.at[0, 0, 0].set(jnp.inf)), ValueError, "target_probs .*inf"),
        ("token_high", (drafts.at[1, 2].set(8), q, p), ValueError, r"draft_tokens must lie in"),
        ("token_low", (drafts.at[0, 0].set(-1), q, p), ValueError, r"draft_tokens must lie in"),
        ("token_high_det", (drafts.at[1, 2].set(8), None, p), ValueError, "draft_tokens must lie"),
        # Renormalising rows cannot repair these: they raise instead of drawing from garbage.
        ("negative_target", (drafts, q, p.at[1, 0, 2].set(-0.1)), ValueError, _NEG_TARGET),
        ("negative_draft", (drafts, q.at[0, 2, 1].set(-0.1), p), ValueError, _NEG_DRAFT),
        ("zero_target_row", (drafts, q, p.at[0, 3].set(0.0)), ValueError, _ZERO_TARGET),
        ("zero_target_det", (drafts, None, p.at[1, 1].set(0.0)), ValueError, r"row \[1, 1\]"),
    ]


_NEG_TARGET = r"target_probs has a negative entry \(-0.1 at index \[1, 0, 2\]\)"
_NEG_DRAFT = r"draft_probs has a negative entry \(-0.1 at index \[0, 2, 1\]\)"
_ZERO_TARGET = r"target_probs row \[0, 3\] is all zero"


@pytest.mark.parametrize(
    "args, error, match", [c[1:] for c in _bad_cases()], ids=[c[0] for c in _bad_cases()]
)
def test_bad_input_raises_naming_the_argument(args, error, match):
    with pytest.raises(error, match=match):
        speculative_accept(jax.random.key(0), *args)


def test_a_bad_key_or_fill_value_raises_naming_it_in_every_rule():
    """A float fill_value was truncated into a token id (2.5 -> 2) and an int key failed deep
    in jax.random; every rule now names them, the tree and point-mass rules included."""
    from specjax.decoding import TokenTree, block_accept, tree_accept
    from specjax.decoding.rules.point_mass import point_mass_accept, tree_point_mass_accept

    drafts, q, p = _valid()
    tree = TokenTree.chain(3)
    nodes = jnp.pad(drafts, ((0, 0), (1, 0)))  # [batch, 4]: the root, then the chain
    node_q = jnp.concatenate([q[:, :1], q], axis=1)
    target = jnp.zeros((2, 4), jnp.int32)
    calls = [
        lambda k, f: speculative_accept(k, drafts, q, p, fill_value=f),
        lambda k, f: block_accept(k, drafts, q, p, fill_value=f),
        lambda k, f: tree_accept(k, tree, nodes, node_q, p, fill_value=f),
    ]
    for call in calls:
        for bad in (0, None, jnp.zeros((2,), jnp.int32), jax.random.split(KEYS[0], 2)):
            with pytest.raises((TypeError, ValueError), match="key must be .*PRNG key"):
                call(bad, -1)
        for bad in (2.5, "a", True):
            with pytest.raises(TypeError, match=r"fill_value must be an integer"):
                call(KEYS[0], bad)
        call(jax.random.PRNGKey(0), np.int64(-1))  # a raw key and a NumPy integer are fine
    with pytest.raises(TypeError, match=r"fill_value must be an integer"):
        point_mass_accept(drafts, target, fill_value=2.5)
    with pytest.raises(TypeError, match=r"fill_value must be an integer"):
        tree_point_mass_accept(tree, nodes, target, fill_value=2.5)


def test_shape_errors_also_raise_under_jit():
    drafts, q, p = _valid()
    with pytest.raises(ValueError, match="vocab mismatch"):
        jit_accept(jax.random.key(0), drafts, q[..., :7], p)
    with pytest.raises(ValueError, match="gamma >= 1"):
        jit_accept(jax.random.key(0), drafts[:, :0], q[:, :0], p[:, :1])


# ----------------------------------------------------------------------------- no retrace


def test_jit_does_not_retrace_on_new_values():
    chex.clear_trace_counter()
    fn = jax.jit(chex.assert_max_traces(speculative_accept, n=1))
    rng = np.random.default_rng(0)
    for i in range(4):  # new key, new tokens, new probabilities, same shapes: one trace
        drafts = jnp.asarray(rng.integers(0, 16, (3, 4)), jnp.int32)
        q = jnp.asarray(rng.dirichlet(np.ones(16), (3, 4)), jnp.float32)
        p = jnp.asarray(rng.dirichlet(np.ones(16), (3, 5)), jnp.float32)
        jax.block_until_ready(fn(jax.random.key(i), drafts, q, p))


def test_jit_retraces_only_for_a_new_gamma():
    traces = []

    def counted(key, drafts, q, p):
        traces.append(drafts.shape)  # Python side effect: runs once per trace
        return speculative_accept(key, drafts, q, p)

    fn = jax.jit(counted)
    for gamma in (2, 2, 3, 3, 2):
        drafts, q, p = _valid(batch=2, gamma=gamma, vocab=8)
        fn(jax.random.key(gamma), drafts + 1, q, p)
    assert traces == [(2, 2), (2, 3)]
    # The NaN / range checks need concrete values and are skipped under jit: no host sync.
    drafts, q, p = _valid(batch=2, gamma=2, vocab=8)
    fn(jax.random.key(0), drafts, q, p)
    assert len(traces) == 2
