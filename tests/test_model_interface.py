"""The open model interface: caller-given positions and masks, hidden states, `select`, axes.

A token tree is a mask and depth-based positions passed by the caller, not a different model:
scoring [a, b, c] where c is b's sibling (c hidden from b, at b's position) must give c exactly
the logits of the chain [a, c], for learned positions (GPT-2) and RoPE with GQA (Llama).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec

from specjax.models import NgramLM, TransformerConfig, TransformerLM, UniformLM
from specjax.models.interface import causal_mask, chain_positions, state_logical_axes
from specjax.models.kv_cache import init_kv_cache, select_rows
from specjax.models.ngram import LengthState
from specjax.models.prompt_lookup import HistoryState

V, MAX_LEN = 32, 16
MODELS = {
    "gpt2": TransformerLM(
        TransformerConfig.gpt2(V, num_layers=2, embed_dim=32, num_heads=4, mlp_dim=64, max_len=32)
    ),
    "llama_gqa": TransformerLM(
        TransformerConfig.llama(
            V, num_layers=2, embed_dim=32, num_heads=4, num_kv_heads=2, mlp_dim=64, max_len=32
        )
    ),
}


def _prefilled(model, params, prefix):
    """A cache holding `prefix` (batch 2: the same prefix twice, lengths differ by one)."""
    tokens = jnp.asarray([prefix, prefix], jnp.int32)
    lengths = jnp.asarray([len(prefix), len(prefix) - 1], jnp.int32)
    _, state = model.apply(params, model.init_state(2, MAX_LEN), tokens, lengths)
    return state


@pytest.mark.parametrize("name", list(MODELS))
def test_explicit_chain_positions_and_mask_are_the_defaults(name):
    model = MODELS[name]
    params = model.init_params(jax.random.PRNGKey(0))
    state = _prefilled(model, params, [3, 1, 4, 1, 5])
    new = jnp.asarray([[9, 2, 6], [5, 3, 5]], jnp.int32)
    num = jnp.array([3, 3], jnp.int32)
    want, want_state = model.apply(params, state, new, num)
    positions = chain_positions(state.lengths, 3)
    got, got_state = model.apply(
        params, state, new, num, positions=positions, mask=causal_mask(positions, MAX_LEN)
    )
    np.testing.assert_array_equal(got, want)
    for a, b in zip(jax.tree.leaves(got_state), jax.tree.leaves(want_state), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", list(MODELS))
def test_a_sibling_hidden_by_the_mask_scores_as_its_own_chain(name):
    model = MODELS[name]
    params = model.init_params(jax.random.PRNGKey(1))
    prefix = [7, 3, 3, 8]
    state = _prefilled(model, params, prefix)
    start = state.lengths  # [2] per-row slot of the first new token
    # Tree: node 0 = a (slot start), nodes 1 (b) and 2 (c) both children of a (depth 1).
    tree = jnp.asarray([[11, 12, 13], [11, 12, 13]], jnp.int32)
    depth = jnp.array([0, 1, 1])
    positions = start[:, None] + depth[None, :]  # [2, 3]
    ancestors = jnp.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], bool)  # [node, ancestor-or-self]
    offset = jnp.arange(MAX_LEN)[None, :] - start[:, None]  # [2, max_len] tree node of a slot
    in_tree = (offset >= 0) & (offset < 3)  # [2, max_len]
    sees = ancestors[:, jnp.clip(offset, 0, 2)]  # [3, 2, max_len]
    mask = (offset < 0)[:, None, :] | (in_tree[:, None, :] & jnp.swapaxes(sees, 0, 1))
    num = jnp.array([3, 3], jnp.int32)
    tree_logits, _ = model.apply(params, state, tree, num, positions=positions, mask=mask)
    chain = jnp.asarray([[11, 13], [11, 13]], jnp.int32)
    chain_logits, _ = model.apply(params, state, chain, jnp.array([2, 2], jnp.int32))
    np.testing.assert_allclose(tree_logits[:, 0], chain_logits[:, 0], atol=1e-5)
    np.testing.assert_allclose(tree_logits[:, 2], chain_logits[:, 1], atol=1e-5)
    # Control: without the mask, c attends to b and its logits differ.
    plain, _ = model.apply(params, state, tree, num, positions=positions)
    assert np.abs(np.asarray(plain[:, 2] - chain_logits[:, 1])).max() > 1e-3


def test_forward_returns_the_hidden_states_that_feed_the_tied_head():
    model = MODELS["gpt2"]
    params = model.init_params(jax.random.PRNGKey(2))
    tokens = jnp.asarray([[1, 2, 3]], jnp.int32)
    out = model.forward(params, model.init_state(1, MAX_LEN), tokens, jnp.array([3]))
    assert out.hidden.shape == (1, 3, 32)
    logits = jnp.einsum("btd,vd->btv", out.hidden, params["embed"]["embedding"])
    np.testing.assert_allclose(out.logits, logits, atol=1e-5)


def test_positions_and_mask_shapes_are_checked():
    model = MODELS["gpt2"]
    params = model.init_params(jax.random.PRNGKey(0))
    state = model.init_state(1, MAX_LEN)
    tokens = jnp.zeros((1, 3), jnp.int32)
    with pytest.raises(ValueError, match=r"positions must have shape \[batch, T\]"):
        model.apply(params, state, tokens, jnp.array([3]), positions=jnp.zeros((1, 2), jnp.int32))
    with pytest.raises(ValueError, match=r"mask must have shape \[batch, T, max_len\]"):
        model.apply(params, state, tokens, jnp.array([3]), mask=jnp.ones((1, 3, 8), bool))


def test_table_models_ignore_tree_arguments():
    # (Prompt lookup reads its mask: tests/test_ngram_prompt_lookup.py scores trees with it.)
    tokens = jnp.asarray([[1, 2]], jnp.int32)
    mask = jnp.ones((1, 2, 8), bool)
    bigram = NgramLM(V, 2)
    params = {"log_probs": jnp.log(jnp.full((V, V), 1.0 / V))}
    a, _ = bigram.apply(params, bigram.init_state(1, 8), tokens, jnp.array([2]), mask=mask)
    b, _ = bigram.apply(params, bigram.init_state(1, 8), tokens, jnp.array([2]))
    np.testing.assert_array_equal(a, b)
    uniform = UniformLM(V)
    uniform.apply({}, uniform.init_state(1, 8), tokens, jnp.array([2]), mask=mask)


def test_select_rows_moves_chosen_entries_into_consecutive_slots():
    rng = np.random.default_rng(0)
    buffer = rng.normal(size=(3, 10, 2)).astype(np.float32)
    starts = np.array([2, 0, 5])
    index = np.array([[0, 2, 5], [0, 1, 2], [0, 3, 4]])
    got = np.asarray(select_rows(jnp.asarray(buffer), jnp.asarray(starts), jnp.asarray(index)))
    want = buffer.copy()
    for b in range(3):
        want[b, starts[b] : starts[b] + 3] = buffer[b, starts[b] + index[b]]
    np.testing.assert_array_equal(got, want)


def test_states_select_and_declare_their_axes():
    cache = init_kv_cache(2, 1, 6, 2, 4)
    cache = cache.replace(
        keys=tuple(jnp.arange(48.0).reshape(1, 6, 2, 4) for _ in range(2)),
        values=tuple(-jnp.arange(48.0).reshape(1, 6, 2, 4) for _ in range(2)),
    )
    moved = cache.select(jnp.array([1]), jnp.array([[0, 3]]))
    np.testing.assert_array_equal(moved.keys[1][0, 2], cache.keys[1][0, 4])
    np.testing.assert_array_equal(moved.values[0][0, 1], cache.values[0][0, 1])
    history = HistoryState(jnp.asarray([[5, 6, 7, 8, 9]]), jnp.array([5]))
    np.testing.assert_array_equal(
        history.select(jnp.array([1]), jnp.array([[0, 2]])).tokens, [[5, 6, 8, 8, 9]]
    )
    lengths = LengthState(jnp.array([3]))
    assert lengths.select(jnp.array([0]), jnp.array([[0]])) is lengths
    axes = state_logical_axes(cache)
    assert axes.keys[0] == PartitionSpec("batch", "length", "kv_heads", "kv")
    assert axes.lengths == PartitionSpec("batch")
    assert state_logical_axes(history).tokens == PartitionSpec("batch", None)
