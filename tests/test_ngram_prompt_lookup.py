"""Parameter-free and count-based drafts: n-gram fitting, uniform, prompt lookup."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decoding import TokenTree
from specjax.decoding.trees.topology import tree_inputs
from specjax.models import NgramLM, PromptLookupLM, UniformLM, check_pair, fit_ngram
from specjax.models.interface import causal_mask, chain_positions
from specjax.models.kv_cache import rollback


def test_unigram_fit_exact_probabilities():
    # Counts of 0..3 in the corpus: [1, 2, 1, 0]; +0.5 each -> [1.5, 2.5, 1.5, 0.5] / 6.
    table = fit_ngram(np.array([0, 1, 1, 2]), vocab_size=4, order=1, smoothing=0.5)["log_probs"]
    assert table.shape == (4,) and table.dtype == jnp.float32
    np.testing.assert_allclose(np.exp(table), np.array([1.5, 2.5, 1.5, 0.5]) / 6, rtol=1e-6)


def test_bigram_fit_exact_probabilities_and_document_boundaries():
    # Documents [0, 1, 1] and [2, 0]: bigrams (0,1), (1,1), (2,0); none across the boundary
    # (1 -> 2 would be one if the documents were concatenated).
    docs = [np.array([0, 1, 1]), np.array([2, 0])]
    probs = np.exp(np.asarray(fit_ngram(docs, vocab_size=3, order=2, smoothing=0.1)["log_probs"]))
    expected = np.array(
        [
            [0.1, 1.1, 0.1],  # after 0: one (0, 1)
            [0.1, 1.1, 0.1],  # after 1: one (1, 1); no (1, 2)
            [1.1, 0.1, 0.1],  # after 2: one (2, 0)
        ]
    )
    np.testing.assert_allclose(probs, expected / expected.sum(1, keepdims=True), rtol=1e-6)
    concatenated = np.exp(np.asarray(fit_ngram(np.array([0, 1, 1, 2, 0]), 3, 2, 0.1)["log_probs"]))
    assert concatenated[1, 2] > probs[1, 2]  # the boundary bigram exists only when concatenated


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(order=3), ValueError, "order"),
        (dict(smoothing=0.0), ValueError, "smoothing"),
        (dict(tokens=np.array([0, 4])), ValueError, r"\[0, 4\)"),
        (dict(tokens=np.array([-1, 2])), ValueError, r"\[0, 4\)"),
    ],
)
def test_fit_ngram_bad_arguments(kwargs, error, match):
    args = dict(tokens=np.array([0, 1, 2]), vocab_size=4, order=2, smoothing=0.1)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        fit_ngram(**args)


def test_ngram_lm_apply_looks_up_rows_and_advances_lengths():
    params = fit_ngram(np.array([0, 1, 2, 0, 1, 3]), vocab_size=4, order=2, smoothing=0.1)
    lm = NgramLM(vocab_size=4, order=2)
    state = lm.init_state(batch=2, max_len=8)
    tokens = jnp.array([[0, 2, 3], [1, 1, 1]])
    logits, state = lm.apply(params, state, tokens, jnp.array([3, 1]))
    assert logits.shape == (2, 3, 4)
    np.testing.assert_array_equal(logits, np.asarray(params["log_probs"])[np.asarray(tokens)])
    np.testing.assert_array_equal(state.lengths, [3, 1])

    unigram = NgramLM(vocab_size=4, order=1)
    uni_params = fit_ngram(np.array([3, 3, 1]), vocab_size=4, order=1)
    logits, _ = unigram.apply(uni_params, unigram.init_state(2, 8), tokens, jnp.array([1, 1]))
    np.testing.assert_array_equal(logits, np.broadcast_to(uni_params["log_probs"], (2, 3, 4)))

    with pytest.raises(ValueError, match="order"):
        NgramLM(vocab_size=4, order=3)
    with pytest.raises(ValueError, match="vocab"):
        NgramLM(vocab_size=5).apply(params, state, tokens, jnp.array([1, 1]))


def test_uniform_lm_is_flat_and_vocab_checked_against_target():
    lm = UniformLM(vocab_size=6)
    logits, state = lm.apply(
        {}, lm.init_state(2, 4), jnp.zeros((2, 3), jnp.int32), jnp.array([2, 0])
    )
    np.testing.assert_array_equal(logits, np.zeros((2, 3, 6), np.float32))
    np.testing.assert_array_equal(state.lengths, [2, 0])
    check_pair(UniformLM(6), NgramLM(6))
    with pytest.raises(ValueError, match="vocab mismatch"):
        check_pair(UniformLM(6), NgramLM(7))
    with pytest.raises(TypeError, match="lacks"):
        check_pair(UniformLM(6), object())


_apply = jax.jit(
    lambda lm, state, tokens, num_new: lm.apply({}, state, tokens, num_new), static_argnums=0
)


def _proposals(lm: PromptLookupLM, history, width: int = 12) -> np.ndarray:
    """Feeds a history as one prefill (padded to `width`: one program per draft config).

    Returns:
      int [len(history)]: the proposal after each history token.
    """
    n = len(history)
    tokens = np.zeros((1, width), np.int32)
    tokens[0, :n] = history
    state = lm.init_state(1, 16)
    logits, state = _apply(lm, state, jnp.asarray(tokens), jnp.array([n]))
    logits = np.asarray(logits)[0, :n]  # [len, vocab]
    # One-hot "logits": 0 on the proposal, -inf elsewhere.
    assert ((logits == 0).sum(-1) == 1).all()
    assert (np.isneginf(logits).sum(-1) == lm.vocab_size - 1).all()
    assert int(state.lengths[0]) == n
    return logits.argmax(-1)


@pytest.mark.parametrize(
    "history, max_ngram, min_ngram, expected_last",
    [
        # Suffix [1, 2] occurred at 0, followed by 3.
        ([1, 2, 3, 4, 1, 2], 3, 1, 3),
        # The latest earlier occurrence wins: [1, 2] at 3 is followed by 7 (not 5).
        ([1, 2, 5, 1, 2, 7, 1, 2], 2, 1, 7),
        # Longer n-grams take priority: [9, 1, 2] -> 3, although [1, 2] last preceded 6.
        ([9, 1, 2, 3, 1, 2, 6, 9, 1, 2], 3, 1, 3),
        # ... unless the longest n allowed is 2: then [1, 2] at 4 -> 6.
        ([9, 1, 2, 3, 1, 2, 6, 9, 1, 2], 2, 1, 6),
        # Unigram only: the latest earlier 2 (index 4) is followed by 4.
        ([1, 2, 3, 9, 2, 4, 1, 2], 1, 1, 4),
        # No match at all: repeat the last token.
        ([1, 2, 3, 4], 3, 1, 4),
        # min_ngram=2 ignores a unigram match of 4 and falls back to repeating it.
        ([4, 5, 6, 4], 3, 2, 4),
        # Overlapping self-match: suffix [5, 5] matches at 0, followed by 5.
        ([8, 5, 5, 5], 2, 2, 5),
    ],
)
def test_prompt_lookup_hand_written_histories(history, max_ngram, min_ngram, expected_last):
    lm = PromptLookupLM(vocab_size=10, max_ngram=max_ngram, min_ngram=min_ngram)
    assert _proposals(lm, history)[-1] == expected_last


def test_prompt_lookup_proposal_after_every_token_and_across_calls():
    lm = PromptLookupLM(vocab_size=10, max_ngram=2, min_ngram=1)
    history = [3, 4, 3, 5, 3]
    # After [3]: nothing -> 3; [3,4]: 4; [3,4,3]: 3 seen at 0 -> 4; [..,5]: 5; [..,5,3]: latest
    # earlier 3 is at 2 (followed by 5); the bigram [5, 3] never occurred before.
    np.testing.assert_array_equal(_proposals(lm, history), [3, 4, 4, 5, 5])
    # Same history fed in two calls, with ragged rows and padding, gives the same proposals.
    state = lm.init_state(2, 16)
    first = jnp.array([[3, 4, 3], [3, 4, 0]])
    _, state = _apply(lm, state, first, jnp.array([3, 2]))
    second = jnp.array([[5, 3, 0], [3, 5, 3]])
    logits, state = _apply(lm, state, second, jnp.array([2, 3]))
    np.testing.assert_array_equal(state.lengths, [5, 5])
    proposals = np.asarray(logits).argmax(-1)  # [2, 3]; row 0's third entry is padding
    np.testing.assert_array_equal(proposals[0, :2], [5, 5])
    np.testing.assert_array_equal(proposals[1], [4, 5, 5])


_masked_apply = jax.jit(
    lambda lm, state, tokens, num_new, positions, mask: lm.apply(
        {}, state, tokens, num_new, positions=positions, mask=mask
    ),
    static_argnums=0,
)

TREES = (
    TokenTree.from_branching((2, 2)),
    TokenTree.from_branching((3, 1, 2)),
    TokenTree((-1, 0, 0, 0, 1, 1, 3, 4, 6)),  # ragged: nodes with 2, 0 and 1 children
    TokenTree.chain(3),
)


@pytest.mark.parametrize("tree", TREES, ids=lambda t: ",".join(map(str, t.parents)))
def test_prompt_lookup_scores_each_tree_node_as_its_root_to_node_chain(tree):
    lm = PromptLookupLM(vocab_size=4, max_ngram=2)
    rng = np.random.default_rng(tree.num_nodes)
    max_len, batch, n = 24, 3, tree.num_nodes
    # Ragged committed prefixes (8, 3 and 0 tokens before the root) over a 4-token alphabet,
    # so lookups hit the prefix and the tree's own ancestors. The rows were first filled to 12
    # tokens and rolled back: stale slots hold tokens the mask must hide.
    state = lm.init_state(batch, max_len)
    _, state = _apply(lm, state, jnp.asarray(rng.integers(0, 4, (batch, 12))), jnp.full(3, 12))
    state = rollback(state, jnp.array([8, 3, 0]))
    nodes = jnp.asarray(rng.integers(0, 4, (batch, n)), jnp.int32)  # node 0: each row's root
    positions, mask = tree_inputs(tree, state.lengths, max_len)
    logits, after = _masked_apply(lm, state, nodes, jnp.full(batch, n), positions, mask)
    np.testing.assert_array_equal(after.lengths, [8 + n, 3 + n, n])

    width = tree.max_depth + 1
    ancestors = tree.ancestor_mask()
    host_nodes, host_logits = np.asarray(nodes), np.asarray(logits)  # no program per node
    for i in range(n):
        path = np.flatnonzero(ancestors[i])  # root .. i, in order (parents precede children)
        chain = np.zeros((batch, width), np.int32)
        chain[:, : len(path)] = host_nodes[:, path]
        want, _ = _apply(lm, state, jax.device_put(chain), np.full(batch, len(path), np.int32))
        np.testing.assert_array_equal(
            host_logits[:, i], np.asarray(want)[:, len(path) - 1], err_msg=f"node {i}"
        )

    # A causal mask is the chain call; without the tree mask, siblings would see each other.
    chain_logits, _ = _apply(lm, state, nodes, jnp.full(batch, n))
    causal = causal_mask(chain_positions(state.lengths, n), max_len)
    same, _ = _masked_apply(lm, state, nodes, jnp.full(batch, n), positions, causal)
    np.testing.assert_array_equal(same, chain_logits)
    if tree.max_branch > 1:
        assert (np.asarray(chain_logits) != np.asarray(logits)).any()


def test_prompt_lookup_config_errors():
    for lo, hi in ((0, 2), (3, 2)):
        with pytest.raises(ValueError, match="min_ngram"):
            PromptLookupLM(vocab_size=4, max_ngram=hi, min_ngram=lo)
