"""A resumable training run of a feature head: `train_head(...)` and `load_head_params(...)`.

The run's guarantees are the zoo loop's (`training/loop.py`):
- resumption: each start restores the newest good checkpoint in `<workdir>/checkpoints` and
  continues at its step; batches are a pure function of (seed, step) and the noise key of
  (seed, step), so a run killed and restarted ends bit-identical to an uninterrupted one;
- little lost work: a checkpoint every `checkpoint_every` steps; SIGTERM/SIGINT save the current
  step and stop; SIGKILL loses at most the steps since the last checkpoint;
- a checkpoint of another configuration or other data is refused, naming what differs; a
  damaged checkpoint is moved aside (`Checkpointer.restore_latest`) or named in the error.
"""

from __future__ import annotations

import json
import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax import checkpoint as ckpt_lib
from specjax import checks
from specjax.training.eagle import (
    HeadBatches,
    frequent_tokens,
    make_head_step,
    output_columns,
    rank_counts,
)
from specjax.training.finite import check_finite_params, check_finite_record
from specjax.training.loss_logits import check_trainable
from specjax.training.optim import make_optimizer
from specjax.training.same_run import check_same_head_run
from specjax.training.signals import StopRequest

CHECKPOINTS = "checkpoints"


def _optimizer(settings: dict):
    return make_optimizer(
        settings["num_steps"],
        peak_lr=settings["learning_rate"],
        warmup_steps=settings["warmup_steps"],
        weight_decay=0.0,
        clip_norm=0.5,
    )


def train_head(head, target_params, data, workdir: str, *, log=print, stop_after=None, **settings):
    """Trains `head` on `data` (a `FeatureData`) into `workdir`, resuming if it can.

    Args:
      head: an `EagleHead`, `MedusaHeads` or `DistilledDraft`.
      target_params: the target's params (frozen; a DistilledDraft's target in the "xla"
        layout).
      data: the feature data.
      workdir: run directory (checkpoints, metrics.jsonl, summary.json).
      log: callable(str) for progress lines.
      stop_after: stop (after checkpointing) once this step is reached, as a preempted run
        would; None: run to num_steps.
      **settings: num_steps, batch_size, seq_len, learning_rate, warmup_steps, seed,
        checkpoint_every, noise, ce_weight, reply_only, ce_vocab (0: the cross-entropy over
        the full vocabulary; N: over the data's N most frequent tokens, `eagle.eagle_loss`);
        for an EAGLE-3 head (`feature_layers`) also ttt_steps, its training-time-test passes
        (default 7, EAGLE-3's; `eagle3.eagle3_loss`), and `data` must hold those layers.

    Returns:
      (head params, summary dict with the final metrics and training seconds).
    """
    defaults = dict(
        num_steps=1000, batch_size=8, seq_len=256, learning_rate=1e-3, warmup_steps=50,
        seed=0, checkpoint_every=100, noise=0.2, ce_weight=0.1, reply_only=False, ce_vocab=0,
    )  # fmt: skip
    check_trainable(head)
    eagle3 = bool(getattr(head, "feature_layers", ()))
    if eagle3:  # only here, so that other runs' recorded settings stay as they were
        defaults["ttt_steps"] = 7
    unknown = set(settings) - set(defaults)
    if unknown:
        raise ValueError(
            f"unknown settings {sorted(unknown)}; known: {sorted(defaults)}"
            + ("" if eagle3 else " (ttt_steps: an EAGLE-3 head's, with feature_layers)")
        )
    cfg = dict(defaults, **settings)
    if cfg["num_steps"] < 1 or cfg["checkpoint_every"] < 1:
        raise ValueError("num_steps and checkpoint_every must be >= 1")
    for name in ("noise", "ce_weight"):  # -1 noise acted as +1; a NaN weight made NaN losses
        value = cfg[name]
        if not (checks.is_real(value) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if eagle3:
        if cfg["ttt_steps"] < 1:
            raise ValueError(f"ttt_steps must be >= 1, got {cfg['ttt_steps']}")
        layers = list(head.feature_layers)
        if data.layers is None or data.meta.get("feature_layers") != layers:
            raise ValueError(
                f"data: the head reads target blocks {layers}; the feature data holds "
                f"{data.meta.get('feature_layers')} (build it with those layers)"
            )
    run_config = dict(cfg, data=data.meta.get("fingerprint", "?"), **describe_head(head))
    tx = _optimizer(cfg)
    batches = HeadBatches(data, cfg["batch_size"], cfg["seq_len"], cfg["seed"], cfg["reply_only"])
    step_fn = jax.jit(
        make_head_step(
            head,
            tx,
            noise=cfg["noise"],
            ce_weight=cfg["ce_weight"],
            ttt_steps=cfg.get("ttt_steps", 1),
        ),  # fmt: skip
        donate_argnums=(0, 1),
    )
    key = jax.random.PRNGKey(cfg["seed"])
    columns = None
    if head.draft_ids is not None:
        columns = output_columns(head, target_params, head.draft_ids)
    elif cfg["ce_vocab"]:
        columns = output_columns(head, target_params, frequent_tokens(data, cfg["ce_vocab"]))
    os.makedirs(workdir, exist_ok=True)
    _write_token_counts(workdir, np.bincount(data.tokens, minlength=head.target.vocab_size))
    checkpointer = ckpt_lib.Checkpointer(os.path.join(workdir, CHECKPOINTS), keep=2)
    abstract = jax.eval_shape(head.init_params, key)
    restored = checkpointer.restore_latest(abstract, jax.eval_shape(tx.init, abstract))
    if restored is None:
        params = head.with_target_columns(
            head.init_params(jax.random.fold_in(key, 1 << 20)), target_params
        )
        opt_state, step, seconds_before = tx.init(params), 0, 0.0
    else:
        step, params, opt_state, meta = restored
        check_same_head_run(meta["config"], run_config, checkpointer.step_path(step))
        seconds_before = float(meta.get("train_seconds", 0.0))
        log(f"resuming from {checkpointer.step_path(step)} (step {step})")
    metrics_path = os.path.join(workdir, "metrics.jsonl")
    start = time.perf_counter()

    def save(at):
        check_finite_params(params, at, checkpointer.directory)
        seconds = seconds_before + time.perf_counter() - start
        meta = {"config": run_config, "train_seconds": seconds, "next_step": at}
        checkpointer.save(at, params, opt_state, meta)

    metrics = {}
    with StopRequest() as stop:
        while step < cfg["num_steps"]:
            batch = jax.tree.map(jnp.asarray, batches.batch_at(step))
            params, opt_state, metrics = step_fn(
                params, opt_state, step, batch, target_params, key, columns
            )
            step += 1
            if step % 10 == 0 or step == cfg["num_steps"]:
                record = {k: round(float(v), 5) for k, v in metrics.items()}
                check_finite_record(record, step, checkpointer.directory)
                record["step"] = step
                with open(metrics_path, "a") as f:
                    f.write(json.dumps(record) + "\n")
                log(f"step {step}/{cfg['num_steps']} {record}")
            halt = stop.signal is not None or (stop_after is not None and step >= stop_after)
            if step % cfg["checkpoint_every"] == 0 or step == cfg["num_steps"] or halt:
                save(step)
            if halt:
                break
    checkpointer.close()
    summary = {
        "steps": step,
        "train_seconds": round(seconds_before + time.perf_counter() - start, 1),
        "data": data.meta,
        "final": {k: float(v) for k, v in metrics.items()},
        "config": run_config,
    }
    if step >= cfg["num_steps"]:
        with open(os.path.join(workdir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
    return params, summary


def describe_head(head) -> dict:
    """What a run records of its head, enough to rebuild it for a target (`load_head`)."""
    kind = type(head).__name__
    if kind == "EagleHead":
        shape = str(head.config)
    elif kind == "DistilledDraft":
        shape = f"num_layers={head.num_layers} of {head.target.config.replace(matmul='xla')}"
    else:
        shape = f"num_heads={head.num_heads}"
    ids = None if head.draft_ids is None else list(head.draft_ids)
    out = {"kind": kind, "head": shape, "draft_ids": ids}
    if getattr(head, "feature_layers", ()):  # EAGLE-3 (absent for EAGLE-1: old runs match)
        out["feature_layers"] = list(head.feature_layers)
    return out


def _run_settings(workdir: str) -> tuple[str, dict]:
    """(checkpoint directory, the run's settings from its newest checkpoint's meta)."""
    directory = os.path.join(workdir, CHECKPOINTS)
    steps = sorted(int(d) for d in os.listdir(directory) if d.isdigit()) if os.path.isdir(
        directory
    ) else []  # fmt: skip
    if not steps:
        raise FileNotFoundError(f"no head checkpoints in {workdir!r} (expected {directory}/<step>)")
    meta_path = os.path.join(directory, str(steps[-1]), "meta", "metadata")
    try:
        with open(meta_path) as f:
            return directory, json.load(f)["config"]
    except (OSError, ValueError, KeyError) as e:
        raise ckpt_lib.CheckpointError(f"checkpoint meta {meta_path} is unreadable: {e}") from e


def load_head(workdir: str, target):
    """(the head for `target`, its newest good params) of a head run directory (an EagleHead,
    MedusaHeads or DistilledDraft, as the run recorded; a DistilledDraft's params are its own
    blocks: `DistilledDraft.decode_model` makes the model draft), or of a file that
    `export_head` wrote (a path ending in ".head.npz").

    The head's draft vocabulary (if any) comes from the run's settings; params are checked
    against their checksums (a damaged newest checkpoint falls back to the one before).
    """
    if workdir.endswith(EXPORT_SUFFIX):
        settings, flat = _read_export(workdir)
        head = _head_of(settings, target, workdir)
        return head, _unflatten(
            flat, jax.eval_shape(head.init_params, jax.random.PRNGKey(0)), workdir
        )
    directory, settings = _run_settings(workdir)
    head = _head_of(settings, target, workdir)
    abstract = jax.eval_shape(head.init_params, jax.random.PRNGKey(0))
    checkpointer = ckpt_lib.Checkpointer(directory, keep=2, async_save=False)
    tx = _optimizer(settings)
    restored = checkpointer.restore_latest(abstract, jax.eval_shape(tx.init, abstract))
    checkpointer.close()
    return head, restored[1]


TOKEN_COUNTS = "token_counts.npy"
_COUNTS_KEY = "__token_counts__"


def _write_token_counts(workdir: str, counts: np.ndarray) -> None:
    """Records how often each token id occurs in the run's training data (int64 [vocab])."""
    path = os.path.join(workdir, TOKEN_COUNTS)
    tmp = path + ".tmp.npy"
    np.save(tmp, counts.astype(np.int64))
    os.replace(tmp, path)


def _recorded_counts(workdir: str) -> np.ndarray | None:
    """The token counts a run directory or an `export_head` file holds (only that array is
    read), None where none were recorded; CheckpointError naming a damaged file."""
    export = workdir.endswith(EXPORT_SUFFIX)
    path = workdir if export else os.path.join(workdir, TOKEN_COUNTS)
    if not os.path.exists(path):
        if export:
            raise FileNotFoundError(path)
        return None
    try:
        if not export:
            return np.load(path, allow_pickle=False)
        with np.load(path, allow_pickle=False) as f:
            return f[_COUNTS_KEY] if _COUNTS_KEY in f.files else None
    except (OSError, ValueError) as e:
        raise ckpt_lib.CheckpointError(f"token counts in {path} are damaged: {e}") from e


def head_token_order(workdir: str) -> np.ndarray | None:
    """Token ids, most frequent in the head's training data first (ties by id), int64 [vocab],
    as the run recorded them (its directory, or an `export_head` file); None for a run that
    recorded none (trained before the counts were kept: `experiments.heads.data.token_order`
    reads them from the cached training data instead). The first N, sorted, are the columns a
    run with `ce_vocab=N` was trained over."""
    counts = _recorded_counts(workdir)
    return None if counts is None else rank_counts(counts)


def head_settings(workdir: str) -> dict:
    """The settings a head run directory (newest checkpoint) or an `export_head` file recorded:
    "kind", "head" (its shape), "data" (the fingerprint of its training data), "ce_vocab", ..."""
    if workdir.endswith(EXPORT_SUFFIX):
        return _read_export(workdir)[0]
    return _run_settings(workdir)[1]


def _head_of(settings: dict, target, workdir: str):
    """The head a run's settings describe, for `target`; ValueError if trained for another shape."""
    from specjax.models.distilled_draft import DistilledDraft
    from specjax.models.eagle_head import EagleHead
    from specjax.models.medusa_heads import MedusaHeads

    ids = settings.get("draft_ids")
    ids = None if ids is None else tuple(ids)
    kind = settings.get("kind", "EagleHead")
    if kind == "MedusaHeads":
        return MedusaHeads(target, int(settings["head"].split("=")[1]), draft_ids=ids)
    if kind == "DistilledDraft":
        layers = int(settings["head"].split()[0].split("=")[1])
        head = DistilledDraft(target, layers)
        if settings["head"] != describe_head(head)["head"]:
            raise ValueError(
                f"the draft in {workdir!r} was distilled for another target shape "
                f"({settings['head']})"
            )
        return head
    layers = tuple(settings.get("feature_layers", ()))
    head = EagleHead(target, draft_ids=ids, feature_layers=layers)
    if settings.get("head") != str(head.config):
        raise ValueError(
            f"the head in {workdir!r} was trained for another target shape "
            f"({settings.get('head')}), not {head.config}"
        )
    return head


def load_head_params(workdir: str, head):
    """The newest good params of a head run directory, for `head` (see `load_head`)."""
    loaded, params = load_head(workdir, head.target)
    if getattr(head, "packed", False) and hasattr(loaded, "with_matmul"):  # saved in xla
        loaded, params = loaded.with_matmul(params, "packed")
    if loaded != head:
        raise ValueError(f"the head in {workdir!r} is not {head!r} (another draft vocabulary?)")
    return params


EXPORT_SUFFIX = ".head.npz"
_SETTINGS_KEY = "__settings__"


def export_head(workdir: str, target, path: str) -> str:
    """Writes a head run's newest good params and settings to one file, without the optimizer
    state (a third of a checkpoint's size): what ships a trained head to another machine.

    Args:
      workdir: the head run directory.
      target: the target the head was trained for (any weight layout).
      path: the file to write; must end in ".head.npz".

    `load_head(path, target)` reads it back bit-identical; the zip format's CRC-32 of each
    array catches a damaged file at load time.

    Returns:
      `path`.
    """
    if not path.endswith(EXPORT_SUFFIX):
        raise ValueError(f"path must end in {EXPORT_SUFFIX!r}, got {path!r}")
    _, settings = _run_settings(workdir)  # what load_head rebuilds the head from
    _, params = load_head(workdir, target)
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    flat = {jax.tree_util.keystr(k): np.asarray(v) for k, v in leaves}
    flat[_SETTINGS_KEY] = np.asarray(json.dumps(settings))
    counts = _recorded_counts(workdir)
    if counts is not None:
        flat[_COUNTS_KEY] = counts
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp.npz"
    np.savez(tmp, **flat)
    os.replace(tmp, path)
    return path


def _read_export(path: str) -> tuple[dict, dict]:
    """(settings, {leaf path: array}) of an `export_head` file (its token counts left out:
    `_recorded_counts`); CheckpointError if damaged."""
    try:
        with np.load(path, allow_pickle=False) as f:
            flat = {k: f[k] for k in f.files}
        settings = json.loads(str(flat.pop(_SETTINGS_KEY)))
        flat.pop(_COUNTS_KEY, None)
    except OSError:
        raise
    except Exception as e:  # noqa: BLE001 - zip/CRC/JSON errors all mean a damaged file
        raise ckpt_lib.CheckpointError(f"head file {path} is damaged or not a head: {e}") from e
    return settings, flat


def _unflatten(flat: dict, abstract, path: str):
    """The params tree of `abstract`'s structure from an export's leaves, checking each leaf's
    shape and dtype (a head of another shape is named, never silently loaded)."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(abstract)
    names = [jax.tree_util.keystr(k) for k, _ in leaves]
    if sorted(names) != sorted(flat):
        raise ckpt_lib.CheckpointError(
            f"head file {path} holds other params: missing {sorted(set(names) - set(flat))}, "
            f"unexpected {sorted(set(flat) - set(names))}"
        )
    out = []
    for name, (_, spec) in zip(names, leaves, strict=True):
        value = flat[name]
        if value.shape != spec.shape or value.dtype != spec.dtype:
            raise ckpt_lib.CheckpointError(
                f"head file {path}: {name} is {value.dtype}{list(value.shape)}, "
                f"the head expects {spec.dtype}{list(spec.shape)}"
            )
        out.append(jnp.asarray(value))
    return jax.tree_util.tree_unflatten(treedef, out)
