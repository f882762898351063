"""How a feature head's self-distillation data is built (`specjax.training.features`,
`experiments/heads/data.py`), on a tiny Llama written as a GGUF file with a chat template:

* `generate_replies` batches prompts sorted by length and hands the replies back in the
  prompts' order: greedy replies equal those of one prompt at a time;
* `score_concatenated` writes every sequence's features into one array (batches padded to a
  multiple of 64 tokens): each row equals the model's own forward pass over that sequence
  alone; the layer features are float16 unless a value is out of float16's range (then
  float32, exact), and non-finite ones are refused;
* the "broad" prompt set answers stage 1's writing prompts first, then stage 2's; a layered
  build also saves the plain data, which a head without layers then loads, generating nothing.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.common.broad_prompts import writing_prompts
from experiments.heads import data as heads_data
from specjax.convert.gguf import load_gguf
from specjax.decoding.prefill import target_features
from specjax.training import features as feats
from tests.gguf_writer import write_tiny_gguf

LAYERS = (0, 1)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    path = os.fspath(tmp_path_factory.mktemp("heads-data") / "tiny.gguf")
    write_tiny_gguf(path, context=1024, tied=True)
    return load_gguf(path)


def _prompts(lengths, vocab, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, vocab, size=n).astype(np.int32) for n in lengths]


def test_sorted_batches_return_each_reply_in_the_prompts_order(target):
    model, params, _ = target
    prompts = _prompts([40, 3, 70, 9, 20], model.vocab_size)
    kw = dict(max_new_tokens=5, temperature=0.0, seed=0, eos_id=None, cache_len=128)
    batched = feats.generate_replies(model, params, prompts, batch_size=2, **kw)
    for prompt, reply in zip(prompts, batched, strict=True):
        np.testing.assert_array_equal(reply[: len(prompt)], prompt)
        alone = feats.generate_replies(model, params, [prompt], batch_size=1, **kw)[0]
        np.testing.assert_array_equal(reply, alone)


def test_concatenated_features_are_each_sequences_own_forward_pass(target):
    model, params, _ = target
    # sorted batches of 2: (90, 140) and (150,) pad to 192 tokens (a power of two: 256)
    sequences = _prompts([5, 90, 17, 64, 33, 150, 140], model.vocab_size, seed=1)
    hidden, layers = feats.score_concatenated(model, params, sequences, batch_size=2,
                                              layers=LAYERS)  # fmt: skip
    assert hidden.dtype == np.float32 and layers.dtype == np.float16
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sequences])])
    assert hidden.shape[0] == layers.shape[0] == offsets[-1]
    for s, seq in enumerate(sequences):
        tokens = jnp.asarray(seq)[None]
        out = model.forward(params, model.init_state(1, len(seq)), tokens,
                            jnp.array([len(seq)]), return_layers=LAYERS)  # fmt: skip
        want_h = np.asarray(out.hidden[0])
        want_l = np.asarray(target_features(out, LAYERS)[0])
        rows = slice(offsets[s], offsets[s + 1])
        np.testing.assert_allclose(hidden[rows], want_h, rtol=2e-5, atol=2e-5)
        # float16 rounding: half a unit in the 11th bit, relative
        np.testing.assert_allclose(layers[rows].astype(np.float32), want_l, rtol=1e-3, atol=1e-4)
    plain = feats.score_features(model, params, sequences, batch_size=2)
    np.testing.assert_array_equal(np.concatenate(plain), hidden)


def test_scoring_batches_pad_to_the_next_multiple_of_64():
    widths = [feats.score_width(n) for n in (1, 64, 65, 150, 192, 300, 449)]
    assert widths == [64, 64, 128, 192, 192, 320, 512]


def test_layer_features_beyond_float16_stay_float32_and_non_finite_ones_are_refused(target):
    model, params, _ = target
    sequences = _prompts([6, 11], model.vocab_size, seed=2)
    big = jax.tree_util.tree_map_with_path(
        lambda path, x: x * 1e6 if "embed" in jax.tree_util.keystr(path) else x, params
    )
    hidden, layers = feats.score_concatenated(model, big, sequences, layers=LAYERS)
    assert layers.dtype == np.float32 and np.abs(layers).max() > 65504
    _, exact = feats.score_concatenated(model, big, sequences, layers=LAYERS,
                                        layer_dtype=np.float32)  # fmt: skip
    np.testing.assert_array_equal(layers, exact)
    nan = jax.tree.map(lambda x: x * np.nan, params)
    with pytest.raises(ValueError, match="layer features of sequence .* are not finite"):
        feats.score_concatenated(model, nan, sequences, layers=LAYERS)


def test_the_broad_set_answers_writing_prompts_first_and_shares_its_replies(
    target, tmp_path, monkeypatch
):
    model, params, tokenizer = target
    monkeypatch.setattr(heads_data, "_cache_path", lambda f: os.fspath(tmp_path / f"{f}.npz"))
    kw = dict(num_prompts=12, max_new_tokens=3, batch_size=4, max_prompt_tokens=400,
              log=lambda *_: None)  # fmt: skip
    data = heads_data.feature_data(model, params, tokenizer, layers=LAYERS, **kw)
    meta = data.meta
    assert meta["prompt_set"] == "broad" and meta["feature_layers"] == list(LAYERS)
    assert meta["sequences"] + meta["prompts_skipped"] == 12
    assert data.layers.dtype == np.float16 and data.num_sequences == meta["sequences"]
    for s, prompt in enumerate(writing_prompts(2, seed=0)):  # stage 1: 12 // 6 prompts
        ids = tokenizer.apply_chat_template(prompt.messages)
        start = int(data.offsets[s])
        np.testing.assert_array_equal(data.tokens[start : start + len(ids)], ids)
    # The plain data (no layers) is the same replies, saved beside: nothing is generated again.
    monkeypatch.setattr(heads_data, "generate_replies", _never)
    monkeypatch.setattr(heads_data, "score_concatenated", _never)
    plain = heads_data.feature_data(model, params, tokenizer, **kw)
    assert plain.layers is None and "feature_layers" not in plain.meta
    np.testing.assert_array_equal(plain.tokens, data.tokens)
    np.testing.assert_array_equal(plain.features, data.features)
    stdlib_meta = dict(meta, prompt_set="stdlib")
    assert heads_data._fingerprint(stdlib_meta) != heads_data._fingerprint(meta)


def test_an_unknown_prompt_set_is_named(target):
    model, params, tokenizer = target
    with pytest.raises(ValueError, match="prompt_set must be one of"):
        heads_data.feature_data(model, params, tokenizer, num_prompts=2, max_new_tokens=2,
                                prompt_set="wiki")  # fmt: skip


def _never(*args, **kwargs):
    raise AssertionError("the cached data should have been used")
