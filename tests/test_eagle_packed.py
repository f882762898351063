"""An EAGLE head in the packed layout (`EagleHead.with_matmul`): the same head, decoding faster.

The conversion is exact both ways; the packed head's features and draft logits equal the xla
head's to float32 accuracy (bound 1e-4 of each row's max |value|, measured below 1e-6); greedy
speculative decoding with it, chain and dynamic tree, equals autoregressive decoding; and the
packed layout cannot be trained by mistake.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decoding import (
    AutoregressiveDecoder,
    DynamicTree,
    SpeculativeDecoder,
    TreeSpeculativeDecoder,
    loop,
    make_warper,
)
from specjax.models import EagleHead, with_matmul
from specjax.models.interface import params_mismatch
from specjax.testing import tiny_llama
from specjax.training.eagle import head_loss

VOCAB = 40
EMBED = 32


@pytest.fixture(scope="module")
def target():
    model, params = tiny_llama(VOCAB, 3, embed=EMBED)
    return with_matmul(model, params, "packed")  # the layout a CPU target decodes in


def _head(target_model, kind):
    if kind == "eagle1":
        return EagleHead(target_model)
    ids = tuple(range(0, VOCAB, 3))  # 14 ids: a last panel of 6 columns
    return EagleHead(target_model, draft_ids=ids, feature_layers=(0, 1))


@pytest.fixture(scope="module", params=["eagle1", "eagle3"])
def heads(request, target):
    model, _ = target
    head = _head(model, request.param)
    params = head.init_params(jax.random.PRNGKey(5))
    params = jax.tree.map(lambda x: x * 4.0 if x.ndim == 2 else x, params)  # q far from uniform
    packed, packed_params = head.with_matmul(params, "packed")
    return head, params, packed, packed_params


def _rel_rows(a, b):
    return float((jnp.abs(a - b).max(-1) / jnp.abs(b).max(-1)).max())


def test_conversion_is_exact_both_ways_and_fits_the_packed_head(heads):
    head, params, packed, packed_params = heads
    assert packed.packed and not head.packed and packed.config.matmul == "packed"
    assert packed.target is head.target and packed.draft_ids == head.draft_ids
    abstract = jax.eval_shape(packed.init_params, jax.random.PRNGKey(0))
    assert jax.tree.structure(abstract) == jax.tree.structure(packed_params)
    for a, b in zip(jax.tree.leaves(abstract), jax.tree.leaves(packed_params), strict=True):
        assert a.shape == b.shape
    back_head, back = packed.with_matmul(packed_params, "xla")
    assert back_head == head
    assert jax.tree.structure(back) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert head.with_matmul(params, "xla") == (head, params)
    with pytest.raises(ValueError, match="matmul must be one of"):
        head.with_matmul(params, "bf16")


def test_features_and_draft_logits_equal_the_xla_heads(heads, target):
    head, params, packed, packed_params = heads
    _, tp = target
    key = jax.random.PRNGKey(1)
    feats = jax.random.normal(key, (2, 5, head.feature_dim))
    embeds = jax.random.normal(jax.random.fold_in(key, 1), (2, 5, head.embed_dim))
    num = jnp.array([5, 3], jnp.int32)
    outs = []
    for h, p in ((head, params), (packed, packed_params)):
        state = h.init_state(2, 16)
        x = h.fuse_features(p, feats)
        pred, state = h.forward_features(p, state, x, embeds, num)  # 5 pairs: the kernels' path
        step, _ = h.forward_features(p, state, pred[:, -1:], embeds[:, :1], num * 0 + 1)
        outs.append((x, pred, step, h.logits(tp, p, step[:, 0])))
    for a, b in zip(outs[1], outs[0], strict=True):
        assert a.shape == b.shape
        finite = jnp.isfinite(b)  # a reduced vocabulary's -inf columns
        assert bool(jnp.all(finite == jnp.isfinite(a)))
        assert _rel_rows(jnp.where(finite, a, 0), jnp.where(finite, b, 0)) < 1e-4


def test_restricted_and_target_columns_keep_the_layout(target):
    model, tp = target
    head = _head(model, "eagle3")
    params = head.with_target_columns(head.init_params(jax.random.PRNGKey(2)), tp)
    packed, packed_params = head.with_matmul(params, "packed")
    np.testing.assert_array_equal(
        np.asarray(packed.with_target_columns(packed_params, tp)["lm_head"]),
        np.asarray(packed_params["lm_head"]),
    )
    ids = head.draft_ids[1::2]
    small, small_params = head.restricted(params, ids)
    psmall, psmall_params = packed.restricted(packed_params, ids)
    assert psmall.packed and psmall.draft_ids == small.draft_ids
    expect = small.with_matmul(small_params, "packed")[1]["lm_head"]
    np.testing.assert_array_equal(np.asarray(psmall_params["lm_head"]), np.asarray(expect))


@pytest.mark.parametrize("shape", ["chain", "dynamic"])
def test_greedy_decoding_with_the_packed_head_equals_autoregressive(heads, target, shape):
    _, _, packed, packed_params = heads
    model, tp = target
    warper = make_warper(temperature=0.0)
    if shape == "chain":
        spec = SpeculativeDecoder(model, packed, 3, warper, cache_len=48)
    else:
        spec = TreeSpeculativeDecoder(model, packed, DynamicTree(3, 2, 6), warper, cache_len=48)
    ar = AutoregressiveDecoder(model, warper, cache_len=48)
    prompts = [[1, 5, 9, 2], [7, 3]]
    key = jax.random.PRNGKey(0)
    want = loop.generate(ar, (tp,), prompts, key, 20)
    got = loop.generate(spec, (tp, packed_params), prompts, key, 20)
    np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(want.tokens))
    assert params_mismatch(packed, packed_params) is None


def test_training_refuses_the_packed_layout(heads, target):
    _, _, packed, packed_params = heads
    _, tp = target
    batch = {"features": jnp.zeros((1, 4, EMBED)), "tokens": jnp.zeros((1, 4), jnp.int32)}
    batch["weight"] = jnp.ones((1, 3))
    batch["layers"] = jnp.zeros((1, 4, packed.feature_dim))
    with pytest.raises(ValueError, match="head: this EagleHead is in the packed layout"):
        head_loss(
            packed, packed_params, tp, batch, jax.random.PRNGKey(0),
            noise=0.0, ce_weight=0.1, columns=None, ttt_steps=1,
        )  # fmt: skip


def test_a_gpt2_family_head_converts_exactly_and_computes_the_same():
    """GPT-2's block (LayerNorm with biases, GELU, learned positions) in the packed layout."""
    from specjax.models import TransformerConfig, TransformerLM

    cfg = TransformerConfig.gpt2(VOCAB, num_layers=2, embed_dim=EMBED, num_heads=2, max_len=32)
    model = TransformerLM(cfg)
    model, tp = with_matmul(model, model.init_params(jax.random.PRNGKey(3)), "packed")
    head = EagleHead(model, draft_ids=tuple(range(0, VOCAB, 3)), feature_layers=(0, 1))
    params = head.init_params(jax.random.PRNGKey(4))
    params = jax.tree.map(lambda x: x + 0.1 * jnp.ones_like(x) if x.ndim == 1 else x, params)
    packed, packed_params = with_matmul(head, params, "packed")  # handed to the head's own
    assert packed.packed
    back = packed.with_matmul(packed_params, "xla")[1]
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    feats = jax.random.normal(jax.random.PRNGKey(6), (1, 4, head.feature_dim))
    embeds = jax.random.normal(jax.random.PRNGKey(7), (1, 4, head.embed_dim))
    outs = []
    for h, p in ((head, params), (packed, packed_params)):
        x = h.fuse_features(p, feats)
        pred, _ = h.forward_features(p, h.init_state(1, 8), x, embeds, jnp.array([4]))
        outs.append((x, pred, h.draft_logits(p, pred)))
    for a, b in zip(outs[1], outs[0], strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert _rel_rows(a, b) < 1e-4
