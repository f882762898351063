"""The distilled small transformer (SpS baseline): its loss, a tiny resumable run, decoding.

* The loss at the start of training (the draft = the target's first block) equals KL(p || q)
  computed independently: p from the target's full forward pass, q from `truncated(target, 1)`,
  position t against token t + 1 (the alignment a shifted label would break).
* The tiny preset (`configs/heads.py:tiny,distilled,layers=1`, 60 steps) raises the draft's α at
  t = 0 over the untrained start on held-out random prompts (measured below), and the trained
  draft, loaded back as a plain model draft, decodes token-for-token as AR, and so does the
  same draft over its training data's 8 most frequent tokens (`build_drafts(draft_vocabs=...)`).
* Bad input: a layer count outside [1, target's), a draft vocabulary or reply-only weights for a
  distilled draft, are refused naming the field.
"""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs.heads import get_config
from experiments.common import real_drafts
from experiments.heads import data as heads_data
from experiments.heads import train as heads_train
from specjax.checkpoint import CheckpointError
from specjax.decoding import AutoregressiveDecoder, SpeculativeDecoder, make_warper
from specjax.models.build import truncated
from specjax.models.distilled_draft import DistilledDraft
from specjax.training.distill import divergence
from specjax.training.distilled_draft import distilled_draft_loss
from specjax.training.eagle import HeadBatches, rank_by_frequency
from specjax.training.head_run import export_head, head_settings, head_token_order, load_head

T0 = make_warper(0.0)


def test_the_starting_loss_is_the_first_blocks_kl_to_the_target():
    config = get_config("tiny")
    model, params = heads_train.tiny_target()
    data = heads_train._tiny_data(model, params, config)
    draft = DistilledDraft(model, 1)
    start = draft.with_target_columns(draft.init_params(jax.random.PRNGKey(0)), params)
    # 40 tokens hold every tiny sequence whole, so the cached features saw what the
    # recomputation below sees (a longer sequence is cut to its end, past context kept).
    batch = jax.tree.map(jnp.asarray, HeadBatches(data, 3, 40).batch_at(0))
    loss, _ = distilled_draft_loss(draft, start, params, batch)
    tokens, w = batch["tokens"], batch["weight"]
    num = jnp.full((3,), 40, jnp.int32)
    p_logits = model.forward(params, model.init_state(3, 40), tokens, num).logits
    small, small_params = truncated(model, params, 1)
    q_logits = small.forward(small_params, small.init_state(3, 40), tokens, num).logits
    kl = divergence(p_logits[:, :-1], q_logits[:, :-1], "kl")  # position t -> token t + 1
    want = float((w * kl).sum() / w.sum())
    np.testing.assert_allclose(float(loss), want, rtol=1e-4)
    shifted = float((w[:, :-1] * divergence(p_logits[:, 1:-1], q_logits[:, :-2], "kl")).sum())
    assert abs(shifted / float(w[:, :-1].sum()) - want) > 0.1 * want  # the alignment matters


def test_a_tiny_run_raises_alpha_and_decodes_as_ar(tmp_path):
    """Measured (seeded): α at t = 0 on 64 held-out random prompts, 0.955 trained vs 0.745 at
    the start (the target's first block); the bound is the start plus half the measured gain."""
    from experiments.main import run_mode

    config = get_config("tiny,distilled,layers=1")
    run_mode("heads", config, str(tmp_path / "run"))
    assert json.load(open(tmp_path / "run" / "summary.json"))["steps"] == 60
    model, tp = heads_train.tiny_target()
    head, params = load_head(str(tmp_path / "run"), model)
    assert isinstance(head, DistilledDraft) and head.num_layers == 1
    rng = np.random.default_rng(123)
    prompts = [rng.integers(1, 29, size=int(rng.integers(2, 8))) for _ in range(64)]
    key = jax.random.PRNGKey(1)

    def alpha(block_params):
        draft, dp = head.decode_model(block_params, tp)
        dec = SpeculativeDecoder(model, draft, 4, T0, cache_len=64)
        res = dec.generate(tp, dp, prompts=prompts, key=key, max_new_tokens=24)
        return res.summary()["alpha_empirical"], res

    start = head.with_target_columns(params, tp)
    a_start, _ = alpha(start)
    a_trained, res = alpha(params)
    print("alpha start", a_start, "trained", a_trained)
    assert a_trained >= a_start + 0.1
    ar = AutoregressiveDecoder(model, T0, cache_len=64).generate(
        tp, prompts=prompts, key=key, max_new_tokens=24
    )
    for a, b in zip(ar.new_tokens(), res.new_tokens(), strict=True):
        np.testing.assert_array_equal(a, b)

    # The same draft over its training data's 8 most frequent tokens (`build_drafts`'
    # draft_vocabs: a ReducedVocabLM): ids no less frequent in that data than any other token,
    # and greedy decoding still token for token AR's. The ids come from the token counts the
    # run recorded, in its directory and in an exported head file: the tiny preset keeps its
    # data in memory, so no features cache holds it (as on a machine the head was copied to).
    fingerprint = head_settings(str(tmp_path / "run"))["data"]
    assert not os.path.exists(heads_data._cache_path(fingerprint))
    data = heads_train._tiny_data(model, tp, config)
    assert data.meta["fingerprint"] == fingerprint
    counts = np.bincount(data.tokens, minlength=model.vocab_size)
    exported = export_head(str(tmp_path / "run"), model, str(tmp_path / "d.head.npz"))
    for source in (str(tmp_path / "run"), exported):
        drafts = real_drafts.build_drafts(
            model, tp, None, layers=(), heads=[source], kinds=["distilled"], draft_vocabs=[8]
        )
        [name] = [n for n in drafts if "over 8 tokens" in n]
        draft, dp = drafts[name]
        chosen = np.asarray(draft.draft_ids)
        assert len(chosen) == 8 and counts[chosen].min() >= np.delete(counts, chosen).max()
    np.testing.assert_array_equal(
        head_token_order(exported), rank_by_frequency(data.tokens, model.vocab_size)
    )
    # bench_real --parts=head_layout --heads= times EAGLE heads only, and names the flag.
    with pytest.raises(ValueError, match="heads: .* holds a DistilledDraft, not an EAGLE head"):
        real_drafts.eagle_heads(model, [exported])
    reduced = SpeculativeDecoder(model, draft, 4, T0, cache_len=64).generate(
        tp, dp, prompts=prompts, key=key, max_new_tokens=24
    )
    print("alpha over 8 tokens", reduced.summary()["alpha_empirical"])
    for a, b in zip(ar.new_tokens(), reduced.new_tokens(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_bad_settings_are_refused(tmp_path):
    model, _ = heads_train.tiny_target()
    for layers in (0, 2, True):
        with pytest.raises(ValueError, match="num_layers must lie in"):
            DistilledDraft(model, layers)
    from experiments.main import run_mode

    config = get_config("tiny,distilled")
    config.draft_vocab = 8
    with pytest.raises(ValueError, match="config.draft_vocab and config.train.reply_only"):
        run_mode("heads", config, str(tmp_path / "bad"))


def test_a_draft_vocabulary_without_its_training_data_is_refused_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="training data no-such-data is not cached"):
        heads_data.token_order("no-such-data", 29)
    # A run directory without recorded counts falls back to that cache: refused the same way.
    assert head_token_order(str(tmp_path)) is None
    (tmp_path / "token_counts.npy").write_bytes(b"not an array")
    with pytest.raises(CheckpointError, match="token counts .*token_counts.npy are damaged"):
        head_token_order(str(tmp_path))
