"""`ReducedVocabLM`: a model draft over N token ids, q = 0 elsewhere, decoded losslessly.

* Its logits are the inner model's at the ids (rtol 1e-5) and -inf elsewhere; hidden states and
  the cache advance as the inner model's.
* A transformer draft reduced to 2 of 5 tokens, as a chain (γ = 3) and as a Sequoia tree whose
  root draws three children without replacement from a q of two tokens (the supp-exhausted
  fallback), passes `testing.check_decoder` (2^14 draws per prompt, the two prompts side by
  side in every call, `mixed=True`; false-failure rate: the kit's Bonferroni bound, 11 checks
  at 1e-6 each, about 1.1e-5) and its greedy identity with AR. A
  reduced draft is just another draft, so there is no biased variant of it to catch: the
  kit's power against biased rules is calibrated in tests/test_testing_kit.py.
* `DistilledDraft.decode_model(draft_ids=...)` is the reduced decode model; bad ids and a model
  without an output layer are refused naming the argument.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import testing
from specjax.decoding import SpeculativeDecoder, TokenTree, TreeSpeculativeDecoder, make_warper
from specjax.models import EagleHead, NgramLM, ReducedVocabLM, reduce_vocab
from specjax.models.distilled_draft import DistilledDraft
from specjax.testing import tiny_llama

T1 = make_warper(1.0)


def test_logits_are_the_models_at_the_ids_and_minus_inf_elsewhere():
    model, params = tiny_llama(23, seed=3)
    ids = (0, 3, 5, 11, 22)
    reduced, rparams = reduce_vocab(model, params, ids)
    assert reduced.vocab_size == 23 and rparams["columns"].shape == (16, 5)
    tokens = jnp.asarray([[1, 2, 3, 4], [7, 8, 0, 0]], jnp.int32)
    num = jnp.asarray([4, 2], jnp.int32)
    want = model.forward(params, model.init_state(2, 16), tokens, num)
    got = reduced.forward(rparams, reduced.init_state(2, 16), tokens, num)
    np.testing.assert_allclose(got.logits[..., ids], want.logits[..., ids], rtol=1e-5, atol=1e-5)
    outside = np.setdiff1d(np.arange(23), ids)
    assert bool(jnp.isneginf(got.logits[..., outside]).all())
    np.testing.assert_array_equal(got.hidden, want.hidden)
    np.testing.assert_array_equal(got.state.lengths, want.state.lengths)
    logits, state = reduced.apply(rparams, reduced.init_state(2, 16), tokens, num)
    np.testing.assert_array_equal(logits, got.logits)
    np.testing.assert_array_equal(state.keys[0], got.state.keys[0])


def _reduced_pair():
    target, tp = tiny_llama(5)
    draft, dp = tiny_llama(5, seed=1)
    return target, tp, *reduce_vocab(draft, dp, (1, 3))


@pytest.mark.slow
@pytest.mark.parametrize("structure", ["chain", "tree"], ids=["chain", "tree-3-1-supp-exhausted"])
def test_a_reduced_draft_is_lossless(structure):
    target, tp, draft, dp = _reduced_pair()
    if structure == "chain":
        dec = SpeculativeDecoder(target, draft, 3, T1, cache_len=32)
    else:
        tree = TokenTree.from_branching((3, 1))
        dec = TreeSpeculativeDecoder(target, draft, tree, T1, replacement=False, cache_len=32)
    report = testing.check_decoder(
        dec, tp, dp, draws=1 << 14, prompts=((2,), (1, 4, 3)), mixed=True
    )
    print(report)
    assert report.passed


def test_decode_model_with_ids_is_the_reduced_model():
    target, tp = tiny_llama(29, seed=4)
    head = DistilledDraft(target, 1)
    params = head.with_target_columns(head.init_params(jax.random.PRNGKey(0)), tp)
    ids = np.array([2, 7, 8, 20])
    model, mp = head.decode_model(params, tp, draft_ids=ids)
    assert isinstance(model, ReducedVocabLM) and model.draft_ids == (2, 7, 8, 20)
    want, wp = reduce_vocab(*head.decode_model(params, tp), ids)
    tokens, num = jnp.asarray([[3, 4, 5]], jnp.int32), jnp.asarray([3], jnp.int32)
    np.testing.assert_array_equal(
        model.apply(mp, model.init_state(1, 8), tokens, num)[0],
        want.apply(wp, want.init_state(1, 8), tokens, num)[0],
    )


@pytest.mark.parametrize(
    "ids, match",
    [((3, 1), "sorted distinct"), ((1, 1, 2), "sorted distinct"), ((0, 23), r"\[0, 23\)"),
     ((), "sorted distinct"), ((-1, 2), r"\[0, 23\)")],
)  # fmt: skip
def test_bad_ids_are_named(ids, match):
    model, params = tiny_llama(23)
    with pytest.raises(ValueError, match=f"draft_ids must be.*{match}"):
        reduce_vocab(model, params, ids)


def test_ids_that_are_not_integers_are_refused():
    # int() made 1.5 token 1, "3" token 3 and True token 1: a silently different vocabulary.
    model, params = tiny_llama(23)
    for ids in ((1.5, 3), ("1", "3"), (True, 3)):
        with pytest.raises(TypeError, match="draft_ids must hold integer token ids"):
            reduce_vocab(model, params, ids)
    with pytest.raises(TypeError, match="draft_ids must be a sequence of token ids"):
        reduce_vocab(model, params, "13")
    with pytest.raises(TypeError, match="feature_layers must hold block numbers"):
        EagleHead(model, feature_layers=(0.5,))


def test_a_model_without_an_output_layer_is_refused():
    with pytest.raises(TypeError, match="model must be a specjax transformer"):
        ReducedVocabLM(NgramLM(5, order=2), (1, 2))
