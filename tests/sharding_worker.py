"""Runs sharded scenarios in a fresh process with fake CPU devices; writes results as JSON.

The pytest process has already started JAX with one CPU device, and the device count is fixed
when the backend starts, so multi-device checks run here, launched by tests/test_sharding.py:

    python tests/sharding_worker.py --devices 8 --out result.json generate train checkpoint
    python tests/sharding_worker.py --devices 2 --out r.json \\
        --coordinator 127.0.0.1:PORT --num-processes 2 --process-id 0 multiprocess

Every scenario runs the same tiny models on the same seeds, once unsharded (one device) and once
sharded, and reports both so the test compares them. Training also runs a negative control: the
sharded step with the gradient all-reduce over `data` left out, which the comparison must catch.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import time


def _parse():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("scenarios", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--devices", type=int, default=8, help="fake CPU devices per process")
    parser.add_argument("--coordinator", default=None, help="host:port of process 0")
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--process-id", type=int, default=0)
    return parser.parse_args()


ARGS = _parse() if __name__ == "__main__" else None
if ARGS is not None:
    # Must precede the first JAX import: the CPU device count is read when the backend starts.
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={ARGS.devices}"
    ).strip()
    os.environ["JAX_PLATFORMS"] = "cpu"

import gc_setting  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax.sharding import PartitionSpec  # noqa: E402

from specjax import sharding as sh  # noqa: E402
from specjax.decoding import (  # noqa: E402
    AutoregressiveDecoder,
    ShardedDecoder,
    SpeculativeDecoder,
    TokenTree,
    TreeSpeculativeDecoder,
    make_warper,
)
from specjax.models import TransformerConfig, TransformerLM  # noqa: E402
from specjax.training.optim import make_optimizer  # noqa: E402
from specjax.training.sharded import shard_train_step, train_state_shardings  # noqa: E402
from specjax.training.steps import init_train_state, make_train_step  # noqa: E402

# The test session's cycle-collector threshold: this process compiles many programs and holds
# their objects (test_sharding 39.8 -> 35.9 s with it).
gc_setting.apply()

VOCAB = 256
MAX_NEW = 12
CACHE_LEN = 48
GAMMA = 3
SGD_LR = 1.0  # the update is then minus the gradient itself


def models():
    """A grouped-query Llama-style target (4 heads, 2 KV heads) and a noisy copy as its draft.

    The draft is the target with 5% Gaussian noise on every weight, so it agrees often but not
    always (measured α ≈ 0.57 greedy, 0.76 sampled): acceptance and rollback both happen.
    """
    target = TransformerLM(
        TransformerConfig.llama(
            VOCAB, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=32, mlp_dim=64, max_len=64
        )
    )
    # Larger-than-default weights make the random model confident, far from argmax ties.
    target_params = jax.tree.map(lambda x: 4.0 * x, target.init_params(jax.random.PRNGKey(0)))
    leaves, treedef = jax.tree.flatten(target_params)
    keys = jax.random.split(jax.random.PRNGKey(3), len(leaves))
    draft_params = treedef.unflatten(
        [
            x + 0.05 * x.std() * jax.random.normal(k, x.shape)
            for x, k in zip(leaves, keys, strict=True)
        ]
    )
    return target, target, target_params, draft_params


def prompts():
    """Four ragged prompts (batch 4: two rows per data shard on a 2-way data axis)."""
    rng = np.random.default_rng(0)
    return [rng.integers(0, VOCAB, n).tolist() for n in (3, 9, 5, 7)]


def _result(result) -> dict:
    tokens, lengths = sh.to_host((result.tokens, result.lengths))
    return {"tokens": tokens.tolist(), "lengths": lengths.tolist()}


def scenario_generate(mesh) -> dict:
    """Greedy and sampled generation, autoregressive and speculative, sharded vs unsharded."""
    target, draft, tp, dp = models()
    out = {}
    cases = {
        "ar_greedy": (AutoregressiveDecoder, 0.0),
        "spec_greedy": (SpeculativeDecoder, 0.0),
        "spec_sample": (SpeculativeDecoder, 1.0),
        "tree_sample": (TreeSpeculativeDecoder, 1.0),
    }
    for name, (cls, temperature) in cases.items():
        warper = make_warper(temperature=temperature)
        if cls is TreeSpeculativeDecoder:  # a tree: per-row path compaction of sharded caches
            tree = TokenTree.from_branching((2, 2, 1))
            decoder = TreeSpeculativeDecoder(
                target, draft, tree, warper, replacement=False, cache_len=CACHE_LEN
            )
            params = (tp, dp)
        elif cls is SpeculativeDecoder:
            decoder = SpeculativeDecoder(target, draft, GAMMA, warper, cache_len=CACHE_LEN)
            params = (tp, dp)
        else:
            decoder = AutoregressiveDecoder(target, warper, cache_len=CACHE_LEN)
            params = (tp,)
        key = jax.random.PRNGKey(7)
        # The tree run must accept a second-ranked child at depth 0 somewhere (test_sharding
        # checks it, so that path compaction is covered): with 24 tokens 10 of keys 0-11 do,
        # key 7 among them (with 12 tokens, 7 of 12; key 7 stopped doing so when the sampler's
        # random stream changed in issue 20).
        max_new = 2 * MAX_NEW if cls is TreeSpeculativeDecoder else MAX_NEW
        start = time.perf_counter()
        reference = decoder.generate(*params, prompts(), key, max_new)
        middle = time.perf_counter()
        sharded = ShardedDecoder(decoder, mesh)
        result = sharded.generate(*params, prompts=prompts(), key=key, max_new_tokens=max_new)
        end = time.perf_counter()
        out[name] = {
            "unsharded": _result(reference),
            "sharded": _result(result),
            "seconds_unsharded": middle - start,
            "seconds_sharded": end - middle,
        }
        out[name]["summary"] = result.summary()
    out["layout"] = _layout(sharded, tp, dp)
    try:  # 3 rows cannot split over a 4-way data axis: a clear error, before any compile
        sharded.generate(tp, dp, prompts=prompts()[:3], key=key, max_new_tokens=MAX_NEW)
        out["odd_batch_error"] = None
    except ValueError as e:
        out["odd_batch_error"] = str(e)
    return out


def _spec(sharding) -> list:
    return [None if e is None else str(e) for e in sharding.spec]


def _layout(sharded: ShardedDecoder, tp, dp) -> dict:
    """Where the speculative decoder's params live, and the collectives in its program."""
    t_sh, d_sh = sharded.param_shardings(tp, dp)
    up = tp["block_0"]["mlp"]["up"]["kernel"]
    # The program was compiled by the call above: this compile hits the run's cache (main()).
    text = sharded.lower(*jax.eval_shape(lambda: (tp, dp)), batch=4, prompt_width=16)
    text = text.compile().as_text()
    return {
        "target_up_kernel": _spec(t_sh["block_0"]["mlp"]["up"]["kernel"]),
        "target_up_kernel_shard": list(
            t_sh["block_0"]["mlp"]["up"]["kernel"].shard_shape(up.shape)
        ),
        "target_up_kernel_global": list(up.shape),
        "target_embed": _spec(t_sh["embed"]["embedding"]),
        "target_query_kernel": _spec(t_sh["block_0"]["attn"]["query"]["kernel"]),
        "draft_up_kernel": _spec(d_sh["block_0"]["mlp"]["up"]["kernel"]),
        "all_reduce_ops": text.count("all-reduce("),
    }


def scenario_multiprocess(mesh) -> dict:
    """Speculative greedy generation over every process's devices."""
    target, draft, tp, dp = models()
    decoder = SpeculativeDecoder(target, draft, GAMMA, make_warper(temperature=0.0), CACHE_LEN)
    sharded = ShardedDecoder(decoder, mesh)
    key = jax.random.PRNGKey(7)
    result = sharded.generate(tp, dp, prompts=prompts(), key=key, max_new_tokens=MAX_NEW)
    return {"spec_greedy": _result(result)}


def _train_setup():
    """The target model, a fresh TrainState, its train step and two batches [8, 17]."""
    target, _, params, _ = models()
    tx = make_optimizer(total_steps=10, peak_lr=1e-2, warmup_steps=0)
    state = init_train_state(params, tx)
    rng = np.random.default_rng(1)
    batches = [rng.integers(0, VOCAB, (8, 17)).astype(np.int32) for _ in range(2)]
    return target, state, make_train_step(target, tx), batches


def _max_diff(a, b) -> float:
    a, b = sh.to_host(a), sh.to_host(b)
    pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return max(float(np.max(np.abs(x - y))) for x, y in pairs)


def _without_data_all_reduce(train_step, shardings, mesh, rules):
    """`shard_train_step` with the gradient all-reduce over `data` left out: the negative control.

    `shard_map` makes the `data` axis manual, so each data shard runs the whole step on its own
    rows and its gradient never meets the other shards' (nothing in the step sums over `data`);
    `model` stays automatic, tensor parallel as in the real step. That is what a step that forgot
    the all-reduce computes: the outputs claim to be replicated over `data` (check_vma=False lets
    that through) but each data shard holds its own; the host reads data shard 0's copy, i.e.
    the step on the batch's first rows only.
    """
    local = jax.shard_map(
        train_step,
        mesh=mesh,
        in_specs=(PartitionSpec(), PartitionSpec("data")),
        out_specs=(PartitionSpec(), PartitionSpec()),
        axis_names={"data"},
        check_vma=False,
    )
    return jax.jit(
        local,
        in_shardings=(shardings, sh.batch_sharding(mesh, rules, 2)),
        out_shardings=(shardings, sh.replicated(mesh)),
        donate_argnums=0,
    )


def _run_steps(step, state, shardings, mesh, rules, batches):
    """Places `state`, applies a sharded `step` to each batch; the state and host metrics."""
    state, metrics = sh.put(state, shardings), []
    for batch in batches:
        state, m = step(state, sh.put(batch, sh.batch_sharding(mesh, rules, batch.shape)))
        metrics.append({k: float(v) for k, v in sh.to_host(m).items()})
    return state, metrics


@functools.cache
def _training(mesh):
    """Two AdamW steps from one state, single device and data+tensor parallel (memoized)."""
    model, state, train_step, batches = _train_setup()
    single = jax.jit(train_step)
    s1, ref_metrics = state, []
    for batch in batches:
        s1, metrics = single(s1, batch)
        ref_metrics.append({k: float(v) for k, v in metrics.items()})

    rules = sh.DEFAULT_RULES
    shardings = train_state_shardings(state, model, mesh, rules)
    step = shard_train_step(train_step, shardings, mesh, rules)
    s2, got_metrics = _run_steps(step, state, shardings, mesh, rules, batches)
    return model, state, s1, s2, ref_metrics, got_metrics


def _sgd(mesh) -> tuple[dict, dict]:
    """One plain-SGD step on the first batch: single device, sharded, sharded minus the all-reduce.

    The SGD update is -SGD_LR * gradient, linear in it, so the params show the gradient's rounding
    as it is. (Adam divides by sqrt(v): an entry whose gradient is ~0 turns rounding noise into an
    O(lr) step, so Adam's params have no tolerance fixed by the gradient's precision.)
    """
    model, state, _, batches = _train_setup()
    tx = optax.sgd(SGD_LR)
    state = init_train_state(state.params, tx)
    train_step = make_train_step(model, tx)
    batch = batches[0]
    single, _ = jax.jit(train_step)(state, batch)
    rules = sh.DEFAULT_RULES
    shardings = train_state_shardings(state, model, mesh, rules)
    sharded, _ = _run_steps(
        shard_train_step(train_step, shardings, mesh, rules), state, shardings, mesh, rules, [batch]
    )
    broken, _ = _run_steps(
        _without_data_all_reduce(train_step, shardings, mesh, rules),
        state,
        shardings,
        mesh,
        rules,
        [batch],
    )
    # What the broken step should equal: the step on data shard 0's rows alone.
    first_rows, _ = jax.jit(train_step)(state, batch[: batch.shape[0] // mesh.shape["data"]])
    return {
        "update_max": _max_diff(state.params, single.params),
        "max_diff": _max_diff(single.params, sharded.params),
    }, {
        "sgd_max_diff": _max_diff(single.params, broken.params),
        "sgd_vs_first_rows_max_diff": _max_diff(first_rows.params, broken.params),
    }


def _adam_without_data_all_reduce(mesh) -> dict:
    """The two AdamW steps of `_training`, sharded but without the gradient all-reduce."""
    model, state, train_step, batches = _train_setup()
    rules = sh.DEFAULT_RULES
    shardings = train_state_shardings(state, model, mesh, rules)
    step = _without_data_all_reduce(train_step, shardings, mesh, rules)
    broken, _ = _run_steps(step, state, shardings, mesh, rules, batches)
    _, _, s1, _, _, _ = _training(mesh)
    return {"opt_state_max_diff": _max_diff(s1.opt_state, broken.opt_state)}


def scenario_train(mesh) -> dict:
    """Single device vs data+tensor parallel training: losses, norms, moments, SGD params.

    Also the same comparisons against the step without the data all-reduce (negative control).
    """
    _, state, s1, s2, ref_metrics, got_metrics = _training(mesh)
    mu = s2.opt_state[1][0].mu  # chain(clip, adamw): adamw's first state is ScaleByAdamState
    sgd, sgd_broken = _sgd(mesh)
    return {
        "unsharded_metrics": ref_metrics,
        "sharded_metrics": got_metrics,
        "opt_state_max_diff": _max_diff(s1.opt_state, s2.opt_state),
        "params_max_change": _max_diff(state.params, s1.params),
        "sgd": sgd,
        "no_all_reduce": {**_adam_without_data_all_reduce(mesh), **sgd_broken},
        "up_kernel_spec": _spec(s2.params["block_0"]["mlp"]["up"]["kernel"].sharding),
        "up_kernel_mu_spec": _spec(mu["block_0"]["mlp"]["up"]["kernel"].sharding),
        "step": int(sh.to_host(s2.step)),
    }


def scenario_checkpoint(mesh) -> dict:
    """Saves the sharded TrainState (data 4 x model 2) with orbax, restores it under 2 x 4."""
    import orbax.checkpoint as ocp

    model, _, _, saved, _, _ = _training(mesh)
    other = sh.make_mesh((2, -1))  # data 2 x model 4: a different split of the same devices
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "state")
        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(path, saved)
        checkpointer.wait_until_finished()
        rules = sh.DEFAULT_RULES
        target = sh.abstract_like(saved, train_state_shardings(saved, model, other, rules))
        restored = checkpointer.restore(path, target)
    kernel = restored.params["block_0"]["mlp"]["up"]["kernel"]
    return {
        "saved_mesh": dict(mesh.shape),
        "restored_mesh": dict(kernel.sharding.mesh.shape),
        "restored_up_kernel_spec": _spec(kernel.sharding),
        "restored_up_kernel_shard": list(kernel.addressable_shards[0].data.shape),
        "max_diff": _max_diff(saved, restored),
        "restored_step": int(sh.to_host(restored.step)),
    }


SCENARIOS = {
    "generate": scenario_generate,
    "train": scenario_train,
    "checkpoint": scenario_checkpoint,
    "multiprocess": scenario_multiprocess,
}


def main():
    args = ARGS
    if args.coordinator:
        sh.initialize_distributed(args.coordinator, args.num_processes, args.process_id)
    # A compilation cache for this run only: the layout check compiles the speculative program
    # again (`lower().compile()` bypasses jit's in-memory cache) and then hits this instead.
    cache_dir = tempfile.mkdtemp(prefix="specjax-sharding-cache-")
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    mesh = sh.make_mesh((-1, 2))
    out = {
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "devices": jax.device_count(),
        "mesh": dict(mesh.shape),
    }
    for name in args.scenarios:
        start = time.perf_counter()
        out[name] = SCENARIOS[name](mesh)
        out[name]["seconds"] = time.perf_counter() - start
    with open(args.out, "w") as f:
        json.dump(out, f)
    shutil.rmtree(cache_dir, ignore_errors=True)
    if args.coordinator:
        jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
