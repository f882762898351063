"""Token-tree decoding end to end: greedy equality with autoregressive decoding, caches after a
tree step, the streaming twin, statistics, recompilation and argument checks.

Greedy: with temperature 0 the tree decoder is deterministic and lossless, so for every draft
(noisy copy, another random transformer, a bigram table, the uniform draft) and every topology
(wide, deep, unbalanced, a chain) its continuation must equal the target's greedy continuation
token for token, on ragged prompts where rows accept different paths. float32 throughout.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from decoding_setup import (
    CACHE_LEN,
    GREEDY,
    LLAMA_TARGET,
    MAX_NEW,
    PROMPTS,
    SAMPLING,
    SMALL_DRAFT,
    TARGET,
    V,
    ar_decoder,
    as_lists,
    drafts,
    llama_params,
    perturbed,
    target_params,
)

from specjax.decoding import (
    AutoregressiveDecoder,
    TokenTree,
    TreeDrafter,
    TreeSpeculativeDecoder,
    loop,
)
from specjax.models import NgramLM

KEY = jax.random.PRNGKey(3)
WIDE = TokenTree.from_branching((3, 2, 1))  # 16 nodes, depth 3
UNBALANCED = TokenTree((-1, 0, 0, 0, 1, 1, 2, 4))  # 8 nodes, depth 3
CHAIN = TokenTree.chain(3)


def tree_decoder(draft, tree, warper=GREEDY, target=TARGET, **kw) -> TreeSpeculativeDecoder:
    return TreeSpeculativeDecoder(target, draft, tree, warper, cache_len=CACHE_LEN, **kw)


@pytest.fixture(scope="module")
def greedy_reference():
    return as_lists(ar_decoder().generate(target_params(), list(PROMPTS), KEY, MAX_NEW))


def check_tree_stats(result, tree: TokenTree) -> None:
    """Counters consistent with the tokens and the topology."""
    s = jax.device_get(result.stats)
    emitted = np.asarray(result.lengths - result.prompt_lengths)
    np.testing.assert_array_equal(s.emitted, emitted)
    assert int(s.target_calls) == int(s.iterations.max())
    assert int(s.draft_calls) == tree.max_depth * int(s.target_calls)
    assert s.accepted_at.shape == s.tested_at.shape == (tree.max_depth,)
    assert s.accepted_rank.shape == (tree.max_depth, tree.max_branch)
    # Every accepted depth was accepted at exactly one rank; ranks a level lacks never occur.
    np.testing.assert_array_equal(s.accepted_rank.sum(-1), s.accepted_at)
    assert (s.accepted_at <= s.tested_at).all()
    assert (np.diff(s.accepted_at) <= 0).all()  # reaching depth d + 1 needs depth d
    widths = [
        max(len(tree.children[i]) for i in range(*tree.levels[d])) for d in range(tree.max_depth)
    ]
    for d, width in enumerate(widths):
        assert s.accepted_rank[d, width:].sum() == 0
    summary = result.summary()
    hist = summary["accepted_depth_histogram"]
    assert len(hist) == tree.max_depth + 1 and sum(hist) == int(s.iterations.sum())


@pytest.mark.parametrize("tree", [WIDE, UNBALANCED, CHAIN], ids=["wide", "unbalanced", "chain"])
@pytest.mark.parametrize("draft_name", ["noisy_self", "transformer", "bigram", "uniform"])
def test_greedy_tree_decoding_equals_autoregressive(greedy_reference, draft_name, tree):
    draft, draft_params = drafts()[draft_name]
    result = tree_decoder(draft, tree).generate(
        target_params(), draft_params, list(PROMPTS), jax.random.PRNGKey(11), MAX_NEW
    )
    assert as_lists(result) == greedy_reference
    check_tree_stats(result, tree)
    if draft_name == "noisy_self":  # the case accepts real paths, below the first rank too
        s = jax.device_get(result.stats)
        assert result.summary()["tokens_per_iteration"] > 1.3  # measured 1.85 to 2.74
        if tree is WIDE:
            assert s.accepted_rank[:, 1:].sum() > 0


def test_greedy_tree_decoding_llama_gqa_rope():
    """RoPE positions by depth and grouped-query attention under the tree mask."""
    reference = ar_decoder(target=LLAMA_TARGET).generate(llama_params(), list(PROMPTS), KEY, 20)
    noisy = perturbed(llama_params(), seed=9, scale=0.03)
    for tree in (WIDE, UNBALANCED):
        result = tree_decoder(LLAMA_TARGET, tree, target=LLAMA_TARGET).generate(
            llama_params(), noisy, list(PROMPTS), KEY, 20
        )
        assert as_lists(result) == as_lists(reference)
        assert result.summary()["tokens_per_iteration"] > 1.5


def test_greedy_top_k_children_with_sampled_rule_are_still_greedy(greedy_reference):
    """children="top_k" forces deterministic children; "sample" at T = 0 repeats the argmax
    (with replacement) or adds uniform fallbacks (without): all must stay token-exact."""
    draft, draft_params = drafts()["noisy_self"]
    for children, replacement in (("top_k", True), ("sample", True), ("sample", False)):
        decoder = tree_decoder(draft, WIDE, children=children, replacement=replacement)
        result = decoder.generate(target_params(), draft_params, list(PROMPTS), KEY, MAX_NEW)
        assert as_lists(result) == greedy_reference, (children, replacement)


# -- caches after a tree step ------------------------------------------------------------------


def _fresh_cache(model, params, tokens, lengths):
    state = model.init_state(tokens.shape[0], CACHE_LEN)
    _, state = jax.jit(model.apply)(params, state, tokens, lengths)
    return state


@pytest.mark.parametrize("replacement", [True, False])
def test_caches_after_tree_steps_equal_a_fresh_prefill(replacement):
    """After each tree step, row b's target cache holds its first L - 1 tokens and the draft
    cache its first L - 1 or L - 2, equal (to float32 rounding) to a fresh prefill of the
    sequence: the accepted path was moved into place and no rejected branch survived."""
    draft, draft_params = drafts()["noisy_self"]
    decoder = tree_decoder(draft, WIDE, SAMPLING, replacement=replacement)
    params = (target_params(), draft_params)
    tokens, lengths = decoder.prepare(list(PROMPTS), MAX_NEW)
    s = loop.init_jit(decoder, params, tokens, lengths, KEY, MAX_NEW, -1)
    deep_off_first_rank = False
    for _ in range(4):
        before = s.seq.lengths
        s = loop.step_jit(decoder, params, s)
        seq_len = np.asarray(s.seq.lengths)
        t_state, d_state = s.model_states
        t_len, d_len = np.asarray(t_state.lengths), np.asarray(d_state.lengths)
        np.testing.assert_array_equal(t_len, seq_len - 1)
        assert set((seq_len - d_len).tolist()) <= {1, 2}
        deep_off_first_rank |= bool((np.asarray(s.seq.lengths - before) >= 3).any())
        for model, state, p, length in (
            (TARGET, t_state, params[0], t_len),
            (draft, d_state, params[1], d_len),
        ):
            fresh = _fresh_cache(model, p, s.seq.tokens[:, :CACHE_LEN], jnp.asarray(length))
            for mine, ref in zip(state.keys + state.values, fresh.keys + fresh.values, strict=True):
                # Sliced on the host: a device slice compiles a program per length.
                mine, ref = np.asarray(mine), np.asarray(ref)
                for b in range(len(PROMPTS)):
                    a, r = mine[b, : length[b]], ref[b, : length[b]]
                    np.testing.assert_allclose(a, r, atol=2e-5 * max(1.0, np.abs(r).max()))
    assert deep_off_first_rank  # some row accepted a path of depth >= 2


# -- streaming, recompilation, arguments -------------------------------------------------------


def test_tree_stream_equals_generate():
    draft, draft_params = drafts()["noisy_self"]
    decoder = tree_decoder(draft, UNBALANCED, SAMPLING, replacement=False)
    result = decoder.generate(target_params(), draft_params, list(PROMPTS), KEY, MAX_NEW)
    gen = decoder.stream(target_params(), draft_params, list(PROMPTS), KEY, MAX_NEW)
    pieces = [[] for _ in PROMPTS]
    while True:
        try:
            tokens, counts = next(gen)
        except StopIteration as stop:
            streamed = stop.value
            break
        assert tokens.shape == (len(PROMPTS), UNBALANCED.max_depth + 1)
        for b, c in enumerate(np.asarray(counts)):
            pieces[b].extend(np.asarray(tokens[b, :c]).tolist())
    assert pieces == as_lists(result) == as_lists(streamed)
    for x, y in zip(jax.tree.leaves(result), jax.tree.leaves(streamed), strict=True):
        np.testing.assert_array_equal(x, y)


def test_no_recompilation_for_new_prompts_in_bucket_or_new_budget():
    draft, draft_params = drafts()["bigram"]
    decoder = tree_decoder(draft, UNBALANCED, SAMPLING, target=NgramLM(V))
    params = drafts()["bigram"][1]
    decoder.generate(params, draft_params, list(PROMPTS), KEY, 5)
    programs = loop.generate_jit._cache_size()
    other = [np.array([3, 1, 4, 1, 5]), np.arange(16) % V, np.array([2]), np.array([7, 8])]
    for max_new in (3, 9, 17):
        decoder.generate(params, draft_params, other, jax.random.PRNGKey(max_new), max_new, 5)
    assert loop.generate_jit._cache_size() == programs
    decoder.generate(params, draft_params, [np.arange(17) % V], KEY, 5)  # a new bucket
    assert loop.generate_jit._cache_size() == programs + 1


def test_bad_tree_decoder_arguments_raise_naming_them():
    draft = drafts()["bigram"][0]
    with pytest.raises(TypeError, match="tree must be a TokenTree"):
        TreeSpeculativeDecoder(TARGET, draft, (3, 2), GREEDY)
    with pytest.raises(ValueError, match="at least one node below the root"):
        TreeSpeculativeDecoder(TARGET, draft, TokenTree((-1,)), GREEDY)
    with pytest.raises(ValueError, match="vocab mismatch"):
        TreeSpeculativeDecoder(TARGET, NgramLM(V + 1), WIDE, GREEDY)
    with pytest.raises(ValueError, match="children must be one of"):
        TreeSpeculativeDecoder(TARGET, draft, WIDE, GREEDY, children="beam")
    # Top-k children are distinct tokens: no more of them per node than the draft's vocabulary
    # (the audit found this one failing inside jit, in jax.lax.top_k).
    crowded = TokenTree.from_branching((V + 1,))
    with pytest.raises(ValueError, match=rf"tree: a node has {V + 1} children.*greedy warper"):
        TreeSpeculativeDecoder(TARGET, draft, crowded, GREEDY)
    with pytest.raises(ValueError, match=rf"tree: a node has {V + 1} children.*'top_k'"):
        TreeSpeculativeDecoder(TARGET, draft, crowded, SAMPLING, children="top_k")
    TreeSpeculativeDecoder(TARGET, draft, crowded, SAMPLING)  # sampled children: fine
    with pytest.raises(TypeError, match="replacement must be True or False"):
        TreeSpeculativeDecoder(TARGET, draft, WIDE, GREEDY, replacement="no")
    with pytest.raises(TypeError, match="replacement must be True or False"):
        TreeDrafter(draft, SAMPLING, WIDE, "no")  # truthy: it would draw with replacement
    # An explicit tree drafter draws the siblings; the decoder's rule must be the one for that
    # draw (each rule is exact only for its own: test_tree_decoding_sampling's mismatched rule).
    for drawn in (True, False):
        sequoia = TreeDrafter(draft, SAMPLING, WIDE, drawn)
        with pytest.raises(ValueError, match=rf"draft TreeDrafter draws them with replacement="
                           rf"{drawn}: pass replacement={drawn}"):  # fmt: skip
            TreeSpeculativeDecoder(TARGET, sequoia, WIDE, SAMPLING, replacement=not drawn)
        assert TreeSpeculativeDecoder(TARGET, sequoia, WIDE, SAMPLING, replacement=drawn)
    with pytest.raises(TypeError, match="warper must be a specjax Warper"):
        TreeSpeculativeDecoder(TARGET, draft, WIDE, 0.0)
    decoder = tree_decoder(draft, WIDE)
    with pytest.raises(ValueError, match="cache_len"):
        decoder.generate({}, {}, [np.arange(40) % V], KEY, 20)  # 40 + 20 + 15 > 64
    with pytest.raises(ValueError, match="parents"):
        TokenTree((-1, 0, 2))
    with pytest.raises(ValueError, match="breadth-first"):
        TokenTree((-1, 0, 1, 0))


def test_small_transformer_draft_with_learned_and_rope_positions_under_a_tree():
    """A draft of another family (Llama, RoPE) drafts the tree for a GPT-2 target: greedy
    output is still the target's."""
    reference = AutoregressiveDecoder(TARGET, GREEDY, cache_len=CACHE_LEN).generate(
        target_params(), list(PROMPTS), KEY, 12
    )
    draft_params = drafts()["transformer"][1]
    result = tree_decoder(SMALL_DRAFT, UNBALANCED).generate(
        target_params(), draft_params, list(PROMPTS), KEY, 12
    )
    assert as_lists(result) == as_lists(reference)
