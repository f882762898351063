"""The feature seam and the EAGLE-1 head: a tiny random target, losslessness, features exact.

* `embed`/`unembed` of a transformer equal what its forward pass does (both layouts).
* `check_decoder` on a tiny Llama-shaped target (vocab 5) with an *untrained* head (random
  params: a poor but arbitrary q, which is what losslessness must survive): 2^14 rows per prompt,
  one prompt of one token (the placeholder pair) and one of three, side by side in every call
  (`mixed=True`: ragged rows in one batch). False-failure rate: the kit's
  Bonferroni bound, k x 1e-6 with k = 2 prompts x (4 + 1) + 2 = 12 checks, about 1.2e-5.
* The features the drafter holds after some steps equal the target's hidden states recomputed
  from scratch on the committed sequence, row for row (the seam passes the right ones).
* Greedy: token-for-token equal to the autoregressive decoder on ragged prompts; a NaN head
  is named (chain and top-k tree).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from decoding_setup import DRAFT_NAN, nan_params

from specjax import testing
from specjax.decoding import (
    AutoregressiveDecoder,
    EagleDrafter,
    EagleTreeDrafter,
    SpeculativeDecoder,
    TokenTree,
    TreeSpeculativeDecoder,
    make_warper,
)
from specjax.decoding.loop import init_jit, step_jit
from specjax.decoding.prompts import pad_prompts
from specjax.models import EagleHead, TransformerLM, with_matmul
from specjax.testing import tiny_llama
from tests.heads_setup import stepped_state

T1 = make_warper(1.0)
T0 = make_warper(0.0)


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("matmul", ["xla", "packed"])
def test_embed_unembed_match_forward(tie, matmul):
    model, params = tiny_llama(37)
    model = TransformerLM(model.config.replace(tie_embeddings=tie))
    params = model.init_params(jax.random.PRNGKey(1))
    model, params = with_matmul(model, params, matmul)
    tokens = jnp.array([[3, 5, 7, 36, 0]], jnp.int32)
    out = model.forward(params, model.init_state(1, 16), tokens, jnp.array([5]))
    np.testing.assert_allclose(model.unembed(params, out.hidden), out.logits, rtol=1e-5, atol=1e-5)
    # The embedding: a one-token zero-layer check through the first block's input is internal;
    # compare with the table the xla layout stores (packed: the same rows, repacked).
    ref_model, ref_params = with_matmul(model, params, "xla")
    np.testing.assert_allclose(
        model.embed(params, tokens), ref_params["embed"]["embedding"][tokens], rtol=0, atol=0
    )
    del ref_model


@pytest.mark.parametrize("matmul", ["xla", "packed"])
def test_forward_returns_the_requested_layers(matmul):
    """`return_layers`: the residual stream after each requested block; the last block's,
    RMS-normalised with the final norm's scale, is `hidden`; block 0's equals the output of a
    one-block model with the same first block."""
    model, params = tiny_llama(37)
    model, params = with_matmul(model, params, matmul)
    tokens = jnp.array([[3, 5, 7, 36, 0]], jnp.int32)
    out = model.forward(params, model.init_state(1, 16), tokens, jnp.array([5]),
                        return_layers=(1, 0))  # fmt: skip
    assert out.layers.shape == (1, 5, 2, 16)
    last = out.layers[:, :, 0].astype(jnp.float32)
    scale = params["final_norm"]["scale"]
    eps = model.config.norm_eps
    normed = last * jax.lax.rsqrt(jnp.mean(last**2, -1, keepdims=True) + eps) * scale
    np.testing.assert_allclose(normed, out.hidden, rtol=1e-5, atol=1e-5)
    one = TransformerLM(model.config.replace(num_layers=1))
    one_params = {k: v for k, v in params.items() if k != "block_1"}
    first = one.forward(one_params, one.init_state(1, 16), tokens, jnp.array([5]),
                        return_layers=(0,))  # fmt: skip
    np.testing.assert_allclose(first.layers[:, :, 0], out.layers[:, :, 1], rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="return_layers: block 2 does not exist"):
        model.forward(params, model.init_state(1, 16), tokens, jnp.array([5]), return_layers=(2,))


def test_head_rejects_a_target_without_features():
    with pytest.raises(TypeError, match="target must be a specjax transformer"):
        EagleHead(object())


def _decoder(vocab=5, gamma=3, warper=T1, seed=0, unroll=None):
    target, tp = tiny_llama(vocab, seed)
    head = EagleHead(target)
    hp = head.init_params(jax.random.PRNGKey(seed + 7))
    hp = jax.tree.map(lambda x: x * 4.0 if x.ndim == 2 else x, hp)  # a q far from uniform
    drafter = EagleDrafter(head, warper, unroll=unroll)
    dec = SpeculativeDecoder(target, drafter, gamma, warper, cache_len=32)
    return dec, tp, hp, target


def test_eagle_chain_is_lossless():
    dec, tp, hp, _ = _decoder()
    report = testing.check_decoder(
        dec, tp, hp, draws=1 << 14, prompts=((2,), (1, 4, 3)), mixed=True
    )
    print(report)
    assert report.passed


class _MisreportedQ(EagleDrafter):
    """Planted bug: samples from q but reports a flattened q (q^0.5, renormalised) to the rule,
    the "candidate generator returns another q than it sampled from" bug class."""

    def _draw(self, params, feature, key):
        token, q = super()._draw(params, feature, key)
        flat = jnp.sqrt(q)
        return token, flat / flat.sum(-1, keepdims=True)


def test_a_misreported_q_is_caught():
    """Negative control for the test above (same draws, prompts and threshold)."""
    dec, tp, hp, target = _decoder()
    bad = SpeculativeDecoder(target, _MisreportedQ(dec.drafter.head, T1), 3, T1, cache_len=32)
    report = testing.check_decoder(bad, tp, hp, draws=1 << 14, prompts=((2,), (1, 4, 3)))
    print(report)
    assert not report.passed


def test_a_head_is_a_draft_and_checks_its_target():
    target, tp = tiny_llama(5)
    head = EagleHead(target)
    dec = SpeculativeDecoder(target, head, 2, T0, cache_len=32)
    assert isinstance(dec.drafter, EagleDrafter) and dec.drafter.warper == T0
    other, _ = tiny_llama(5, embed=24)
    with pytest.raises(ValueError, match="feature head was built for another target"):
        SpeculativeDecoder(
            other, EagleHead(TransformerLM(other.config.replace(embed_dim=16))), 2, T0
        )
    with pytest.raises(TypeError, match="gamma_policy must be a GammaPolicy"):
        SpeculativeDecoder(target, head, 2, T0, gamma_policy="heuristic")


def test_features_equal_the_targets_hidden_states():
    dec, tp, hp, target = _decoder(vocab=11, gamma=3)
    s = stepped_state(dec, tp, hp, 11)
    _, d_state = s.model_states
    seq_len = np.asarray(s.seq.lengths)
    hidden = target.forward(tp, target.init_state(3, 32), s.seq.tokens, s.seq.lengths).hidden
    for b in range(3):
        valid = seq_len[b] - 1  # features after tokens 0..L-2 are known
        np.testing.assert_allclose(
            d_state.feats[b, :valid], hidden[b, :valid], rtol=2e-5, atol=2e-5
        )
        # The head holds only true pairs: at most L - 1 of them (none drafted).
        assert int(d_state.cache.lengths[b]) <= valid


def _assert_greedy_equals_ar(dec, tp, hp, target, max_new_tokens):
    prompts = [np.array([1, 2, 3, 4, 5]), np.array([7]), np.array([3, 3, 9, 1])]
    key = jax.random.PRNGKey(0)
    ar = AutoregressiveDecoder(target, T0, cache_len=32).generate(
        tp, prompts=prompts, key=key, max_new_tokens=max_new_tokens
    )
    sp = dec.generate(tp, hp, prompts=prompts, key=key, max_new_tokens=max_new_tokens)
    for a, b in zip(ar.new_tokens(), sp.new_tokens(), strict=True):
        np.testing.assert_array_equal(a, b)
    # A NaN head is named, though greedy verification would still give the target's tokens.
    with pytest.raises(ValueError, match=DRAFT_NAN):
        dec.generate(tp, nan_params(hp), prompts=prompts, key=key, max_new_tokens=max_new_tokens)


@pytest.mark.parametrize("unroll", [None, True], ids=["default", "unrolled"])
def test_eagle_greedy_equals_autoregressive(unroll):
    # The draft steps as a loop (the default on CPU) and unrolled (on an accelerator).
    _assert_greedy_equals_ar(*_decoder(vocab=23, gamma=4, warper=T0, seed=2, unroll=unroll), 20)


TREE = TokenTree.from_branching((2, 2, 1))  # 2 + 4 + 4 nodes below the root, depth 3


def _tree_decoder(vocab=5, warper=T1, replacement=False, seed=0):
    target, tp = tiny_llama(vocab, seed)
    head = EagleHead(target)
    hp = head.init_params(jax.random.PRNGKey(seed + 7))
    hp = jax.tree.map(lambda x: x * 4.0 if x.ndim == 2 else x, hp)
    dec = TreeSpeculativeDecoder(target, head, TREE, warper, replacement=replacement, cache_len=32)
    return dec, tp, hp, target


def test_eagle_tree_is_lossless():
    """Sequoia's rule (siblings without replacement) over a head-drafted tree, 2^14 rows per
    prompt; false-failure rate as above (k = 2 x (4 + 1) + 2 checks, about 1.2e-5)."""
    dec, tp, hp, _ = _tree_decoder()
    assert isinstance(dec.drafter, EagleTreeDrafter)
    report = testing.check_decoder(
        dec, tp, hp, draws=1 << 14, prompts=((2,), (1, 4, 3)), mixed=True
    )
    print(report)
    assert report.passed


def test_eagle_tree_features_and_greedy():
    """Top-k children at t = 0: equal to AR; the features gathered along accepted paths equal
    the target's hidden states recomputed on the committed sequence."""
    _assert_greedy_equals_ar(*_tree_decoder(vocab=23, warper=T0, seed=2), 16)
    # Features, sampled at t = 1 over 5 tokens: paths through second-rank children happen.
    dec, tp, hp, target = _tree_decoder(vocab=5, warper=T1, replacement=True, seed=2)
    prompts = [np.array([1, 2, 3, 4, 0]), np.array([3]), np.array([3, 3, 4, 1])] * 4
    tokens, lengths = pad_prompts(prompts, 5)
    s = init_jit(dec, (tp, hp), jnp.asarray(tokens), jnp.asarray(lengths),
                 jax.random.PRNGKey(3), 14, -1)  # fmt: skip
    for _ in range(4):
        s = step_jit(dec, (tp, hp), s)
    assert int(s.stats.accepted_rank[0, 1]) > 0 and int(s.stats.accepted_rank[1, 1]) > 0
    _, d_state = s.model_states
    hidden = target.forward(tp, target.init_state(12, 32), s.seq.tokens, s.seq.lengths).hidden
    for b, length in enumerate(np.asarray(s.seq.lengths)):
        np.testing.assert_allclose(
            d_state.feats[b, : length - 1], hidden[b, : length - 1], rtol=2e-5, atol=2e-5
        )


# Reduced-vocabulary trees: (draft ids, branching, warper, replacement). Children are drawn
# over the draft ids alone, except where a level's q has fewer tokens of support than children.
REDUCED_TREES = {
    # 3 children, 2 draft ids: every level races over the full vocabulary (static).
    "tree-3-1-supp-exhausted": ((1, 3), (3, 1), T1, False),
    # 3 children from 3 draft ids: the race runs over the draft ids alone.
    "tree-3-1-inside": ((0, 1, 3), (3, 1), T1, False),
    # top-k = 2 leaves 2 of the 3 draft ids in supp q: the full-vocabulary race (the lax.cond).
    # The head's own random columns (not the target's), so p's two tokens often lie outside
    # supp q and the third sibling decides: the case its negative control needs.
    "tree-3-1-top-k-2-fallback": ((0, 1, 3), (3, 1), make_warper(1.0, top_k=2), False),
    "tree-2-2-replacement": ((0, 1, 3), (2, 2), T1, True),
}


def _reduced_decoder(structure, race_inside_only=False):
    target, tp = tiny_llama(5)
    ids, branching, warper, replacement = REDUCED_TREES.get(structure, ((1, 3), None, T1, None))
    head = EagleHead(target, draft_ids=ids)
    hp = head.init_params(jax.random.PRNGKey(7))
    if "fallback" in structure:  # a q far from p: every 2-d weight x 3
        hp = jax.tree.map(lambda x: x * 3.0 if x.ndim == 2 else x, hp)
    else:
        hp = head.with_target_columns(hp, tp)
    logits = head.logits(tp, hp, jnp.ones((2, 16)))
    outside = [t for t in range(5) if t not in ids]
    assert bool(jnp.isneginf(logits[:, jnp.array(outside)]).all())
    if structure == "chain":
        return SpeculativeDecoder(target, head, 3, warper, cache_len=32), tp, hp
    tree = TokenTree.from_branching(branching)
    if race_inside_only:  # the planted bias (a subclass: a different static argument to jit)
        head = _RaceInsideOnly(head=head, warper=warper, tree=tree, replacement=replacement)
    dec = TreeSpeculativeDecoder(target, head, tree, warper, replacement=replacement, cache_len=32)
    return dec, tp, hp


class _RaceInsideOnly(EagleTreeDrafter):
    """Planted bug: races siblings over the draft ids even past supp q."""

    race_inside_only = True


@pytest.mark.parametrize("structure", ["chain", *REDUCED_TREES])
def test_a_reduced_draft_vocabulary_is_lossless(structure):
    """EAGLE-3's reduced vocabulary: q is 0 outside 2 or 3 of 5 tokens. In the trees the root's
    children are drawn without replacement from a q with two tokens of support (two draft ids,
    or top-k = 2 over three): the third is drawn after supp q is exhausted (the trap of the
    issue), or from three (the race over the draft ids alone), or with replacement.
    False-failure rate as above."""
    dec, tp, hp = _reduced_decoder(structure)
    report = testing.check_decoder(
        dec, tp, hp, draws=1 << 14, prompts=((2,), (1, 4, 3)), mixed=True
    )
    print(report)
    assert report.passed


def test_racing_inside_the_draft_vocabulary_past_supp_q_is_caught():
    """Negative control: where top-k = 2 leaves two tokens of support, a third sibling raced
    over the draft ids alone lands on the one draft id left (the verifier expects it uniform
    over all three untried tokens), and the check must fail."""
    dec, tp, hp = _reduced_decoder("tree-3-1-top-k-2-fallback", race_inside_only=True)
    report = testing.check_decoder(
        dec, tp, hp, draws=1 << 14, prompts=((2,), (1, 4, 3)), mixed=True
    )
    print(report)
    assert not report.passed
