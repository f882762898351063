"""specjax.models.build: model configs from config sections, random weights, drafts by kind."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models import (
    NgramLM,
    PromptLookupLM,
    TransformerConfig,
    TransformerLM,
    UniformLM,
    build,
    fit_ngram,
    sequence_logits,
)

VOCAB = 40
FIELDS = dict(num_layers=3, num_heads=2, embed_dim=16, mlp_dim=32, max_len=32)


def test_model_config_reads_family_drops_size_and_applies_overrides():
    cfg = build.model_config(dict(FIELDS, family="llama", size="mini"), VOCAB, max_len=64)
    assert cfg == TransformerConfig.llama(VOCAB, **dict(FIELDS, max_len=64))
    assert build.model_config(FIELDS, VOCAB) == TransformerConfig.gpt2(VOCAB, **FIELDS)
    assert build.model_config(FIELDS, VOCAB, family="llama") == TransformerConfig.llama(
        VOCAB, **FIELDS
    )
    with pytest.raises(ValueError, match="config.target.family must be one of"):
        build.model_config(dict(FIELDS, family="bert"), VOCAB, where="config.target")


def test_init_model_is_the_models_own_initialiser():
    key = jax.random.PRNGKey(3)
    model, params = build.init_model(FIELDS, VOCAB, key)
    want = model.init_params(key)
    assert jax.tree.structure(params) == jax.tree.structure(want)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_truncated_draft_shares_the_targets_first_blocks():
    target, tparams = build.init_model(FIELDS, VOCAB, jax.random.PRNGKey(0))
    draft, dparams = build.build_draft("truncated:2", target, tparams)
    assert draft.config.num_layers == 2 and draft.config.embed_dim == target.config.embed_dim
    assert sorted(dparams) == ["block_0", "block_1", "embed", "final_norm", "pos_embed"]
    assert dparams["block_1"] is tparams["block_1"]
    logits = sequence_logits(draft, dparams, jnp.arange(6, dtype=jnp.int32)[None])
    assert logits.shape == (1, 6, VOCAB) and bool(jnp.isfinite(logits).all())
    for bad in ("truncated:0", "truncated:4"):
        with pytest.raises(ValueError, match="1 <= K <= 3"):
            build.build_draft(bad, target, tparams)


def test_build_draft_kinds():
    target, tparams = build.init_model(FIELDS, VOCAB, jax.random.PRNGKey(0))
    assert build.build_draft("none", target, tparams) is None
    assert build.build_draft("self", target, tparams) == (target, tparams)
    draft, dparams = build.build_draft(
        "transformer", target, tparams, fields=dict(FIELDS, num_layers=1), key=jax.random.key(1)
    )
    assert isinstance(draft, TransformerLM) and draft.config.num_layers == 1
    tokens = np.arange(100) % VOCAB
    bigram, bparams = build.build_draft("bigram", target, tparams, tokens=tokens, smoothing=0.5)
    assert bigram == NgramLM(VOCAB, 2)
    np.testing.assert_array_equal(
        bparams["log_probs"], fit_ngram(tokens, VOCAB, 2, smoothing=0.5)["log_probs"]
    )
    assert build.build_draft("uniform", target, tparams) == (UniformLM(VOCAB), {})
    lookup, _ = build.build_draft("prompt_lookup", target, tparams, max_ngram=4, min_ngram=2)
    assert lookup == PromptLookupLM(VOCAB, 4, 2)
    with pytest.raises(ValueError, match="needs the tokens"):
        build.build_draft("unigram", target, tparams)
    with pytest.raises(ValueError, match="draft kind must be one of"):
        build.build_draft("trigram", target, tparams)
