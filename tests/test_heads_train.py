"""Training a feature head (configs/heads.py:tiny): it learns, resumes bit-identically, refuses
what it must.

The tiny preset: a random two-layer Llama over 29 tokens, 48 random prompts, 24-token replies.
"""

from __future__ import annotations

import json
import os
import shutil

import jax
import numpy as np
import pytest

from configs.heads import get_config
from experiments.heads import train as heads_train
from specjax.checkpoint import CheckpointError
from specjax.decoding import SpeculativeDecoder, make_warper
from specjax.models import EagleHead
from specjax.training.eagle import HeadBatches, eagle_loss, frequent_tokens, output_columns
from specjax.training.features import FeatureData
from specjax.training.head_run import export_head, load_head, load_head_params, train_head

SETTINGS = dict(
    num_steps=24, batch_size=4, seq_len=16, learning_rate=3e-3, warmup_steps=4,
    checkpoint_every=8,
)  # fmt: skip


@pytest.fixture(scope="module")
def tiny():
    """(model, params, FeatureData) of the tiny preset."""
    config = get_config("tiny")
    model, params = heads_train.tiny_target()
    return model, params, heads_train._tiny_data(model, params, config)


def _equal(a, b) -> bool:
    return all(jax.tree.leaves(jax.tree.map(lambda x, y: bool((x == y).all()), a, b)))


# orbax's restore of a damaged file leaves an asyncio callback behind that pytest reports.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_interrupted_run_resumes_bit_identical(tiny, tmp_path):
    """A run stopped at step 12 (as a kill after a checkpoint), then restarted, ends with the
    exact params of an uninterrupted run; a damaged newest checkpoint is moved aside and the run
    resumes from the one before, still bit-identical."""
    model, params, data = tiny
    head = EagleHead(model)
    whole, _ = train_head(head, params, data, str(tmp_path / "a"), log=lambda s: None, **SETTINGS)
    b = str(tmp_path / "b")
    train_head(head, params, data, b, log=lambda s: None, stop_after=12, **SETTINGS)
    resumed, summary = train_head(head, params, data, b, log=lambda s: None, **SETTINGS)
    assert summary["steps"] == 24 and _equal(whole, resumed)
    assert _equal(load_head_params(str(tmp_path / "a"), head), whole)
    packed, packed_whole = head.with_matmul(whole, "packed")  # saved xla, asked for packed
    assert _equal(load_head_params(str(tmp_path / "a"), packed), packed_whole)
    with pytest.raises(ValueError, match="head: this EagleHead is in the packed layout"):
        train_head(packed, params, data, str(tmp_path / "p"), log=lambda s: None, **SETTINGS)
    assert not os.path.exists(tmp_path / "p")  # refused before the run directory is made

    c = str(tmp_path / "c")
    train_head(head, params, data, c, log=lambda s: None, stop_after=16, **SETTINGS)
    damaged = 0
    for root, _, files in os.walk(os.path.join(c, "checkpoints", "16", "params")):
        for name in files:  # every data file of step 16's params, sizes kept
            path = os.path.join(root, name)
            if os.path.getsize(path) and not name.startswith("_"):
                with open(path, "r+b") as f:
                    f.write(b"\x5a" * os.path.getsize(path))
                damaged += 1
    assert damaged
    resumed, _ = train_head(head, params, data, c, log=lambda s: None, **SETTINGS)
    assert os.path.isdir(os.path.join(c, "checkpoints", "corrupt_16"))
    assert _equal(whole, resumed)


def test_other_settings_are_refused(tiny, tmp_path):
    model, params, data = tiny
    head = EagleHead(model)
    d = str(tmp_path / "run")
    train_head(head, params, data, d, log=lambda s: None, stop_after=8, **SETTINGS)
    other = dict(SETTINGS, learning_rate=1e-2)
    with pytest.raises(ValueError, match="learning_rate: 0.003 in the checkpoint, 0.01 now"):
        train_head(head, params, data, d, log=lambda s: None, **other)
    with pytest.raises(ValueError, match="unknown settings"):
        train_head(head, params, data, d, log=lambda s: None, lr=1.0)


def test_a_diverging_run_stops_before_saving_nan(tiny, tmp_path):
    """A learning rate of 1e9 turns the loss NaN within the run. It used to go on, save NaN
    checkpoints (two kept: the good ones pushed out) and end as a success."""
    from specjax.training.finite import TrainingDivergedError

    model, params, data = tiny
    head = EagleHead(model)
    run = str(tmp_path / "run")
    with pytest.raises(
        TrainingDivergedError, match=r"training diverged.* at step \d+; nothing was saved"
    ):
        train_head(head, params, data, run, log=lambda s: None, **dict(SETTINGS, learning_rate=1e9))
    directory = os.path.join(run, "checkpoints")
    if any(n.isdigit() for n in os.listdir(directory)):  # what was saved before it is finite
        saved = load_head_params(run, head)
        assert all(np.isfinite(np.asarray(x, np.float32)).all() for x in jax.tree.leaves(saved))
    assert not os.path.exists(os.path.join(run, "summary.json"))
    for name, value in (("noise", -1.0), ("ce_weight", float("nan")), ("noise", True)):
        with pytest.raises(ValueError, match=f"{name} must be a finite number >= 0"):
            train_head(head, params, data, str(tmp_path / name), **dict(SETTINGS, **{name: value}))


def test_an_exported_head_loads_bit_identical_and_damage_is_named(tiny, tmp_path):
    """export_head drops the optimizer state and keeps every param bit for bit; a truncated or
    overwritten file, a wrong suffix and a head of another shape are refused, naming the file."""
    model, params, data = tiny
    head = EagleHead(model)
    run = str(tmp_path / "run")
    trained, _ = train_head(head, params, data, run, log=lambda s: None, **SETTINGS)
    path = export_head(run, model, str(tmp_path / "out" / "tiny.head.npz"))
    loaded, exported = load_head(path, model)
    assert loaded == head and _equal(exported, trained)
    from experiments.common.real_drafts import eagle_heads

    [(name, (got, got_params))] = eagle_heads(model, [path]).items()  # bench_real's --heads
    assert name == "EAGLE-1 (tiny)" and got == head and _equal(got_params, trained)
    # bench_real's --trees: a branching, or any tree by its parents (Sequoia's, printed by
    # --parts=head_trees), each drafted by the same head.
    from experiments.common.real_drafts import build_drafts
    from specjax.decoding import TokenTree

    sequoia = TokenTree.parse("-1/0/0/1")
    drafts = build_drafts(
        model, params, None, heads=[path], trees=[(2, 1), sequoia], kinds=["EAGLE-1 tree"]
    )
    assert sorted(drafts) == ["EAGLE-1 tree -1/0/0/1 (tiny)", "EAGLE-1 tree 2-1 (tiny)"]
    assert drafts["EAGLE-1 tree -1/0/0/1 (tiny)"][2] == sequoia
    assert drafts["EAGLE-1 tree 2-1 (tiny)"][2] == TokenTree.from_branching((2, 1))
    assert jax.tree.structure(exported) == jax.tree.structure(trained)
    with pytest.raises(ValueError, match="must end in '.head.npz'"):
        export_head(run, model, str(tmp_path / "tiny.npz"))

    raw = open(path, "rb").read()
    for name, damaged in [("cut", raw[: len(raw) // 2]), ("flipped", _flip_middle(raw))]:
        bad = str(tmp_path / f"{name}.head.npz")
        with open(bad, "wb") as f:
            f.write(damaged)
        with pytest.raises(CheckpointError, match=f"head file .*{name}.head.npz is damaged"):
            load_head(bad, model)

    with np.load(path) as f:
        flat = {k: f[k] for k in f.files}
    name = next(k for k in flat if k != "__settings__")
    np.savez(str(tmp_path / "shape.head.npz"), **dict(flat, **{name: flat[name][..., :1]}))
    with pytest.raises(CheckpointError, match="shape.head.npz: .* the head expects float32"):
        load_head(str(tmp_path / "shape.head.npz"), model)
    other_vocab, _ = heads_train.tiny_target(vocab=31)
    with pytest.raises(ValueError, match="trained for another target shape"):
        load_head(path, other_vocab)


def _flip_middle(raw: bytes) -> bytes:
    """`raw` with 64 bytes in the middle of the file inverted (inside array data: CRC-32 fails)."""
    mid = len(raw) // 2
    return raw[:mid] + bytes(b ^ 0xFF for b in raw[mid : mid + 64]) + raw[mid + 64 :]


def test_training_raises_acceptance(tmp_path):
    """The tiny preset's head, trained 60 steps, accepts far more than an untrained one at t = 0.

    Measured (seeded): α 0.124 trained vs 0.009 random on 64 held-out random prompts; the bound
    0.06 is half the observed value.
    """
    from experiments.main import run_mode

    config = get_config("tiny")
    run_mode("heads", config, str(tmp_path / "tiny"))
    summary = json.load(open(tmp_path / "tiny" / "summary.json"))
    assert summary["steps"] == 60
    model, tp = heads_train.tiny_target()
    head = EagleHead(model)
    trained = load_head_params(str(tmp_path / "tiny"), head)
    rng = np.random.default_rng(123)
    prompts = [rng.integers(1, 29, size=int(rng.integers(2, 8))) for _ in range(64)]
    dec = SpeculativeDecoder(model, head, 4, make_warper(0.0), cache_len=64)
    res = dec.generate(tp, trained, prompts=prompts, key=jax.random.PRNGKey(1), max_new_tokens=24)
    alpha = res.summary()["alpha_empirical"]
    print("trained alpha", alpha)
    assert alpha >= 0.06


def test_loss_over_every_column_is_the_full_loss(tiny):
    """`columns` of the whole vocabulary (in id order) gives the full-vocabulary loss."""
    model, params, data = tiny
    head = EagleHead(model)
    hp = head.init_params(jax.random.PRNGKey(0))
    batch = jax.tree.map(jax.numpy.asarray, HeadBatches(data, 2, 12).batch_at(0))
    key = jax.random.PRNGKey(1)
    full, _ = eagle_loss(head, hp, params, batch, key)
    cols = output_columns(head, params, np.arange(model.vocab_size))
    sub, _ = eagle_loss(head, hp, params, batch, key, columns=cols)
    np.testing.assert_allclose(float(sub), float(full), rtol=1e-5)
    top = frequent_tokens(data, 5)
    counts = np.bincount(data.tokens, minlength=29)
    assert counts[top].min() >= np.delete(counts, top).max()


def test_batches_weight_the_right_pairs():
    """Hand-built data: sequence [5 6 7 8 9] with a 2-token prompt; reply_only weights the pairs
    whose predicted distribution is over a reply token."""
    feats = np.arange(5 * 3, dtype=np.float32).reshape(5, 3)
    data = FeatureData.build([np.array([5, 6, 7, 8, 9])], [2], [feats], {"fingerprint": "x"})
    # loss_mask[j]: position j predicts a reply token: j = 1, 2, 3 (tokens 7, 8, 9).
    np.testing.assert_array_equal(data.loss_mask, [False, True, True, True, False])
    every = HeadBatches(data, 1, 6).batch_at(0)
    np.testing.assert_array_equal(every["tokens"][0], [5, 6, 7, 8, 9, 0])
    # pairs t = 0..4 predict f_{t+1}: real for t + 1 <= 4.
    np.testing.assert_array_equal(every["weight"][0], [1, 1, 1, 1, 0])
    reply = HeadBatches(data, 1, 6, reply_only=True).batch_at(0)
    # pair t trains q over token t + 2: a reply token for t = 0, 1, 2 (tokens 7, 8, 9).
    np.testing.assert_array_equal(reply["weight"][0], [1, 1, 1, 0, 0])
    cut = HeadBatches(data, 1, 3).batch_at(0)  # the last 3 tokens: 7 8 9
    np.testing.assert_array_equal(cut["tokens"][0], [7, 8, 9])
    np.testing.assert_array_equal(cut["features"][0], feats[2:])


def test_feature_cache_checks(tmp_path):
    feats = np.ones((4, 3), np.float32)
    data = FeatureData.build([np.array([1, 2, 3, 4])], [2], [feats], {"fingerprint": "abc"})
    path = str(tmp_path / "f.npz")
    data.save(path)
    assert FeatureData.load(path, "abc").tokens.tolist() == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="built from other data"):
        FeatureData.load(path, "other")
    shutil.copy(path, path + ".bak")
    with open(path, "r+b") as f:
        f.seek(40)
        f.write(b"\xff" * 64)
    with pytest.raises(ValueError, match="corrupt"):
        FeatureData.load(path)
