"""The training loop: `train_and_evaluate(config, workdir)` for language models and distillation.

What a run guarantees:
- Resumption: each start restores the newest good checkpoint under `<workdir>/checkpoints` and
  continues at its step; batches are a pure function of (data seed, step), so a resumed run
  sees exactly the batches and reaches exactly the parameters of an uninterrupted one.
- Little lost work: checkpoints every `checkpoint_every` steps (keep the last
  `keep_checkpoints`); SIGTERM or SIGINT (Ctrl-C, a scheduler's preemption) saves the current
  step before exiting; SIGKILL loses at most the steps since the last checkpoint.
- A checkpoint written by a different configuration is refused with the differing fields named.

Outputs in the workdir: `checkpoints/`, `metrics.jsonl` (one JSON record per log and eval
point), `summary.json`, and `ngrams/{unigram,bigram}.npz`; with `config.export` the final
parameters also go to the model cache (`zoo.model_cache_dir`) for later experiments.
"""

from __future__ import annotations

import contextlib
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from specjax import checkpoint as ckpt_lib
from specjax.alpha import mean_alpha
from specjax.data.batches import TrainBatches
from specjax.data.corpora import load_corpus, load_corpus_info
from specjax.data.tokenizer import ByteTokenizer
from specjax.models.build import model_config
from specjax.models.transformer import TransformerLM
from specjax.training import ngrams, zoo
from specjax.training.distill import make_distill_step
from specjax.training.finite import check_finite_params, check_finite_record
from specjax.training.optim import learning_rate_schedule, make_optimizer
from specjax.training.progress import (
    ProgressBar,
    Throughput,
    append_metrics,
    quiet_orbax_logs,
    truncate_metrics,
)
from specjax.training.same_run import check_same_run
from specjax.training.signals import StopRequest
from specjax.training.steps import (
    TrainState,
    evaluate,
    init_train_state,
    make_eval_step,
    make_train_step,
)

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"


def _check_config(config) -> None:
    for name in ("num_steps", "log_every", "eval_every", "checkpoint_every"):
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"config.{name} must be an integer >= 1, got {value!r}")
    if config.stop_at_step and not 0 < config.stop_at_step <= config.num_steps:
        raise ValueError(
            f"config.stop_at_step must be 0 (off) or in [1, num_steps={config.num_steps}], "
            f"got {config.stop_at_step!r}"
        )


def _resolve_target(path_or_name: str) -> str:
    """A distillation target given as a path, or as the name of a model-cache directory."""
    if os.path.isabs(path_or_name) or os.path.exists(path_or_name):
        return path_or_name
    return os.path.join(zoo.cache_root(), path_or_name)


def _initial_params(path_or_name: str, abstract_params):
    """Parameters of an exported model to start from, checked against this model's shapes."""
    path = _resolve_target(path_or_name)
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"config.distill.init={path_or_name!r}: no exported model at {path}; train the "
            "data-trained draft of the same size first"
        )
    _, params, _ = ckpt_lib.load_model(path)
    want = jax.tree_util.tree_map(lambda x: (x.shape, x.dtype), abstract_params)
    have = jax.tree_util.tree_map(lambda x: (x.shape, x.dtype), params)
    if want != have:
        raise ValueError(
            f"config.distill.init={path_or_name!r}: its parameters do not match this model's "
            "shapes/dtypes (another size or family?)"
        )
    return params


class _Task:
    """What differs between plain training and distillation: the step and the evaluation."""

    def __init__(self, config, model, tx, val_tokens):
        seq_len, eval_bs = config.data.seq_len, config.eval_batch_size
        jit_eval = jax.jit(make_eval_step(model))
        self.target = None
        if config.distill.target:
            target_dir = _resolve_target(config.distill.target)
            self.target, self.target_params, target_meta = ckpt_lib.load_model(target_dir)
            self.target_info = {"dir": target_dir, "name": target_meta["config"]["name"]}
            step = make_distill_step(
                model,
                self.target,
                tx,
                config.distill.objective,
                config.distill.temperature,
                config.distill.kl_weight,
            )
            jit_step = jax.jit(step, donate_argnums=0)
            self.step_fn = lambda state, batch: jit_step(state, batch, self.target_params)
        else:
            jit_step = jax.jit(make_train_step(model, tx), donate_argnums=0)
            self.step_fn = jit_step

        def eval_fn(params, max_windows):
            metrics = evaluate(jit_eval, params, val_tokens, seq_len, eval_bs, max_windows)
            if self.target is not None:
                metrics.update(
                    mean_alpha(
                        self.target,
                        self.target_params,
                        model,
                        params,
                        val_tokens,
                        seq_len,
                        batch_size=eval_bs,
                        max_windows=config.alpha_windows or None,
                    )
                )
            return metrics

        self.eval_fn = eval_fn


class _Clock:
    """Training seconds: this run's wall time minus evaluation/saving, plus earlier runs'."""

    def __init__(self, seconds_before: float):
        self.seconds_before = seconds_before
        self.start, self.overhead = time.perf_counter(), 0.0

    def train_seconds(self) -> float:
        """Seconds spent training so far, over all runs of this workdir."""
        return self.seconds_before + time.perf_counter() - self.start - self.overhead

    @contextlib.contextmanager
    def overhead_of(self):
        """Time spent inside the block is not training time."""
        t0 = time.perf_counter()
        yield
        self.overhead += time.perf_counter() - t0


def _restore_or_init(config, config_dict, model, tx, checkpointer, train_info, metrics_path):
    """The state to start from: the newest good checkpoint (checked), else fresh parameters.

    Returns:
      (TrainState, training seconds of earlier runs).
    """
    abstract_params = jax.eval_shape(model.init_params, jax.random.PRNGKey(config.seed))
    latest = checkpointer.latest_step()
    saved = None if latest is None else checkpointer.read_meta(latest)
    if saved is not None and "config" in saved:  # another config: say which field, read nothing
        check_same_run(saved["config"], config_dict, checkpointer.step_path(latest))
    restored = checkpointer.restore_latest(
        abstract_params, jax.eval_shape(tx.init, abstract_params)
    )
    if restored is None:
        if config.distill.get("init"):
            params = _initial_params(config.distill.init, abstract_params)
        else:
            params = model.init_params(jax.random.PRNGKey(config.seed))
        if os.path.exists(metrics_path):
            os.remove(metrics_path)
        return init_train_state(params, tx), 0.0
    step, params, opt_state, meta = restored
    check_same_run(meta["config"], config_dict, checkpointer.step_path(step))
    if meta["data"]["fingerprint"] != train_info.fingerprint:
        raise ValueError(
            f"checkpoint {checkpointer.step_path(step)} was trained on {config.data.corpus} "
            f"data with fingerprint {meta['data']['fingerprint']}, but the corpus now has "
            f"{train_info.fingerprint} (another Python stdlib or corpus version); resuming "
            "would mix two datasets. Use another --workdir."
        )
    if meta["data"]["next_step"] != step:
        raise ckpt_lib.CheckpointError(
            f"checkpoint {checkpointer.step_path(step)} says the data iterator is at step "
            f"{meta['data']['next_step']}, not {step}"
        )
    truncate_metrics(metrics_path, step)
    logging.info("Resuming from %s (step %d)", checkpointer.step_path(step), step)
    state = TrainState(jnp.asarray(step, jnp.int32), params, opt_state)
    return state, float(meta.get("train_seconds", 0.0))


def _log_start(config, model, train_info, task) -> None:
    logging.info(
        "Run %s: %s params %.3fM, corpus %s (%d train tokens), %d steps x %d x %d tokens%s",
        config.name,
        config.model.get("size", "custom"),
        model.config.num_params() / 1e6,
        config.data.corpus,
        train_info.tokens.size,
        config.num_steps,
        config.data.batch_size,
        config.data.seq_len,
        f", distilled from {task.target_info['name']}" if task.target is not None else "",
    )


def _log_train(pending, step, config, meter, schedule, clock, metrics_path, bar) -> None:
    """Averages the device metrics since the last log line; writes, logs and draws them."""
    host = jax.device_get(pending)
    record = {k: float(np.mean([m[k] for m in host])) for k in host[0]}
    record.update(
        step=step,
        kind="train",
        tokens_per_second=meter.rate(),
        learning_rate=float(schedule(step - 1)),
        train_seconds=clock.train_seconds(),
    )
    check_finite_record(record, step, os.path.dirname(metrics_path) or ".")
    append_metrics(metrics_path, record)
    logging.info(
        "step %d/%d loss %.4f grad_norm %.3f lr %.2e %.0f tokens/s",
        step,
        config.num_steps,
        record["loss"],
        record["grad_norm"],
        record["learning_rate"],
        record["tokens_per_second"],
    )
    bar.update(step, f"loss {record['loss']:.3f}")


def _final_eval(config, workdir, task, state, step, train_info, vocab_size, summary, make_meta):
    """The full evaluation of a finished run, its n-gram drafts and its export (into summary)."""
    t0 = time.perf_counter()
    final = task.eval_fn(state.params, config.final_eval_windows or None)
    summary["eval_seconds"] = time.perf_counter() - t0
    summary["eval"] = final
    append_metrics(
        os.path.join(workdir, METRICS_FILE), {"step": step, "kind": "final_eval", **final}
    )
    logging.info("final eval: %s", _fmt(final))
    if config.ngrams:
        dirs = [os.path.join(workdir, "ngrams")]
        if config.export:
            dirs.append(ngrams.ngram_cache_dir(config.data.corpus, train_info.fingerprint))
        summary["ngrams"] = ngrams.fit_and_save(
            train_info.tokens, vocab_size, dirs, config.data.corpus, train_info.fingerprint
        )
    if config.export:
        meta = make_meta(step, final)
        meta["train_seconds"] = summary["train_seconds"]
        summary["export_dir"] = ckpt_lib.export_model(
            zoo.model_cache_dir(config.to_dict()), state.params, meta
        )
        logging.info("Exported parameters to %s", summary["export_dir"])


def train_and_evaluate(config, workdir: str) -> dict:
    """Trains (or distills) the model `config` describes, resuming from `workdir` if possible.

    Args:
      config: a ConfigDict as built by `configs/train.py` (model, data, optim, num_steps, seed,
        distill, logging/eval/checkpoint intervals; see there).
      workdir: run directory (created if missing).

    Returns:
      The summary dict also written to `<workdir>/summary.json`: steps, tokens seen, wall and
      training seconds, final evaluation metrics, export directory; "stopped" names the signal
      or reason if the run ended early.
    """
    # ---------------------------------------------------------------------------
    # Data, model, optimizer and task (plain training or distillation)
    # ---------------------------------------------------------------------------
    _check_config(config)
    quiet_orbax_logs()
    os.makedirs(workdir, exist_ok=True)
    config_dict = config.to_dict()
    tokenizer = ByteTokenizer()
    data_dir = config.data.data_dir or None
    train_info = load_corpus_info(config.data.corpus, "train", tokenizer, data_dir=data_dir)
    val_tokens = load_corpus(config.data.corpus, "validation", tokenizer, data_dir=data_dir)
    model = TransformerLM(model_config(config.model.to_dict(), tokenizer.vocab_size))
    seq_len, batch_size = config.data.seq_len, config.data.batch_size
    if seq_len > model.config.max_len:
        raise ValueError(
            f"config.data.seq_len={seq_len} exceeds config.model.max_len={model.config.max_len}"
        )
    optim = config.optim.to_dict()
    tx = make_optimizer(config.num_steps, **optim)
    schedule = learning_rate_schedule(
        optim["peak_lr"], optim["warmup_steps"], config.num_steps, optim["end_lr_fraction"]
    )
    task = _Task(config, model, tx, val_tokens)
    _log_start(config, model, train_info, task)

    # ---------------------------------------------------------------------------
    # Restore the newest good checkpoint, or start fresh
    # ---------------------------------------------------------------------------
    checkpointer = ckpt_lib.Checkpointer(
        os.path.join(workdir, ckpt_lib.CHECKPOINT_SUBDIR),
        keep=config.keep_checkpoints,
        async_save=config.async_checkpoints,
    )
    metrics_path = os.path.join(workdir, METRICS_FILE)
    state, seconds_before = _restore_or_init(
        config, config_dict, model, tx, checkpointer, train_info, metrics_path
    )
    start_step = int(state.step)
    batches = TrainBatches(
        train_info.tokens, batch_size, seq_len, config.data.seed, start_step=start_step
    )
    tokens_per_step = batch_size * seq_len
    last_eval: dict = {}
    clock = _Clock(seconds_before)

    def make_meta(step, eval_metrics):
        return {
            "step": step,
            "config": config_dict,
            "model": ckpt_lib.model_config_to_dict(model.config),
            "data": {
                "corpus": config.data.corpus,
                "fingerprint": train_info.fingerprint,
                "seed": config.data.seed,
                "next_step": step,
            },
            "fingerprint": zoo.run_fingerprint(config_dict),
            "tokens_seen": step * tokens_per_step,
            "train_seconds": clock.train_seconds(),
            "eval": eval_metrics,
        }

    # ---------------------------------------------------------------------------
    # Main train loop: step, log, evaluate, checkpoint; stop on a signal
    # ---------------------------------------------------------------------------
    bar = ProgressBar(config.num_steps, start=start_step)
    meter = Throughput()
    pending = []  # device metrics since the last log line (fetched together: no per-step sync)
    stopped = None
    step = start_step
    with StopRequest() as stop:
        while step < config.num_steps:
            state, metrics = task.step_fn(state, jnp.asarray(next(batches)))
            step += 1
            pending.append(metrics)
            meter.add(tokens_per_step)
            last = step == config.num_steps
            if step % config.log_every == 0 or last:
                _log_train(pending, step, config, meter, schedule, clock, metrics_path, bar)
                pending = []
            if (step % config.eval_every == 0) and not last:
                with clock.overhead_of():
                    last_eval = task.eval_fn(state.params, config.eval_windows or None)
                    append_metrics(metrics_path, {"step": step, "kind": "eval", **last_eval})
                    logging.info("eval step %d: %s", step, _fmt(last_eval))
                meter.rate()  # evaluation time is not training throughput
            stop_here = bool(config.stop_at_step) and step == config.stop_at_step
            if step % config.checkpoint_every == 0 or last or stop.signal or stop_here:
                with clock.overhead_of():
                    check_finite_params(state.params, step, checkpointer.directory)
                    meta = make_meta(step, last_eval)
                    checkpointer.save(step, state.params, state.opt_state, meta)
            if stop.signal or (stop_here and not last):
                stopped = stop.signal or f"stop_at_step={step}"
                logging.warning("Stopping at step %d (%s); checkpoint saved", step, stopped)
                break
    bar.close()
    checkpointer.close()

    # ---------------------------------------------------------------------------
    # Summary; a finished run is evaluated in full, fits n-grams and is exported
    # ---------------------------------------------------------------------------
    summary = {
        "name": config.name,
        "params": model.config.num_params(),
        "step": step,
        "num_steps": config.num_steps,
        "tokens_seen": step * tokens_per_step,
        "train_seconds": clock.train_seconds(),
        "corpus": config.data.corpus,
        "workdir": os.path.abspath(workdir),
        "fingerprint": zoo.run_fingerprint(config_dict),
        "stopped": stopped,
    }
    if stopped is None:
        vocab_size = tokenizer.vocab_size
        _final_eval(config, workdir, task, state, step, train_info, vocab_size, summary, make_meta)
    with open(os.path.join(workdir, SUMMARY_FILE), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    return summary


def _fmt(metrics: dict) -> str:
    return " ".join(
        f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()
    )
