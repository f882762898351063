"""Hierarchical speculation measured: target <- middle <- small vs each 2-level pair.

    from configs import extensions
    from experiments.extensions import hierarchy
    results = hierarchy.run(extensions.hierarchy(), "runs/hierarchy")
    print(hierarchy.report(results))

or `python -m experiments.extensions.hierarchy runs/hierarchy` (`--tiny` for the small config).

The extensions driver (experiments/extensions/pipeline.py) calls `run` and `report` with the
knobs of `configs/extensions.py`'s `hierarchy(tiny)`.

Models (not the issue's zoo pairs, which are not trained here): the cached mini Python pair,
target `mini_target` (0.86M) and the data-trained `mini_draft` (83K) as the middle level, and a
bigram fitted on the corpus' training split as the small level. `tiny=True` uses random-weight
transformers on a 32-token vocabulary and a bigram on random tokens (no cache, no corpus).

For each temperature, every decoder decodes the same batch-1 prompts with the same key, all
of them once per round (round-robin: other processes' load hits all alike), medians over rounds:
  * autoregressive target (the baseline) and autoregressive middle (for c);
  * 2-level target <- middle and target <- bigram at every outer γ;
  * 2-level middle <- bigram at every inner γ (the middle level alone: its α and its cost);
  * 3-level target <- (middle <- bigram) at every (outer γ, inner γ).
The prediction beside each measurement is the paper's cost model with measured costs
(`specjax.theory.measured_speedup`: E[tokens/iteration](α, γ) T(1) / (T(γ + 1) + γ t_draft)),
applied recursively: the 3-level draft's cost per drafted token is the middle level's own
speculative cost per emitted token, t_mid = (T_mid(γ_in + 1) + γ_in T_small) / E[tokens](α_in,
γ_in), with α_in measured on middle <- bigram, α measured on target <- middle (the 3-level
drafts follow the middle model's law exactly, so its α is the same). T(k) are in-loop call
costs (`specjax.benchmark.costs.call_cost`), timed in the same round-robin rounds as the
decoders. A second prediction ("inner calls") counts the inner iterations the 3-level run
actually made per outer iteration (it overshoots γ: the inner level runs until every row has
γ + 1 tokens, and cuts). Both count model calls only; on this CPU the loop's own work per
iteration (sampling, acceptance, bookkeeping) is comparable to a call of these small models, so
a third ("composed") builds the 3-level iteration from measured iterations instead: a 2-level
target <- middle iteration at the same γ minus its γ middle tokens, plus the measured middle <-
bigram iteration times the inner iterations made (`predict_composed`).
"""

from __future__ import annotations

import os
import platform
import time

import jax
import numpy as np

from experiments.extensions.hierarchy_report import report
from specjax import theory
from specjax.benchmark.costs import call_cost
from specjax.benchmark.timing import interleaved
from specjax.decoding import (
    AutoregressiveDecoder,
    SpeculativeDecoder,
    SpeculativeDrafter,
    make_warper,
    raw_counts,
    summarize_stats,
)
from specjax.decoding import loop as decoding_loop
from specjax.models import NgramLM, TransformerConfig, TransformerLM, fit_ngram

# -- models ------------------------------------------------------------------------------------


def _random_params(model, seed: int, scale: float = 0.3):
    shapes = jax.eval_shape(model.init_params, jax.random.PRNGKey(0))
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        noise = scale * rng.standard_normal(leaf.shape).astype(np.float32)
        is_scale = getattr(path[-1], "key", None) == "scale"
        return jax.numpy.asarray(1.0 + noise if is_scale else noise)

    return jax.tree_util.tree_map_with_path(draw, shapes)


def load_models(cfg, log=print) -> dict:
    """name -> (model, params, description) for "target", "middle", "small"; and prompts."""
    if cfg.models == "random":
        vocab = 32
        arch = dict(num_heads=2, max_len=cfg.cache_len)
        target = TransformerLM(
            TransformerConfig.gpt2(vocab, num_layers=1, embed_dim=32, mlp_dim=64, **arch)
        )
        rng = np.random.default_rng(cfg.seed)
        train = rng.integers(0, vocab, 2000)
        prompts = [rng.integers(0, vocab, cfg.prompt_len) for _ in range(cfg.num_prompts)]
        tp = _random_params(target, cfg.seed + 1)
        # The middle level: the target with noisy weights (it agrees with it often, not always).
        mp = jax.tree.map(lambda x: x + 0.03 * rng.standard_normal(x.shape).astype(x.dtype), tp)
        models = {
            "target": (target, tp, "random gpt2 L1 d32"),
            "middle": (target, mp, "the target + N(0, 0.03^2) noise"),
            "small": (NgramLM(vocab, 2), fit_ngram(train, vocab, 2), "bigram (random tokens)"),
        }
        return {"models": models, "prompts": prompts}
    from experiments.common.models import model_path
    from specjax.checkpoint import load_model
    from specjax.data import load_corpus
    from specjax.data.batches import sample_prompts
    from specjax.data.tokenizer import ByteTokenizer

    tok = ByteTokenizer()
    models = {}
    for role in ("target", "middle"):
        name = cfg[role]
        model, params, _ = load_model(model_path(name, cfg.corpus, log, option=role))
        size = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
        models[role] = (model, params, f"{name} ({size / 1e3:.0f}K params)")
        log(f"  {role}: {models[role][2]}")
    train = np.asarray(load_corpus(cfg.corpus, "train", tok))
    models["small"] = (
        NgramLM(tok.vocab_size, 2),
        fit_ngram(train, tok.vocab_size, 2),
        f"bigram fitted on {train.size} {cfg.corpus} training tokens",
    )
    val = np.asarray(load_corpus(cfg.corpus, "validation", tok))
    prompts = sample_prompts(val, cfg.num_prompts, cfg.prompt_len, seed=cfg.seed + 1).tokens
    return {"models": models, "prompts": [np.asarray(p) for p in prompts]}


# -- decoders ----------------------------------------------------------------------------------


def decoders(cfg, models, warper) -> dict:
    """name -> (decoder, params tuple, description) for one temperature."""
    (target, tp, _), (middle, mp, _), (small, sp, _) = (
        models["target"],
        models["middle"],
        models["small"],
    )
    cache = dict(cache_len=cfg.cache_len)
    out = {
        "ar": (AutoregressiveDecoder(target, warper, **cache), (tp,), dict(kind="ar")),
        "ar_middle": (AutoregressiveDecoder(middle, warper, **cache), (mp,), dict(kind="ar_mid")),
    }
    for gi in cfg.inner_gammas:
        dec = SpeculativeDecoder(middle, small, int(gi), warper, **cache)
        out[f"middle<-small g{gi}"] = (dec, (mp, sp), dict(kind="inner", inner_gamma=int(gi)))
    for g in cfg.outer_gammas:
        g = int(g)
        for name, (draft, dp) in (("middle", (middle, mp)), ("small", (small, sp))):
            dec = SpeculativeDecoder(target, draft, g, warper, **cache)
            out[f"target<-{name} g{g}"] = (dec, (tp, dp), dict(kind=f"2L-{name}", gamma=g))
        for gi in cfg.inner_gammas:
            inner = SpeculativeDecoder(middle, small, int(gi), warper, **cache)
            dec = SpeculativeDecoder(target, SpeculativeDrafter(inner), g, warper, **cache)
            desc = dict(kind="3L", gamma=g, inner_gamma=int(gi))
            out[f"target<-middle<-small g{g}/{gi}"] = (dec, (tp, (mp, sp)), desc)
    return out


# -- the cost model ----------------------------------------------------------------------------


def cost_calls(cfg, models, samples: dict) -> dict:
    """Zero-argument callables that each time one in-loop call cost T(k) into `samples`.

    Keys ("cost", role, k) for T_target(k) (k = 1 and every outer γ + 1), T_middle(k) (1 and
    every inner γ + 1) and T_small(1); they join the decoders' round-robin, so the costs are
    measured under the same load as the decoders they predict.
    """
    kw = dict(context=cfg.prompt_len, cache_len=cfg.cache_len, steps=cfg.cost_steps, repeats=1)
    wanted = [("target", k) for k in sorted({1} | {int(g) + 1 for g in cfg.outer_gammas})]
    wanted += [("middle", k) for k in sorted({1} | {int(g) + 1 for g in cfg.inner_gammas})]
    wanted.append(("small", 1))

    def timed(role, k):
        model, params, _ = models[role]
        timing = call_cost(model, params, k, **kw)
        samples.setdefault((role, k), []).extend(timing.samples)
        return timing.median

    return {("cost", role, k): (lambda r=role, k=k: timed(r, k)) for role, k in wanted}


def pooled_costs(samples: dict) -> dict:
    """role -> {k: median seconds per call} from the pooled samples."""
    out = {"target": {}, "middle": {}, "small": {}}
    for (role, k), values in sorted(samples.items()):
        out[role][k] = float(np.median(values))
    return out


def predict(row: dict, costs: dict, alpha_outer: dict, alpha_inner: dict) -> None:
    """Adds the recursive cost model's predicted speedup over autoregressive to a row
    (`specjax.theory.measured_speedup`, and `hierarchical_speedup` for 3 levels)."""
    t_target = costs["target"]
    kind = row["kind"]
    if kind == "inner":
        gi = row["inner_gamma"]
        row["predicted_speedup"] = float(
            theory.measured_speedup(alpha_inner[gi], gi, costs["middle"], costs["small"][1])
        )
        return
    if kind in ("2L-middle", "2L-small"):
        draft = "middle" if kind == "2L-middle" else "small"
        alpha = alpha_outer[kind][row["gamma"]]
        row["predicted_speedup"] = float(
            theory.measured_speedup(alpha, row["gamma"], t_target, costs[draft][1])
        )
        return
    if kind == "3L":
        g, gi = row["gamma"], row["inner_gamma"]
        inner = (alpha_inner[gi], gi, costs["middle"], costs["small"][1])
        alpha = alpha_outer["2L-middle"][g]
        row["t_mid_per_token_ms"] = float(theory.hierarchical_draft_cost(*inner)) * 1e3
        row["predicted_speedup"] = float(theory.hierarchical_speedup(alpha, g, t_target, *inner))
        # With the inner iterations the run made (overshoot and cut included).
        inner_iter = costs["middle"][gi + 1] + gi * costs["small"][1]  # s per inner iteration
        calls = row["draft_calls_per_iteration"]
        etok = float(theory.expected_tokens_per_iteration(alpha, g))
        row["predicted_speedup_calls"] = etok * t_target[1] / (t_target[g + 1] + calls * inner_iter)


def predict_composed(rows: list) -> None:
    """The 3-level iteration composed of measured parts (loop overheads included).

    outer part = a 2-level target <- middle iteration at the same γ minus its γ middle tokens
    (each at the autoregressive middle's time per token); inner part = the measured middle <-
    bigram iteration at the same inner γ, times the inner iterations the 3-level run made per
    outer iteration. Speedup = 3-level tokens per iteration / (outer + inner part), over the
    autoregressive target's time per token.
    """
    by = {r["name"]: r for r in rows}
    ar, ar_mid = by["ar"], by["ar_middle"]
    for row in rows:
        if row["kind"] != "3L":
            continue
        g, gi = row["gamma"], row["inner_gamma"]
        two = by[f"target<-middle g{g}"]
        inner = by[f"middle<-small g{gi}"]
        outer_part = two["iteration_ms"] - g * ar_mid["iteration_ms"]
        inner_part = row["draft_calls_per_iteration"] * inner["iteration_ms"]
        row["outer_part_ms"], row["inner_part_ms"] = outer_part, inner_part
        row["predicted_speedup_composed"] = (
            row["tokens_per_iteration"] * ar["iteration_ms"] / (outer_part + inner_part)
        )


# -- the experiment ----------------------------------------------------------------------------


def measure_temperature(cfg, models, prompts, t: float, costs: dict, log=print) -> list:
    """Every decoder at temperature t: timings and statistics, one row each.

    `costs`: the cost programs (`cost_calls`), timed in the same rounds as the decoders.
    """
    warper = make_warper(t)
    key = jax.random.PRNGKey(cfg.seed)
    decs = decoders(cfg, models, warper)
    new = cfg.max_new_tokens

    def run_all(name):
        dec, params, _ = decs[name]
        return [decoding_loop.generate(dec, params, [p], key, new) for p in prompts]

    start = time.perf_counter()
    calls = {n: (lambda n=n: run_all(n)) for n in decs}
    timed = interleaved({**calls, **costs}, cfg.repeats)
    log(
        f"    timed {len(decs)} decoders x {cfg.repeats} rounds "
        f"({time.perf_counter() - start:.0f} s)"
    )
    rows, outputs = [], {}
    for name, (_, _, desc) in decs.items():
        results = timed[name].output
        outputs[name] = [r.new_tokens()[0].tolist() for r in results]
        summary = summarize_stats([r.stats for r in results])
        emitted = int(sum(int(np.sum(r.stats.emitted)) for r in results))
        wall = timed[name].median
        iterations = sum(int(r.stats.target_calls) for r in results)
        row = dict(desc, name=name)
        row.update(
            tokens_per_s=emitted / wall,
            iteration_ms=wall * 1e3 / iterations,
            wall_samples=[float(x) for x in timed[name].samples],
            alpha=summary.get("alpha_empirical"),
            tokens_per_iteration=summary["tokens_per_iteration"],
            draft_calls_per_iteration=summary["draft_calls"] / max(summary["target_calls"], 1),
            # The counts behind those ratios (pooled over prompts), so readers can recompute them.
            counts=raw_counts(summary),
        )
        rows.append(row)
    by_name = {r["name"]: r for r in rows}
    for row in rows:
        base = by_name["ar_middle" if row["kind"] in ("inner", "ar_mid") else "ar"]
        row["speedup"] = row["tokens_per_s"] / base["tokens_per_s"]
        if warper.is_greedy and row["kind"] not in ("inner", "ar_mid"):
            row["matches_ar"] = outputs[row["name"]] == outputs["ar"]
        elif warper.is_greedy:
            row["matches_ar"] = outputs[row["name"]] == outputs["ar_middle"]
    return rows


def run(config, workdir: str, log=print) -> dict:
    """Loads the models, measures costs and every decoder at every temperature.

    Returns:
      JSON-serialisable results (also written to <workdir>/hierarchy.json).
    """
    import json

    start = time.perf_counter()
    load_start = os.getloadavg()
    os.makedirs(workdir, exist_ok=True)
    log(f"[1/3] models ({config.models})")
    loaded = load_models(config, log)
    models, prompts = loaded["models"], loaded["prompts"]
    log("[2/3] decoders and call costs T(k), round-robin")
    samples = {}
    costs = cost_calls(config, models, samples)
    tables = {}
    for t in config.temperatures:
        log(f"  t={float(t):g}")
        tables[f"t{float(t):g}"] = measure_temperature(
            config, models, prompts, float(t), costs, log
        )
        jax.clear_caches()
    costs = pooled_costs(samples)
    log(
        "[3/3] cost model; call costs ms: "
        + "; ".join(
            f"{role} " + ", ".join(f"T({k})={v * 1e3:.3f}" for k, v in sorted(d.items()))
            for role, d in costs.items()
        )
    )
    for rows in tables.values():
        alpha_inner = {r["inner_gamma"]: r["alpha"] for r in rows if r["kind"] == "inner"}
        alpha_outer = {
            kind: {r["gamma"]: r["alpha"] for r in rows if r["kind"] == kind}
            for kind in ("2L-middle", "2L-small")
        }
        for row in rows:
            predict(row, costs, alpha_outer, alpha_inner)
        predict_composed(rows)
    results = {
        "config": config.to_dict(),
        "models": {role: m[2] for role, m in models.items()},
        "costs_ms": {role: {str(k): v * 1e3 for k, v in d.items()} for role, d in costs.items()},
        "tables": tables,
        "load_avg_start": list(load_start),
        "load_avg_end": list(os.getloadavg()),
        "seconds": time.perf_counter() - start,
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs, jax {jax.__version__}",
    }
    with open(os.path.join(workdir, "hierarchy.json"), "w") as f:
        json.dump(results, f, indent=1, default=_jsonable)
    return results


def _jsonable(x):
    if isinstance(x, (np.integer, np.floating, np.bool_)):
        return x.item()
    if isinstance(x, tuple):
        return list(x)
    raise TypeError(f"not JSON-serialisable: {x!r}")


def main(argv=None) -> None:
    """`python -m experiments.extensions.hierarchy [--tiny] [workdir]`: runs, prints the report."""
    import sys

    import specjax

    args = list(sys.argv[1:] if argv is None else argv)
    tiny = "--tiny" in args
    args = [a for a in args if a != "--tiny"]
    specjax.configure_cpu()  # before the first JAX computation
    from configs import extensions

    results = run(extensions.hierarchy(tiny), args[0] if args else "runs/hierarchy")
    print(report(results))


if __name__ == "__main__":
    main()
