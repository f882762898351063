r"""The sequoia2024 mode: acceptance by rank → T(k) → tokens per call vs tree size → walltime.

    python -m experiments.main --config=configs/sequoia2024.py --workdir=runs/sequoia-python

For each temperature:
  1. the positional and conditional acceptance vectors by rank (with and without replacement)
     on text the target generates, beside α (`specjax.rank_acceptance`);
  2. for every method (`methods.py`) and tree size n: tokens per target call measured on a batch
     of prompts and predicted by `expected_accepted` from that vector; greedy rows must equal
     autoregressive decoding token for token;
  3. walltime (`walltime.py`): AR, every chain γ, the Sequoia trees and the tree
     `hardware_aware_tree` picks from the measured T(k) (`costs.py`), timed round-robin at
     batch 1; and the tree it would pick on an accelerator's flat T(k) (predicted).
Writes <workdir>/results.json (every figure), results.csv (experiment 1 rows), results.md and
PNG plots (`report.py`, `plots.py`).
"""

from __future__ import annotations

import json
import os
import platform
import time

import jax
import numpy as np

from experiments.common import models as model_lib
from experiments.sequoia2024 import costs as costs_lib
from experiments.sequoia2024 import methods, plots, report
from experiments.sequoia2024.walltime import walltime
from specjax.benchmark.alpha_generated import generate_reference
from specjax.data import load_corpus
from specjax.data.batches import sample_prompts
from specjax.data.tokenizer import ByteTokenizer
from specjax.decoding import (
    AutoregressiveDecoder,
    expected_accepted,
    make_warper,
    summarize_stats,
)
from specjax.decoding import loop as decoding_loop
from specjax.rank_acceptance import rank_acceptance_on_sequences


def _log(msg: str) -> None:
    print(msg, flush=True)


def measure_acceptance(config, target, tparams, draft, dparams, prompts, t: float) -> dict:
    """Acceptance by rank on text the target generates at t (rules "with" and "without")."""
    sequences = generate_reference(
        target,
        tparams,
        np.stack(prompts),
        t,
        config.reference_tokens,
        config.cache_len,
        seed=config.seed,
    )
    return rank_acceptance_on_sequences(
        target,
        tparams,
        draft,
        dparams,
        sequences,
        config.prompt_len,
        make_warper(t),
        config.ranks,
        rules=("with", "without"),
        samples=config.rank_samples,
        seed=config.seed,
    )


def _stats_run(dec, params, prompts, key, new):
    result = decoding_loop.generate(dec, params, prompts, key, new)
    return result, summarize_stats([result.stats])


def tokens_per_call(config, target, tparams, draft, dparams, t, acceptance, prompts) -> list:
    """Experiment 1 at temperature t: one row per (method, n), measured and expected."""
    warper = make_warper(t)
    key = jax.random.PRNGKey(config.seed + 1)
    new = config.max_new_tokens
    ar = AutoregressiveDecoder(target, warper, cache_len=config.cache_len)
    ar_result = decoding_loop.generate(ar, (tparams,), prompts, key, new)
    ar_tokens = np.asarray(ar_result.tokens)
    depth_cap = config.max_depth or None
    rows, done = [], {}
    for n in config.sizes:
        for method in config.methods:
            rule = methods.ACCEPTANCE_RULE[method]
            positional = acceptance[rule]["positional"]
            if n == 1:
                rows.append(dict(method=method, n=1, depth=0, measured=1.0, expected=1.0))
                continue
            tree = methods.build(method, n, positional, config.kchains, depth_cap)
            # A chain is a chain under either sibling rule (one child per node).
            replacement = methods.REPLACEMENT[method]
            ident = tree.parents if tree.max_branch == 1 else (tree.parents, replacement)
            if ident in done:  # the same tree, decoder and rule as another method's: reused
                row = dict(done[ident], method=method, same_as=done[ident]["method"])
                row["expected"] = 1.0 + expected_accepted(tree, positional)
                rows.append(row)
                continue
            dec = methods.method_decoder(config, target, draft, warper, method, tree)
            result, summary = _stats_run(dec, (tparams, dparams), prompts, key, new)
            measured = summary.get("sampler_tokens_per_iteration", summary["tokens_per_iteration"])
            row = dict(
                method=method,
                n=n,
                depth=tree.max_depth,
                parents=list(tree.parents),
                measured=float(measured),
                expected=1.0 + expected_accepted(tree, positional),
                accepted_depth_histogram=summary.get("accepted_depth_histogram"),
                matches_ar=bool(np.array_equal(np.asarray(result.tokens), ar_tokens))
                if warper.is_greedy
                else None,
            )
            done[ident] = row
            rows.append(row)
            _log(
                f"    {method:>8s} n={n:2d} depth {row['depth']:2d}: tokens/call measured "
                f"{row['measured']:.3f}, expected {row['expected']:.3f} "
                f"({row['measured'] / row['expected'] - 1:+.1%})"
            )
        jax.clear_caches()
    return rows


def _trained_pair(config, workdir: str):
    """The byte-level pair of experiments/common/models.py and validation-split prompts."""
    loaded = model_lib.load_all(config, workdir, _log)
    target, tparams, tmeta = loaded["target"]
    draft_name = config.drafts[0]
    draft, dparams, _ = loaded["drafts"][draft_name]
    val = np.asarray(load_corpus(config.corpus, "validation", ByteTokenizer()))
    counts = (config.stats_prompts, config.walltime_prompts)
    drawn = sample_prompts(val, sum(counts), config.prompt_len, seed=config.seed + 1).tokens
    drawn = [np.asarray(p, np.int32) for p in drawn]
    stats, wall = drawn[: counts[0]], drawn[counts[0] :]
    return target, tparams, draft, dparams, stats, wall, tmeta["config"]["name"], draft_name


def run(config, workdir: str) -> dict:
    """Runs the whole pipeline; returns (and writes) every figure."""
    start = time.perf_counter()
    load_start = os.getloadavg()
    os.makedirs(workdir, exist_ok=True)
    if config.get("pretrained"):  # a real target: experiments/sequoia2024/real.py
        from experiments.sequoia2024 import real

        _log(f"[1/4] models (target {config.pretrained}, draft {config.draft_head})")
        models = real.load(config, _log)
    else:
        _log(f"[1/4] models (target {config.target}, draft {config.drafts[0]}, {config.corpus})")
        models = _trained_pair(config, workdir)
    target, tparams, draft, dparams, stat_prompts, wall_prompts, target_name, draft_name = models
    # The acceptance vectors are measured on the target's own continuations of the prompts
    # whose tokens per call are counted: what differs between the two is the model, not the text.
    ref_prompts = stat_prompts

    _log("[2/4] verification cost T(k) of the target, T_draft(k) of the draft")
    costs = costs_lib.measure_costs(config, target, tparams, draft, dparams)

    per_t = {}
    for t in config.temperatures:
        t = float(t)
        _log(f"[3/4] t={t:g}: acceptance by rank on the target's text, tokens per call")
        acceptance = measure_acceptance(config, target, tparams, draft, dparams, ref_prompts, t)
        for rule, a in acceptance.items():
            _log(
                f"    {rule:>7s}: alpha {a['alpha']:.3f}, P "
                + " ".join(f"{x:.3f}" for x in a["positional"])
            )
        rows = tokens_per_call(config, target, tparams, draft, dparams, t, acceptance, stat_prompts)
        _log(f"[4/4] t={t:g}: walltime, round-robin over {config.repeats} rounds")
        wall = walltime(config, target, tparams, draft, dparams, t, acceptance, costs, wall_prompts)
        for r in wall["rows"]:
            _log(
                f"    {r['name']:>10s} n={r['nodes']:2d} tok/call {r['tokens_per_call']:5.2f} "
                f"{r['ms_per_token']:.3f} ms/token speedup {r['speedup']:.2f}x "
                f"(model {r['predicted_speedup']:.2f}x)"
            )
        per_t[f"{t:g}"] = {"acceptance": acceptance, "tokens_per_call": rows, "walltime": wall}

    results = {
        "config": config.to_dict(),
        "device": str(jax.devices()[0]),
        "host": {
            "cpus": os.cpu_count(),
            "machine": platform.machine(),
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
        },
        "target": {"name": target_name, "params": int(target.config.num_params())},
        "draft": {"name": draft_name, "params": int(draft.config.num_params())},
        "costs": {
            "t_target": {str(k): v for k, v in costs["t_target"].items()},
            "t_draft": {str(k): v for k, v in costs["t_draft"].items()},
            "median": {
                kind: {str(k): v for k, v in d.items()} for kind, d in costs["median"].items()
            },
        },
        "temperatures": per_t,
        "seconds": time.perf_counter() - start,
    }
    with open(os.path.join(workdir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1, default=float)
    report.write_csv(results, os.path.join(workdir, "results.csv"))
    text = report.format_all(results)
    with open(os.path.join(workdir, "results.md"), "w", encoding="utf-8") as f:
        f.write(text)
    written = plots.write_all(results, workdir)
    _log(text)
    _log(f"done in {results['seconds']:.0f} s; figures in {workdir} ({', '.join(written)})")
    return results
