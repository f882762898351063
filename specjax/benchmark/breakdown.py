"""A decoding call's cost and where it goes: decoders against AR, iterations, prefill, overhead.

    figures = call_breakdown({"ar": (ar, (tp,)), "spec": (spec, (tp, dp))}, prompts, key, 128)
    print(format_breakdown(figures))

For each decoder (the autoregressive baseline under "ar", a `SpeculativeDecoder` under "spec",
any other decoder of the loop driver beside them):
  * ms/token in wall-clock and process CPU time, timed round-robin against the baseline
    (`versus.versus_autoregressive`), with the speedup's 95 % interval, tokens per iteration, α
    and whether greedy outputs equal the baseline's;
  * loop overhead: `generate` against prefill (`costs.prefill_cost`) + its iterations x its
    in-loop iteration (`costs.iteration_cost`), and for "spec" also against prefill + its
    iterations x (its model calls + the acceptance rule), from `overhead.overhead_breakdown`,
    whose iteration breakdown (ovh and the pieces around the model calls) is reported too;
  * the cache-sized copies of its compiled loop (`hlo.loop_cache_copies`).
`scripts/bench_decoding.py` is the command line over this.
"""

from __future__ import annotations

import time

from specjax.benchmark.costs import iteration_cost, prefill_cost
from specjax.benchmark.hlo import loop_cache_copies
from specjax.benchmark.overhead import overhead_breakdown
from specjax.benchmark.versus import versus_autoregressive
from specjax.decoding import arguments, loop


def call_breakdown(
    decoders: dict,
    prompts,
    key,
    max_new_tokens: int,
    *,
    repeats: int = 5,
    steps: int = 32,
    clock=time.process_time,
    cache_shapes: dict | None = None,
) -> dict:
    """Measures every decoder (see the module docstring).

    Args:
      decoders: name -> (decoder, params tuple); "ar" is the autoregressive baseline and "spec"
        a `SpeculativeDecoder` (its iteration is broken down), both required.
      prompts: the prompts every decoder generates from (one batch).
      key: PRNG key of every call.
      max_new_tokens: tokens per row (no EOS).
      repeats: timed rounds.
      steps: iterations (or calls) per timed device loop.
      clock: `time.process_time` (CPU time, steadier on shared cores) or `time.perf_counter`,
        for the in-loop costs and the loop overhead (ms/token are reported on both clocks).
      cache_shapes: model name ("target", "draft") -> its KV cache buffer's shape, for the
        HLO copy counts (None: not counted). The baseline's loop is counted for the target only.

    Returns:
      {"decoders": {name: figures}, "breakdown": overhead_breakdown's figures (seconds),
      "pieces": {piece: seconds per iteration}, "hlo_cache_copies": {"name_loop/model": n}}.
    """
    for name in ("ar", "spec"):
        if name not in decoders:
            raise ValueError(f"decoders must include {name!r}; got {sorted(decoders)}")
    calls = {
        name: (lambda d=d, p=p: loop.generate(d, p, prompts, key, max_new_tokens))
        for name, (d, p) in decoders.items()
    }
    v = versus_autoregressive(calls, repeats=repeats)
    spec, spec_params = decoders["spec"]
    target, draft = spec.models
    breakdown = overhead_breakdown(
        spec, spec_params, prompts, steps=steps, repeats=repeats, clock=clock
    )
    tokens, lengths = arguments.prepare(spec, prompts, max_new_tokens)
    cache_len = spec.cache_len
    prefill = {  # a draft without a model (prompt lookup) has nothing to prefill
        model_name: prefill_cost(
            model, params, tokens, lengths, cache_len=cache_len, repeats=repeats, clock=clock
        ).median
        if hasattr(model, "apply")
        else 0.0
        for model_name, model, params in (
            ("target", target, spec_params[0]),
            ("draft", draft, spec_params[1]),
        )
    }
    ar_tokens = [a.tolist() for a in v.timings["ar"].output.new_tokens()]
    figures = {}
    for name, (decoder, params) in decoders.items():
        result = v.timings[name].output
        iteration = iteration_cost(decoder, params, prompts, steps=steps, repeats=repeats).median
        iterations = int(result.stats.target_calls)
        timing = v.timings[name]
        loop_s = timing.cpu_median if clock is time.process_time else timing.median
        pre = prefill["target"] + (0.0 if len(decoder.models) == 1 else prefill["draft"])
        summary = result.summary()
        figures[name] = {
            "wall_ms_per_token": v.ms_per_token(name),
            "cpu_ms_per_token": v.ms_per_token(name, cpu=True),
            "speedup_wall": v.speedup(name),
            "speedup_cpu": v.speedup(name, cpu=True),
            "speedup_interval_wall": v.interval(name),
            "spread_wall": timing.spread,
            "tokens_per_iteration": summary["tokens_per_iteration"],
            "alpha_empirical": summary.get("alpha_empirical"),
            "iterations": iterations,
            "greedy_identical": [b.tolist() for b in result.new_tokens()] == ar_tokens,
            "loop_ms": loop_s * 1e3,
            "prefill_ms": pre * 1e3,
            "iteration_ms": iteration * 1e3,
            # generate() against prefill + iterations x its iteration timed in-loop.
            "overhead_vs_iterations": loop_s / (pre + iterations * iteration) - 1,
        }
    s = figures["spec"]
    per_iteration = breakdown["calls"] + breakdown["pieces"]["acceptance rule"]
    parts = prefill["target"] + prefill["draft"] + s["iterations"] * per_iteration
    s["overhead_vs_parts"] = s["loop_ms"] / 1e3 / parts - 1
    copies = {}
    for name, (decoder, params) in decoders.items() if cache_shapes else ():
        for model, shape in cache_shapes.items():
            if not (model == "draft" and len(decoder.models) == 1):
                copies[f"{name}_loop/{model}"] = loop_cache_copies(
                    decoder, params, tokens, lengths, key, max_new_tokens, shape
                )
    return {
        "decoders": figures,
        "breakdown": {k: x for k, x in breakdown.items() if k != "pieces"},
        "pieces": breakdown["pieces"],
        "hlo_cache_copies": copies,
    }


def format_breakdown(figures: dict, gamma: int, clock: str = "cpu") -> str:
    """Terminal text of `call_breakdown`'s figures (`gamma`: the speculative decoder's)."""
    d, b = figures["decoders"], figures["breakdown"]
    lines = ["decoder   wall ms/tok  CPU ms/tok  speedup wall (95 % CI)   speedup CPU  spread"]
    for name, f in d.items():
        ci = f["speedup_interval_wall"]
        ci = "" if name == "ar" or ci is None else f" ({ci[0]:.2f}-{ci[1]:.2f})"
        lines.append(
            f"{name:8s}  {f['wall_ms_per_token']:11.3f}  {f['cpu_ms_per_token']:10.3f}  "
            f"{f['speedup_wall']:7.3f}x{ci:16s}  {f['speedup_cpu']:10.3f}x  {f['spread_wall']:5.0%}"
        )
    for name, f in d.items():
        if name != "ar":
            alpha = f["alpha_empirical"]
            lines.append(
                f"{name}: tokens/iteration {f['tokens_per_iteration']:.3f}; alpha "
                f"{'-' if alpha is None else format(alpha, '.3f')}; {f['iterations']} "
                f"iterations; output equals AR's: {f['greedy_identical']}"
            )
    lines += [
        "",
        f"== one speculative iteration, in-loop ({clock} clock, ms)",
        f"  iteration {b['iteration'] * 1e3:.3f} = model calls {b['calls'] * 1e3:.3f} "
        f"(T_target({gamma + 1}) {b['t_verify'] * 1e3:.3f} + {gamma} x T_draft "
        f"{b['t_draft'] * 1e3:.3f}) + ovh {b['ovh'] * 1e3:.3f} ({b['ovh_share']:.1%} of "
        f"T_target(1) {b['t_target_1'] * 1e3:.3f}); AR iteration {b['ar_iteration'] * 1e3:.3f}",
        "  pieces: " + ", ".join(f"{n} {s * 1e3:.3f}" for n, s in figures["pieces"].items()),
        "",
        f"== loop overhead: generate() vs prefill + iterations x its parts ({clock} clock)",
    ]
    for name, f in d.items():
        line = (
            f"  {name:5s} loop {f['loop_ms']:9.2f} ms; prefill {f['prefill_ms']:7.2f} + "
            f"{f['iterations']} x iteration {f['iteration_ms']:.3f} "
            f"({f['overhead_vs_iterations']:+.1%})"
        )
        if "overhead_vs_parts" in f:
            line += f"; x (model calls + rule) ({f['overhead_vs_parts']:+.1%})"
        lines.append(line)
    if figures["hlo_cache_copies"]:
        lines += [
            "",
            f"stand-alone cache-sized copies in compiled HLO: {figures['hlo_cache_copies']}",
        ]
    return "\n".join(lines)
