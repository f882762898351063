"""Every draft against autoregressive decoding on a real target, timed round-robin: the draft table.

`draft_table` decodes every evaluation prompt (batch 1, chat template) with the autoregressive
decoder and each draft of `real_drafts.build_drafts` (or trained heads), all calls timed
round-robin (`timing.interleaved`) so drift hits all alike. Speedup = (AR seconds / AR tokens) /
(draft seconds / draft tokens) summed over prompts, per round, with its 95 % interval over the
paired rounds; α, α by position and tokens per iteration come from the decoders' counters. At
temperature 0 every draft's tokens must equal the autoregressive ones (`greedy_identical`).
`add_costs` adds the draft cost c and the theory's predictions; `format_drafts` the markdown.
"""

from __future__ import annotations

import numpy as np

from experiments.common.real_drafts import chat_ids
from experiments.common.real_prompts import PROMPTS, tasks_of
from specjax.benchmark.timing import interleaved, ratio_interval
from specjax.decoding import (
    AutoregressiveDecoder,
    SpeculativeDecoder,
    TreeSpeculativeDecoder,
    make_warper,
    summarize_stats,
)
from specjax.decoding.prompts import bucket_length
from specjax.models import MedusaHeads


def draft_gamma(draft, gamma: int) -> int:
    """The γ a draft runs at: `gamma`, or fewer for Medusa's K heads (one head per position)."""
    return min(gamma, draft.num_heads) if isinstance(draft, MedusaHeads) else gamma


def draft_table(
    model,
    params,
    tokenizer,
    drafts: dict,
    *,
    temperature: float,
    gamma: int = 4,
    max_new_tokens: int = 64,
    rounds: int = 3,
    cache_len: int = 512,
    prompts=PROMPTS,
) -> dict:
    """Speedup, α and tokens per iteration of every draft vs AR (see the module docstring).

    Returns:
      {"temperature", "gamma", "rows": [{"draft", "speedup", "interval", "alpha",
      "alpha_by_position", "tokens_per_iteration", "per_task_tokens_per_iteration",
      "per_task_alpha", "greedy_identical" (t = 0)}], "ar_ms_per_token", "prompts",
      "max_new_tokens"}.
    """
    import jax

    warper = make_warper(temperature)
    key = jax.random.PRNGKey(0)
    eos = tokenizer.eos_id
    ids = chat_ids(tokenizer, prompts)
    # One padded prompt width for every prompt: one program per decoder (a compile is seconds
    # on CPU and 15-30 s on a GPU for this target), the same padding for AR and drafts.
    bucket = min(bucket_length(max(len(x) for x in ids)), cache_len)
    sizes = dict(cache_len=cache_len, min_bucket=bucket)
    decoders = {"AR": (AutoregressiveDecoder(model, warper, **sizes), (params,))}
    for name, (draft, draft_params, *tree) in drafts.items():
        if tree:
            decoder = TreeSpeculativeDecoder(
                model, draft, tree[0], warper, replacement=False, **sizes
            )
        else:
            decoder = SpeculativeDecoder(model, draft, draft_gamma(draft, gamma), warper, **sizes)
        decoders[name] = (decoder, (params, draft_params))
    calls = {}
    for i, prompt in enumerate(ids):
        for name, (decoder, dec_params) in decoders.items():
            calls[(name, i)] = lambda d=decoder, p=dec_params, x=prompt: d.generate(
                *p, prompts=[x], key=key, max_new_tokens=max_new_tokens, eos_id=eos
            )
    timed = interleaved(calls, repeats=rounds, warmup=1)

    def totals(name):
        seconds = np.sum([timed[(name, i)].samples for i in range(len(ids))], axis=0)  # [rounds]
        outs = [timed[(name, i)].output for i in range(len(ids))]
        tokens = sum(int(o.lengths[0] - o.prompt_lengths[0]) for o in outs)
        return seconds, tokens, outs

    ar_s, ar_tokens, ar_outs = totals("AR")
    rows = []
    for name in drafts:
        s, tokens, outs = totals(name)
        per_token_ar, per_token = ar_s / ar_tokens, s / tokens  # [rounds]
        summary = summarize_stats([o.stats for o in outs])
        by_task, alpha_by_task = {}, {}
        for task in tasks_of(prompts):
            picked = [o.stats for o, p in zip(outs, prompts, strict=True) if p.task == task]
            if picked:
                task_summary = summarize_stats(picked)
                by_task[task] = task_summary["tokens_per_iteration"]
                alpha_by_task[task] = task_summary.get("alpha_empirical", 0.0)
        row = {
            "draft": name,
            "gamma": draft_gamma(drafts[name][0], gamma),
            "speedup": float(np.median(per_token_ar / per_token)),
            "interval": ratio_interval(per_token_ar, per_token),
            "alpha": summary.get("alpha_empirical", 0.0),
            "alpha_by_position": summary.get("acceptance_by_position", []),
            "survival_by_position": summary.get("survival_by_position", []),
            "tokens_per_iteration": summary["tokens_per_iteration"],
            "per_task_tokens_per_iteration": by_task,
            "per_task_alpha": alpha_by_task,
            "ms_per_iteration": float(np.median(s) / max(summary["row_iterations"], 1) * 1e3),
        }
        if temperature == 0:
            row["greedy_identical"] = all(
                np.array_equal(np.asarray(a.new_tokens()[0]), np.asarray(b.new_tokens()[0]))
                for a, b in zip(ar_outs, outs, strict=True)
            )
        rows.append(row)
    ar_ms = float(np.median(ar_s) / ar_tokens * 1e3)
    add_costs(rows, ar_ms, gamma)
    return {
        "temperature": temperature,
        "gamma": gamma,
        "rows": rows,
        "ar_ms_per_token": ar_ms,
        "prompts": len(ids),
        "max_new_tokens": max_new_tokens,
    }


def add_costs(rows: list, ar_ms: float, gamma: int) -> None:
    """Adds the draft cost c and the theory's predictions to each row, in place.

    The uniform draft costs nothing to draft, so its time per iteration is the verification's,
    T_v (a (γ+1)-token target call plus the loop). A draft's c is then its extra time per
    iteration over γ AR steps: c = (T_iter - T_v) / (γ T(1)), T(1) = AR ms per token. Theory
    (Leviathan et al., flat T(k)): (1 - α^(γ+1)) / ((1 - α)(cγ + 1)); "flat" is what the measured
    tokens per iteration would give on a flat T(k): tokens / (cγ + 1). Without a uniform row
    nothing is added. For a tree row c also holds its wider verification (N nodes, not γ + 1);
    a row at a smaller γ than the uniform one (Medusa's K heads) is charged the wider T_v, so
    its c is an underestimate.
    """
    uniform = [r for r in rows if r["draft"] == "uniform"]
    if not uniform:
        return
    t_verify = uniform[0]["ms_per_iteration"]
    for r in rows:
        g = r.get("gamma", gamma)
        c = max(r["ms_per_iteration"] - t_verify, 0.0) / (g * ar_ms)
        a = min(r["alpha"], 1 - 1e-9)
        r["c"] = c
        r["verify_cost"] = t_verify / ar_ms
        r["theory_speedup"] = (1 - a ** (g + 1)) / ((1 - a) * (c * g + 1))
        r["flat_speedup"] = r["tokens_per_iteration"] / (c * g + 1)


def format_drafts(table: dict) -> str:
    """One draft table as markdown."""
    lines = [
        f"t = {table['temperature']}, γ = {table['gamma']}, {table['prompts']} prompts, "
        f"{table['max_new_tokens']} new tokens, AR {table['ar_ms_per_token']:.1f} ms/token",
        "",
        "| draft | α | α by position | tokens / iteration | speedup vs AR (95 %) | greedy = AR |",
        "|---|---|---|---|---|---|",
    ]
    if table["rows"] and "c" in table["rows"][0]:
        verify = table["rows"][0]["verify_cost"]
        lines[0] += f", verification T_v = {verify:.2f} T(1) (the uniform draft's iteration)"
        lines[2] += " c | theory (flat T) | tokens/(cγ+1) |"
        lines[3] += "---|---|---|"
    for r in table["rows"]:
        low, high = r["interval"] or (float("nan"), float("nan"))
        by_pos = " ".join(f"{a:.2f}" for a in r["alpha_by_position"])
        same = {True: "yes", False: "NO"}.get(r.get("greedy_identical"), "-")
        lines.append(
            f"| {r['draft']} | {r['alpha']:.3f} | {by_pos} | {r['tokens_per_iteration']:.2f} | "
            f"{r['speedup']:.2f}x ({low:.2f}-{high:.2f}) | {same} |"
        )
        if "c" in r:
            lines[-1] += f" {r['c']:.3f} | {r['theory_speedup']:.2f}x | {r['flat_speedup']:.2f}x |"
    tasks = list(table["rows"][0]["per_task_tokens_per_iteration"]) if table["rows"] else []
    if tasks:
        lines += ["", "tokens per iteration by task:", ""]
        lines.append("| draft | " + " | ".join(tasks) + " |")
        lines.append("|---" * (len(tasks) + 1) + "|")
        for r in table["rows"]:
            cells = " | ".join(f"{r['per_task_tokens_per_iteration'][t]:.2f}" for t in tasks)
            lines.append(f"| {r['draft']} | {cells} |")
    return "\n".join(lines)
