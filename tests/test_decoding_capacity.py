"""Long prompts fit: capacity is charged with real prompt lengths, the bucket is capped at the
cache, and `cache_len` defaults to the models' position limit (issue #21).

A GPT-2 style model with 512 learned positions continues a 258-token prompt (bucketed to 512)
and a prompt of exactly cache - max_new - γ tokens, with the autoregressive, the speculative and
the tree decoder, all three greedy outputs equal, and equal to an unpadded forward pass. Errors
say what the limit is and what to shorten. Tiny models (one layer, d = 32): seconds.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from decoding_setup import DRAFT_NAN, GREEDY, nan_params, perturbed, random_params

from specjax.decoding import (
    AutoregressiveDecoder,
    LookupDrafter,
    SpeculativeDecoder,
    TokenTree,
    TreeSpeculativeDecoder,
    arguments,
)
from specjax.models import NgramLM, TransformerConfig, TransformerLM, sequence_logits

V = 64
POSITIONS = 512
MAX_NEW = 16
GAMMA = 4
KEY = jax.random.PRNGKey(0)


def _gpt2(max_len, layers=1, embed=32):
    cfg = TransformerConfig.gpt2(
        V, num_layers=layers, embed_dim=embed, num_heads=2, mlp_dim=64, max_len=max_len
    )
    return TransformerLM(cfg)


TARGET = _gpt2(POSITIONS)
# The tree (2 children of the root, then 1 each) has 5 nodes: the same lookahead (4) as γ = 4.
TREE = TokenTree.from_branching((2, 1))
LONGEST = POSITIONS - MAX_NEW - GAMMA  # 492: the longest prompt the speculative decoders take
PROMPTS = [
    np.arange(258, dtype=np.int32) * 7 % V,
    np.arange(LONGEST, dtype=np.int32) * 11 % V,
]


@pytest.fixture(scope="module")
def params():
    tp = random_params(TARGET, seed=0)
    return tp, perturbed(tp, seed=1, scale=0.05)


@pytest.fixture(scope="module")
def results(params):
    tp, dp = params
    ar = AutoregressiveDecoder(TARGET, GREEDY)
    spec = SpeculativeDecoder(TARGET, TARGET, GAMMA, GREEDY)
    tree = TreeSpeculativeDecoder(TARGET, TARGET, TREE, GREEDY)
    assert ar.cache_len == spec.cache_len == tree.cache_len == POSITIONS  # the default
    assert tree.lookahead == GAMMA
    return {
        "autoregressive": ar.generate(tp, PROMPTS, KEY, MAX_NEW),
        "speculative": spec.generate(tp, dp, PROMPTS, KEY, MAX_NEW),
        "tree": tree.generate(tp, dp, PROMPTS, KEY, MAX_NEW),
    }


def test_bucket_is_capped_at_the_cache():
    ar = AutoregressiveDecoder(TARGET, GREEDY)
    tokens, lengths = ar.prepare(PROMPTS, MAX_NEW)
    assert tokens.shape == (2, POSITIONS)  # the power-of-two bucket, not past the cache
    assert lengths.tolist() == [258, LONGEST]
    # A bucket above the cache is capped: 300 tokens would pad to 512 on a 320-slot cache.
    short = AutoregressiveDecoder(TARGET, GREEDY, cache_len=320)
    tokens, _ = short.prepare([np.zeros(300, np.int32)], 20)
    assert tokens.shape == (1, 320)


def test_long_prompts_decode_and_greedy_outputs_agree(results):
    rows = {name: [r.tolist() for r in res.new_tokens()] for name, res in results.items()}
    assert [len(r) for r in rows["autoregressive"]] == [MAX_NEW, MAX_NEW]
    assert rows["speculative"] == rows["autoregressive"]
    assert rows["tree"] == rows["autoregressive"]
    assert results["speculative"].summary()["alpha_empirical"] > 0.3  # the draft really was used


def test_a_nan_greedy_draft_is_named(params):
    """A greedy draft proposes point masses (no q to scan) from argmaxes and top-k's; its NaN
    logits are still flagged and named, not verified into an α of 0 (the programs above)."""
    tp, dp = params
    spec = SpeculativeDecoder(TARGET, TARGET, GAMMA, GREEDY)
    tree = TreeSpeculativeDecoder(TARGET, TARGET, TREE, GREEDY)
    assert tree.drafter.deterministic  # top-k children
    for decoder in (spec, tree):
        with pytest.raises(ValueError, match=DRAFT_NAN):
            decoder.generate(tp, nan_params(dp), PROMPTS, KEY, MAX_NEW)


def test_long_prompt_output_equals_an_unpadded_forward(params, results):
    """Teacher forcing on prompt + output without any padding: every emitted token is the
    argmax after its prefix, so neither padding nor the bucket reached the attention."""
    tp, _ = params
    new = [np.asarray(r) for r in results["autoregressive"].new_tokens()]
    rows = [np.concatenate([p, n])[:-1] for p, n in zip(PROMPTS, new, strict=True)]
    width = max(len(r) for r in rows)
    # One call for both rows; the shorter row's tail is after every position read (causal).
    batch = jnp.asarray(np.stack([np.pad(r, (0, width - len(r))) for r in rows]))
    logits = np.asarray(sequence_logits(TARGET, tp, batch))  # [2, width, vocab]
    for row, prompt in enumerate(PROMPTS):
        chosen = np.argmax(logits[row, len(prompt) - 1 : len(rows[row])], axis=-1)  # [N]
        np.testing.assert_array_equal(chosen, new[row])


def test_one_token_too_many_says_what_to_shorten(params):
    tp, dp = params
    spec = SpeculativeDecoder(TARGET, TARGET, GAMMA, GREEDY)
    too_long = [np.zeros(LONGEST + 1, np.int32)]
    message = (
        rf"longest prompt \({LONGEST + 1} tokens\) \+ max_new_tokens \(16\) \+ gamma lookahead "
        rf"\(4\) = 513 exceeds cache_len=512; cache_len cannot grow: 512 positions is the "
        rf"target's limit \(its learned position table, max_len=512\); shorten the prompt to "
        rf"at most {LONGEST} tokens or lower max_new_tokens to at most 15$"
    )
    with pytest.raises(ValueError, match=message):
        spec.generate(tp, dp, too_long, KEY, MAX_NEW)
    # Without lookahead the autoregressive decoder takes it (host-side check only here).
    AutoregressiveDecoder(TARGET, GREEDY).prepare(too_long, MAX_NEW)


def test_capacity_error_suggests_raising_cache_len_only_where_it_can_grow():
    prompt = [np.zeros(100, np.int32)]
    below_limit = AutoregressiveDecoder(TARGET, GREEDY, cache_len=64)
    with pytest.raises(
        ValueError,
        match=r"exceeds cache_len=64; shorten the prompt to at most 34 tokens, lower "
        r"max_new_tokens to at most 24 or raise cache_len \(up to 512: the model's position "
        r"limit\)$",
    ):
        below_limit.prepare([np.zeros(40, np.int32)], 30)
    with pytest.raises(ValueError, match=r"or raise cache_len \(up to 512"):
        below_limit.prepare(prompt, 4)
    # No position table (a RoPE target, an n-gram draft): cache_len can always be raised.
    rope = TransformerLM(TARGET.config.replace(positions="rope"))
    unbounded = SpeculativeDecoder(rope, NgramLM(V, 2), GAMMA, GREEDY, cache_len=64)
    with pytest.raises(ValueError, match=r"gamma lookahead \(4\) = 108 .* or raise cache_len$"):
        unbounded.prepare(prompt, 4)


def test_default_cache_len_is_the_models_position_limit():
    small = _gpt2(256)
    assert AutoregressiveDecoder(small, GREEDY).cache_len == 256
    # A pair: the smaller table of target and draft.
    assert SpeculativeDecoder(TARGET, small, GAMMA, GREEDY).cache_len == 256
    assert SpeculativeDecoder(small, TARGET, GAMMA, GREEDY).cache_len == 256
    assert TreeSpeculativeDecoder(TARGET, small, TREE, GREEDY).cache_len == 256
    # No table anywhere: 512.
    rope = TransformerLM(TARGET.config.replace(positions="rope", max_len=64))
    assert AutoregressiveDecoder(rope, GREEDY).cache_len == arguments.DEFAULT_CACHE_LEN == 512
    assert SpeculativeDecoder(rope, LookupDrafter(V), GAMMA, GREEDY).cache_len == 512
    assert SpeculativeDecoder(TARGET, NgramLM(V, 2), GAMMA, GREEDY).cache_len == POSITIONS
    # An explicit value is kept, and the decoders still compare equal (one compiled program).
    assert AutoregressiveDecoder(small, GREEDY, cache_len=256) == AutoregressiveDecoder(
        small, GREEDY
    )


def test_default_cache_len_decodes_a_short_table_model():
    """The README's Hugging Face snippet failed on a 256-position checkpoint: the old default
    cache of 512 exceeded its table. Now the default is the table's size."""
    small = _gpt2(256)
    tp = random_params(small, seed=2)
    result = AutoregressiveDecoder(small, GREEDY).generate(
        tp, [np.arange(200, dtype=np.int32) % V], KEY, 8
    )
    assert result.new_tokens()[0].shape == (8,)


def test_cache_len_past_the_position_table_is_refused_at_construction():
    small = _gpt2(256)
    message = (
        r"cache_len=512 exceeds the draft's position limit: its learned position table has "
        r"256 positions \(max_len=256\); pass cache_len <= 256, or leave cache_len unset"
    )
    with pytest.raises(ValueError, match=message):
        SpeculativeDecoder(TARGET, small, GAMMA, GREEDY, cache_len=512)
    with pytest.raises(ValueError, match=r"the model's position limit: .* 256 positions"):
        AutoregressiveDecoder(small, GREEDY, cache_len=300)
    with pytest.raises(ValueError, match=r"target's position limit"):
        TreeSpeculativeDecoder(small, NgramLM(V, 2), TREE, GREEDY, cache_len=300)
    for bad in (1, 2.5, True, "64"):
        with pytest.raises(ValueError, match="cache_len must be an integer >= 2"):
            AutoregressiveDecoder(TARGET, GREEDY, cache_len=bad)
