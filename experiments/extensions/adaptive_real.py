"""Adaptive γ on a real target, per task and on a mixed prompt set.

    python -m experiments.main --config=configs/extensions.py:parts=adaptive,smollm2 \
        --workdir=runs/ext-smollm2

The target is `c.pretrained` (SmolLM2-135M-Instruct, fetched from PyPI once) and the draft the
distilled small transformer trained for it (`real_drafts.distilled_pair`: the adaptive drafter
stops its draft loop early), or with `c.draft_head = "lookup"` prompt lookup (a
`TruncatedDrafter` cuts its proposals; c = 0, and its fixed-γ decoders verify only as wide as
the proposal, `verify_widths="auto"`, since a miss proposes nothing). Prompts: the first
`c.per_task` of each task of `experiments/common/real_prompts` (our own six, or yours:
`--config.adaptive.prompts_file=`, JSON Lines), through the chat template, each decoded at
batch 1 in its own call, up to `c.max_new_tokens` or the end-of-turn token. Every decoder
(each fixed γ in `c.gammas`, each policy at gamma_max = max(gammas)) runs every task's
prompts, and all (decoder, task) calls are timed round-robin (`timing.interleaved`, wall
clock), so one round holds every decoder on every task back to back, task by task: the calls a
task's ratios pair are seconds apart, not a whole round's minute, so drift within a round
reaches both sides of a pair alike (the mixed set sums whole rounds, whatever the order).

Figures, per task and on the mixed set (a round's task calls summed): ms per token, tokens per
target call, mean γ, and each decoder's speedup over the best fixed γ of that set (the fastest
median, found after the fact) with a 95 % interval over the paired rounds
(`timing.ratio_interval`: a decoder emits the same tokens in every round, so the ratio of two
rounds' ms/token is the ratio of their seconds times a constant). Picking the best fixed γ after
seeing the data favours the fixed γ: the ratios are conservative for the policies. Each set is
also compared with a fixed γ picked on held-out rounds (`timing.held_out_fastest`: the even
rounds read the γ fastest on the odd ones and the other way round), which has no winner's curse;
a policy's true ratio lies between the two. Each row keeps the process CPU time of the same
calls too ("ms_per_token_cpu_samples"); `adaptive_reading` reads a stored run again, on either
clock.

Goals checked in the report: the best policy (by its mixed-set ratio) has a lower 95 % bound
>= 0.97 against the best fixed γ of every task, and on the mixed set a speedup over the single
best fixed γ whose interval lies above 1.0. Beside them, the ceiling of per-task adaptation
(`ceiling.per_task_ceiling`): the mixed set with every task at its own fastest fixed γ, over
the single best one; a policy that only tells tasks apart gains at most that.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from experiments.common import real_drafts
from experiments.common.real_prompts import (
    SAMPLE_PROMPTS,
    Prompt,
    by_task,
    prompt_set,
    tasks_of,
)
from experiments.extensions.adaptive import (
    decode_each,
    iteration_costs,
    needs_iteration_costs,
    policy_of,
)
from experiments.extensions.adaptive_reading import (
    MIXED,
    fixed_gamma,
    goals,
    held_out,
    versus_best,
)
from experiments.extensions.ceiling import format_ceiling, per_task_ceiling
from specjax.benchmark.costs import call_cost
from specjax.benchmark.timing import interleaved
from specjax.decoding import LookupDrafter, SpeculativeDecoder, make_warper, summarize_stats
from specjax.decoding.prompts import bucket_length


def prompt_bucket(ids, cache_len: int) -> int:
    """One padded prompt width for every prompt (one program per decoder): the next power of
    two at or above the longest prompt, at most cache_len."""
    return min(bucket_length(max(len(x) for x in ids), min_bucket=1), cache_len)


def _block(timed: dict, labels, fixed, sets) -> dict:
    """{set: rows} with each decoder's figures and its speedup over the set's best fixed γ.

    timed: (label, task) -> Timing; sets: set name -> the tasks it sums.
    """
    out = {}
    for name, tasks in sets.items():
        rows = []
        for label in labels:
            outputs = [r for task in tasks for r in timed[(label, task)].output]
            s = summarize_stats([r.stats for r in outputs])
            per_ms = 1e3 / max(s["tokens_emitted"], 1)
            wall = np.sum([timed[(label, task)].samples for task in tasks], axis=0)
            cpu = np.sum([timed[(label, task)].cpu_samples for task in tasks], axis=0)
            rows.append(
                dict(
                    decoder=label,
                    ms_per_token_samples=(wall * per_ms).tolist(),
                    ms_per_token_cpu_samples=(cpu * per_ms).tolist(),
                    tokens=s["tokens_emitted"],
                    tokens_per_target_call=s["tokens_emitted"] / s["target_calls"],
                    alpha=s["alpha_empirical"],
                    mean_gamma=s.get("mean_gamma", fixed_gamma(label)),
                )
            )
        out[name] = held_out(versus_best(dict(rows=rows), fixed), fixed)
    return out


def _identical(timed: dict, labels, reference: str, tasks) -> bool:
    """Whether every decoder emitted the reference decoder's tokens on every prompt."""
    for label in labels:
        for task in tasks:
            ours = [r.tokens for r in timed[(label, task)].output]
            ref = [r.tokens for r in timed[(reference, task)].output]
            if not all(np.array_equal(a, b) for a, b in zip(ours, ref, strict=True)):
                return False
    return True


def run(c, workdir: str, log=print) -> dict:
    """Measures every fixed γ and policy per temperature; returns JSON-able results."""
    del workdir  # the draft lives in the heads cache; results are written by the pipeline
    gamma_max = max(c.gammas)
    if needs_iteration_costs(c.policies) and tuple(c.gammas) != tuple(range(1, gamma_max + 1)):
        raise ValueError(f"theory_loop needs gammas = 1..gamma_max, got {c.gammas}")
    every = prompt_set(c.get("prompts_file", ""))  # a bad file fails before any training
    tasks = tasks_of(every)
    if MIXED in tasks:
        raise ValueError(
            f"config.adaptive.prompts_file: {MIXED!r} names the mixed set; rename that task"
        )
    lookup = c.draft_head == "lookup"
    if lookup:
        from specjax.pretrained import load_pretrained

        target, tparams, tokenizer = load_pretrained(c.pretrained, "target")
        draft, dparams, draft_name = LookupDrafter(target.vocab_size, 3), {}, "prompt lookup"
    else:
        target, tparams, tokenizer, draft, dparams, draft_name = real_drafts.distilled_pair(c, log)
    prompts = {task: by_task(task, every)[: c.per_task] for task in tasks}
    ids = {task: real_drafts.chat_ids(tokenizer, ps) for task, ps in prompts.items()}
    calibration = real_drafts.chat_ids(tokenizer, [Prompt("calibration", SAMPLE_PROMPTS[0])])
    bucket = prompt_bucket([x for v in ids.values() for x in v] + calibration, c.cache_len)
    where = dict(context=c.cost_context, cache_len=c.cache_len, steps=16, repeats=7)

    def cost(model, params, k):  # each width's fastest sample: load only adds time
        return min(call_cost(model, params, k, **where).samples)

    t_target = {k: cost(target, tparams, k) for k in range(1, gamma_max + 2)}
    t_draft = 0.0 if lookup else cost(draft, dparams, 1)
    log(
        f"  target {c.pretrained}, draft {draft_name} (c = {t_draft / t_target[1]:.3f}); "
        "T(k)/T(1): " + ", ".join(f"{k}: {v / t_target[1]:.2f}" for k, v in t_target.items())
    )
    fixed = [f"fixed{g}" for g in c.gammas]
    sets = {task: (task,) for task in tasks} | {MIXED: tasks}
    out = dict(
        real=True,
        target=c.pretrained,
        draft=draft_name,
        device=jax.devices()[0].device_kind,
        per_task=c.per_task,
        prompts_file=c.get("prompts_file", ""),
        tasks=list(tasks),
        max_new_tokens=c.max_new_tokens,
        repeats=c.repeats,
        policies=list(c.policies),
        c=t_draft / t_target[1],
        T_target_ms={k: v * 1e3 for k, v in t_target.items()},
        blocks=[],
    )
    for t in c.temperatures:
        warper = make_warper(t)
        key = jax.random.PRNGKey(c.seed)

        def decoder(gamma, policy=None, widths="static", warper=warper):
            return SpeculativeDecoder(
                target,
                draft,
                gamma,
                warper,
                c.cache_len,
                min_bucket=bucket,
                gamma_policy=policy,
                verify_widths=widths,
            )

        fixed_widths = "auto" if lookup else "static"
        decoders = {f"fixed{g}": decoder(g, widths=fixed_widths) for g in c.gammas}
        per_iteration = None
        if needs_iteration_costs(c.policies):
            per_iteration = iteration_costs(
                decoders, c.gammas, tparams, dparams, calibration, key, 32, time.perf_counter
            )
        for label in c.policies:
            policy, widths = policy_of(label, t_target, t_draft, per_iteration)
            decoders[label] = decoder(gamma_max, policy, widths)
        calls = {
            (label, task): (
                lambda d=d, ps=ids[task], k=key: decode_each(
                    d, tparams, dparams, ps, k, c.max_new_tokens, tokenizer.eos_id
                )
            )
            for task in tasks  # task by task: a task's decoders run back to back (docstring)
            for label, d in decoders.items()
        }
        timed = interleaved(calls, c.repeats)
        block = dict(temperature=float(t), sets=_block(timed, list(decoders), fixed, sets))
        if float(t) == 0.0:  # greedy: every decoder must emit the first fixed γ's tokens
            block["greedy_identical"] = _identical(timed, list(decoders), fixed[0], tasks)
        if per_iteration is not None:
            block["iteration_ms"] = [x * 1e3 for x in per_iteration]
        block["goals"] = goals(block["sets"], c.policies, tasks)
        block["ceiling"] = per_task_ceiling(block["sets"], fixed, tasks, MIXED)
        out["blocks"].append(block)
        log(report_block(block))
    return out


def _fmt_interval(row, key: str = "vs_best_fixed") -> str:
    low, high = row.get(f"{key}_low"), row.get(f"{key}_high")
    return "-" if low is None else f"{low:.3f}–{high:.3f}"


def _goal_line(g: dict, suffix: str, reference: str) -> str:
    ratio, low, high = g[f"mixed{suffix}"]
    lows = ", ".join(
        f"{k} {'-' if v is None else f'{v:.3f}'}" for k, v in g[f"per_task_low{suffix}"].items()
    )
    return (
        f"Against {reference}: goal 1, lower bound >= 0.97 on every task: "
        f"{'met' if g[f'per_task_ok{suffix}'] else 'NOT met'} ({lows}). Goal 2, mixed-set "
        f"speedup with its interval above 1.0: {'met' if g[f'mixed_ok{suffix}'] else 'NOT met'} "
        f"({'-' if ratio is None else f'{ratio:.3f}'}, "
        f"{'-' if low is None else f'{low:.3f}–{high:.3f}'})."
    )


def report_block(block: dict) -> str:
    """One temperature: the mixed set's table, then every policy's ratio per task."""
    t = block["temperature"]
    mixed = block["sets"][MIXED]
    lines = [
        f"**t = {t:g}, mixed set** (best fixed: {mixed['best_fixed']})",
        "",
        "| decoder | ms/token | tokens/target call | α | mean γ | vs best fixed (95 %) |",
        "|---|---|---|---|---|---|",
    ]
    for r in mixed["rows"]:
        lines.append(
            f"| {r['decoder']} | {r['ms_per_token']:.3f} | {r['tokens_per_target_call']:.2f} | "
            f"{r['alpha']:.3f} | {r['mean_gamma']:.2f} | {r['vs_best_fixed']:.3f} "
            f"({_fmt_interval(r)}) |"
        )
    tasks = [name for name in block["sets"] if name != MIXED]
    lines += [
        "",
        f"**t = {t:g}, per task**: speedup over the task's best fixed γ (95 % interval)",
        "",
        "| decoder | " + " | ".join(tasks) + " |",
        "|---|" + "---|" * len(tasks),
        "| best fixed | " + " | ".join(block["sets"][x]["best_fixed"] for x in tasks) + " |",
    ]
    for label in [r["decoder"] for r in mixed["rows"]]:
        cells = []
        for x in tasks:
            r = next(r for r in block["sets"][x]["rows"] if r["decoder"] == label)
            cells.append(f"{r['vs_best_fixed']:.2f} ({_fmt_interval(r)})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if mixed.get("held_out_picks"):
        lines += [
            "",
            f"**t = {t:g}, against the fixed γ picked on held-out rounds** (even rounds read the "
            "γ fastest on the odd ones, odd rounds the γ fastest on the even ones; 95 % interval)",
            "",
            "| decoder | " + " | ".join([*tasks, MIXED]) + " |",
            "|---|" + "---|" * (len(tasks) + 1),
            "| picks (even / odd rounds) | "
            + " | ".join(" / ".join(block["sets"][x]["held_out_picks"]) for x in [*tasks, MIXED])
            + " |",
        ]
        for label in [r["decoder"] for r in mixed["rows"]]:
            cells = []
            for x in [*tasks, MIXED]:
                r = next(r for r in block["sets"][x]["rows"] if r["decoder"] == label)
                cells.append(f"{r['vs_held_out']:.2f} ({_fmt_interval(r, 'vs_held_out')})")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    g = block["goals"]
    lines += ["", f"Best policy (mixed set): {g['best_policy']}."]
    lines.append(_goal_line(g, "", "each set's best fixed γ, picked after the fact"))
    if "mixed_held_out" in g:
        lines.append(_goal_line(g, "_held_out", "the fixed γ picked on held-out rounds"))
    if "ceiling" in block:
        lines.append(format_ceiling(block["ceiling"]))
    if "greedy_identical" in block:
        lines.append(f"Greedy tokens identical across decoders: {block['greedy_identical']}.")
    return "\n".join(lines)


def report(results: dict) -> str:
    """Every temperature's tables (a pure function of results.json)."""
    head = (
        f"Target {results['target']}, draft {results['draft']} (c = {results['c']:.3f}), "
        f"device {results['device']}; {results['per_task']} prompts per task, up to "
        f"{results['max_new_tokens']} new tokens, {results['repeats']} interleaved rounds"
        f"{', process CPU clock' if results.get('clock') == 'cpu' else ', wall clock'}."
    )
    return "\n\n".join([head] + [report_block(b) for b in results["blocks"]])
