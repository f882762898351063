"""Extension (d), adaptive γ: every policy against every fixed γ, on the trained pairs.

    python -m experiments.main --config=configs/extensions.py:parts=adaptive --workdir=runs/ext

For each draft and temperature: the target's T(k) and the draft's step cost are measured first
(for `TheoryGamma`), then speculative decoding with every fixed γ in `gammas` and with each
policy at gamma_max = max(gammas) decodes the same validation prompts at batch 1 (each prompt
its own call, the paper's setting), timed round-robin (CPU seconds, median over `repeats`).
The policies verify at the static width gamma_max + 1 (the default; the theory policy models
it), and a name with "+auto" verifies only as wide as its drafts (`verify_widths="auto"`; the
theory policy then models γ + 1); `theory_loop` is the theory policy on whole-iteration costs
measured in the loop (each fixed-γ decoder's CPU seconds per iteration on a separate
calibration prompt: a cost, not an acceptance, is measured; α is still estimated online);
`positional` and `positional_loop` are the same with acceptance estimated per draft position
(`PositionalGamma`: survival rates, for drafts whose acceptances are correlated along a
proposal, like prompt lookup); `fixed_via_adaptive` is the adaptive drafter at a constant
γ = gamma_max, its own overhead against the fixed-γ scan. The best fixed γ is found after the
fact; each row's `vs_best_fixed` is the best fixed γ's ms/token over its own.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from configs import leviathan2023 as lev_config
from experiments.common import models as model_lib
from specjax.benchmark.costs import call_cost
from specjax.benchmark.timing import interleaved, time_call
from specjax.data import ByteTokenizer, load_corpus
from specjax.data.batches import sample_prompts
from specjax.decoding import (
    COST_MODEL_POLICIES,
    ConfidenceGamma,
    FixedGamma,
    HeuristicGamma,
    SpeculativeDecoder,
    make_warper,
    raw_counts,
    summarize_stats,
)


def _models(c, workdir: str, log):
    """(target, tparams, {draft name: (model, params)}) from the leviathan2023 model cache."""
    spec = "smoke" if c.tiny else "tiny"
    lev = lev_config.get_config(f"{spec},corpus={c.corpus},drafts={'/'.join(c.drafts)}")
    loaded = model_lib.load_all(lev, workdir, log)
    target, tparams, _ = loaded["target"]
    return target, tparams, {n: (m, p) for n, (m, p, _) in loaded["drafts"].items()}


# Policies whose iteration costs are fixed-γ decoders' measured seconds per iteration.
LOOP_CALIBRATED = {f"{name}_loop": policy for name, policy in COST_MODEL_POLICIES.items()}


def policy_of(name: str, t_target: dict, t_draft: float, iteration_costs=None):
    """(policy, verify_widths) of a policy name; "+auto" verifies only as wide as the drafts."""
    name, plus, widths = name.partition("+")
    if plus and widths != "auto":
        raise ValueError(f"policies: unknown suffix +{widths!r} (only +auto)")
    if name in LOOP_CALIBRATED:
        return LOOP_CALIBRATED[name].from_iteration_costs(iteration_costs), widths or "static"
    policy = _policy_only(name, t_target, t_draft, static=not plus)
    return policy, widths or "static"


def check(c, name: str = "config") -> None:
    """Raises ValueError naming the first entry of `c.policies` that `policy_of` would refuse,
    before the models load and the costs are measured (`name`: the config's path)."""
    policies = c.policies
    if isinstance(policies, str) or not policies:
        raise ValueError(f"{name}.policies = {policies!r}: must list at least one policy name")
    known = {"heuristic", "fixed_via_adaptive", *COST_MODEL_POLICIES, *LOOP_CALIBRATED}
    for i, label in enumerate(policies):
        policy, plus, widths = str(label).partition("+")
        base, colon, threshold = policy.partition(":")
        ok = (not plus or widths == "auto") and (
            (policy in known) or (base == "confidence" and (not colon or _is_fraction(threshold)))
        )
        if not ok:
            raise ValueError(
                f"{name}.policies[{i}] = {label!r}: not a policy; use one of {sorted(known)} or "
                "confidence[:threshold in (0, 1)], each optionally with +auto"
            )


def _is_fraction(text: str) -> bool:
    """Whether `text` is a threshold ConfidenceGamma takes (its own check decides)."""
    try:
        ConfidenceGamma(float(text))
    except ValueError:  # not a number, or outside the policy's range
        return False
    return True


def needs_iteration_costs(policies) -> bool:
    """Whether a policy list holds `theory_loop` or `positional_loop` (with or without "+auto")."""
    return any(name.partition("+")[0] in LOOP_CALIBRATED for name in policies)


def _policy_only(name: str, t_target: dict, t_draft: float, static: bool):
    if name == "heuristic":
        return HeuristicGamma()
    if name.startswith("confidence"):
        _, _, threshold = name.partition(":")
        return ConfidenceGamma(float(threshold) if threshold else 0.4)
    if name in COST_MODEL_POLICIES:
        return COST_MODEL_POLICIES[name].from_costs(t_target, t_draft, static_verify=static)
    if name == "fixed_via_adaptive":
        return FixedGamma()
    raise ValueError(f"policies: unknown policy {name!r}")


def decode_each(decoder, tparams, dparams, prompts, key, new: int, eos_id=None) -> list:
    """One `generate` call per prompt (batch 1, the paper's setting); their results."""
    return [
        decoder.generate(tparams, dparams, prompts=[p], key=key, max_new_tokens=new, eos_id=eos_id)
        for p in prompts
    ]


def iteration_costs(
    decoders: dict, gammas, tparams, dparams, prompts, key, new: int, clock=time.process_time
) -> list:
    """Seconds per loop iteration of each fixed-γ decoder on calibration prompts.

    A cost measurement (time / target calls), not an acceptance one: `theory_loop` still
    estimates α online. Median of 3 timed runs after one untimed (compiling) run, on `clock`
    (process CPU seconds by default; wall seconds where an accelerator computes).
    """
    costs = []
    for g in gammas:
        d = decoders[f"fixed{g}"]
        fn = lambda d=d: decode_each(d, tparams, dparams, prompts, key, new)
        timing = time_call(fn, repeats=3, clock=clock)
        calls = summarize_stats([r.stats for r in timing.output])["target_calls"]
        costs.append(timing.median / calls)
    return costs


def _row(label, result, seconds) -> dict:
    s = summarize_stats([r.stats for r in result])
    tokens = max(s["tokens_emitted"], 1)
    return dict(
        decoder=label,
        ms_per_token=float(np.median(seconds)) * 1e3 / tokens,
        tokens_per_target_call=s["tokens_emitted"] / s["target_calls"],
        draft_calls_per_token=s["draft_calls"] / tokens,
        alpha=s["alpha_empirical"],
        mean_gamma=s.get("mean_gamma", float(label[5:]) if label[5:].isdigit() else np.nan),
        # The raw counts behind the ratios (pooled over prompts), so readers can recompute them.
        counts=raw_counts(s),
    )


def run(c, workdir: str, log=print) -> dict:
    """Measures every policy and fixed γ per draft and temperature; returns JSON-able results.

    With `c.pretrained` set (`configs/extensions.py:smollm2`): the real target, per task and on
    a mixed set (`adaptive_real.py`).
    """
    check(c)
    if c.get("pretrained"):
        from experiments.extensions import adaptive_real

        return adaptive_real.run(c, workdir, log)
    target, tparams, drafts = _models(c, workdir, log)
    val = np.asarray(load_corpus(c.corpus, "validation", ByteTokenizer()))
    prompts = [np.asarray(p) for p in sample_prompts(val, c.prompts, c.prompt_len, seed=1).tokens]
    # Other prompts for theory_loop's cost calibration (never the measured ones).
    calibration = [np.asarray(p) for p in sample_prompts(val, 1, c.prompt_len, seed=2).tokens]
    gamma_max = max(c.gammas)
    # The cost model takes each width's fastest sample: other jobs only ever slow a sample down.
    where = dict(context=c.prompt_len, cache_len=c.cache_len, steps=16, repeats=7)

    def cost(model, params, k):
        return min(call_cost(model, params, k, **where).samples)

    t_target = {k: cost(target, tparams, k) for k in range(1, gamma_max + 2)}
    log("T(k)/T(1): " + ", ".join(f"{k}: {v / t_target[1]:.2f}" for k, v in t_target.items()))
    out = {"T_target_ms": {k: v * 1e3 for k, v in t_target.items()}, "blocks": []}
    for name, (draft, dparams) in drafts.items():
        t_draft = cost(draft, dparams, 1)
        log(f"{name}: c = {t_draft / t_target[1]:.4f}")
        for t in c.temperatures:
            warper = make_warper(t)
            key = jax.random.PRNGKey(c.seed)
            decoders = {
                f"fixed{g}": SpeculativeDecoder(target, draft, g, warper, c.cache_len)
                for g in c.gammas
            }
            per_iteration = None
            if needs_iteration_costs(c.policies):
                if tuple(c.gammas) != tuple(range(1, gamma_max + 1)):
                    raise ValueError(f"theory_loop needs gammas = 1..gamma_max, got {c.gammas}")
                per_iteration = iteration_costs(
                    decoders, c.gammas, tparams, dparams, calibration, key, c.max_new_tokens
                )
                log("iteration cost / γ: " + ", ".join(f"{t * 1e3:.3f} ms" for t in per_iteration))
            for label in c.policies:
                policy, widths = policy_of(label, t_target, t_draft, per_iteration)
                decoders[label] = SpeculativeDecoder(
                    target,
                    draft,
                    gamma_max,
                    warper,
                    c.cache_len,
                    gamma_policy=policy,
                    verify_widths=widths,
                )
            calls = {
                label: (
                    lambda d=d, dp=dparams, k=key: decode_each(
                        d, tparams, dp, prompts, k, c.max_new_tokens
                    )
                )
                for label, d in decoders.items()
            }
            timed = interleaved(calls, c.repeats)
            rows = [_row(label, t.output, t.cpu_samples) for label, t in timed.items()]
            fixed = [r for r in rows if r["decoder"] in {f"fixed{g}" for g in c.gammas}]
            best = min(fixed, key=lambda r: r["ms_per_token"])
            for r in rows:
                r["vs_best_fixed"] = best["ms_per_token"] / r["ms_per_token"]
            out["blocks"].append(
                dict(
                    iteration_ms=None
                    if per_iteration is None
                    else [x * 1e3 for x in per_iteration],
                    draft=name,
                    temperature=float(t),
                    c=t_draft / t_target[1],
                    best_fixed=best["decoder"],
                    rows=rows,
                )
            )
            log(report_block(out["blocks"][-1]))
    return out


def report_block(block: dict) -> str:
    """One draft and temperature as a markdown table."""
    lines = [
        f"**{block['draft']}, t = {block['temperature']:g}** (c = {block['c']:.3f}; best fixed: "
        f"{block['best_fixed']})",
        "",
        "| decoder | ms/token | tokens/target call | draft calls/token | α | mean γ "
        "| vs best fixed |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in block["rows"]:
        lines.append(
            f"| {r['decoder']} | {r['ms_per_token']:.3f} | {r['tokens_per_target_call']:.2f} | "
            f"{r['draft_calls_per_token']:.2f} | {r['alpha']:.3f} | {r['mean_gamma']:.2f} | "
            f"{r['vs_best_fixed']:.3f} |"
        )
    return "\n".join(lines)


def report(results: dict) -> str:
    """Every block, then per policy the worst ratio to the best fixed γ over the blocks."""
    if results.get("real"):
        from experiments.extensions import adaptive_real

        return adaptive_real.report(results)
    parts = [report_block(b) for b in results["blocks"]]
    policies = [
        r["decoder"] for r in results["blocks"][0]["rows"] if not r["decoder"][5:].isdigit()
    ]
    lines = ["| policy | worst vs best fixed | best vs best fixed |", "|---|---|---|"]
    for p in policies:
        ratios = [
            r["vs_best_fixed"] for b in results["blocks"] for r in b["rows"] if r["decoder"] == p
        ]
        lines.append(f"| {p} | {min(ratios):.3f} | {max(ratios):.3f} |")
    return "\n\n".join(parts + ["\n".join(lines)])
