"""What a target call costs on a real model, against the machine's bandwidth floor (one run).

`speed_table` times, round-robin (`timing.interleaved`) with a jitted matvec that measures the
bandwidth in every round, for each weight layout ("xla", "packed"):
  * T(k): one target call scoring k tokens per row, in a device loop (`costs.call_runner`),
    at `context` cached tokens of a `cache_len` cache;
  * the autoregressive decode step (the whole loop iteration, prefill excluded;
    `costs.iteration_runner`).
Each is reported in ms and as a multiple of the floor F = weight bytes / bandwidth of the same
round (the median over rounds of the per-round ratios, so the VM's bandwidth drift cancels), with
the bytes the call actually reads (weights once, plus the KV slots its attention reads).
`compile_seconds` times the first call of the autoregressive and a speculative program.
"""

from __future__ import annotations

import math
import time

import jax
import numpy as np

from specjax.benchmark.bandwidth import matvec_runner, params_bytes
from specjax.benchmark.costs import call_runner, iteration_runner
from specjax.benchmark.timing import interleaved, ratio_interval
from specjax.checks import check_count
from specjax.decoding import AutoregressiveDecoder, LookupDrafter, SpeculativeDecoder, make_warper
from specjax.models import with_matmul
from specjax.models.packed import KERNEL_ATTENTION_TOKENS

KS = (1, 2, 4, 5, 8, 9, 16, 32, 64)


def kv_bytes_read(config, layout: str, context: int, k: int) -> int:
    """Bytes of keys and values one call's attention reads (all layers).

    The packed layout's kernel (k <= KERNEL_ATTENTION_TOKENS) reads the live slots; XLA's
    blockwise attention reads whole blocks of `config.attention_block` slots up to the longest
    live row.
    """
    live = context + k
    if layout != "packed" or k > KERNEL_ATTENTION_TOKENS:
        live = math.ceil(live / config.attention_block) * config.attention_block
    per_slot = 2 * config.num_kv_heads * config.head_dim * 4  # keys and values, float32
    return config.num_layers * live * per_slot


def speed_table(
    model,
    params,
    *,
    layouts=("xla", "packed"),
    ks=KS,
    context: int = 128,
    cache_len: int = 1024,
    steps: int = 4,
    rounds: int = 7,
) -> dict:
    """T(k) and the AR step per layout, against the bandwidth floor (see the module docstring).

    Args:
      model, params: a `TransformerLM` in any layout, and its params.
      layouts: weight layouts to compare ("xla", "packed").
      ks: tokens per call.
      context: cached tokens before each call.
      cache_len: cache positions.
      steps: calls (or iterations) per timed device loop.
      rounds: timed round-robin rounds.

    Returns:
      {"bandwidth_gbs": median, "weight_bytes", "floor_ms": median F, "rows": [{"layout",
      "call" ("T(k)" or "AR step"), "k", "ms", "over_floor", "over_floor_interval",
      "bytes_read", "gbs", "fraction_of_bandwidth"}], "rounds", "context", "cache_len"}.
    """
    # Before the first program compiles: a bad count gave negative or nan times, not an error.
    ks = tuple(ks)  # read twice: a generator would be spent by the check
    for k in ks:
        check_count("each of ks", k)
    check_count("context", context, low=0)
    check_count("cache_len", cache_len)
    check_count("steps", steps)
    check_count("rounds", rounds)
    run_matvec, matvec_bytes = matvec_runner()
    weight_bytes = params_bytes(params)
    calls, meta = {"matvec": run_matvec}, {}
    prompt = [np.arange(context + 1) % (model.vocab_size - 1) + 1]
    for layout in layouts:
        m, p = with_matmul(model, params, layout)
        for k in ks:
            calls[(layout, k)] = call_runner(
                m, p, k, context=context, cache_len=cache_len, steps=steps
            )
            meta[(layout, k)] = ("T(k)", k)
        ar = AutoregressiveDecoder(m, make_warper(0.0), cache_len=cache_len)
        calls[(layout, "ar")] = iteration_runner(ar, (p,), prompt, steps=steps)
        meta[(layout, "ar")] = ("AR step", 1)
    timed = interleaved(calls, repeats=rounds)
    matvec = np.asarray(timed["matvec"].samples)  # [rounds] seconds
    floor = weight_bytes / (matvec_bytes / matvec)  # [rounds] seconds: F of each round
    rows = []
    for key, (call, k) in meta.items():
        layout = key[0]
        t = np.asarray(timed[key].samples) / steps  # [rounds]
        read = weight_bytes + kv_bytes_read(model.config, layout, context, k)
        ms = float(np.median(t) * 1e3)
        rows.append(
            {
                "layout": layout,
                "call": call,
                "k": k,
                "ms": ms,
                "over_floor": float(np.median(t / floor)),
                "over_floor_interval": ratio_interval(t, floor),
                "bytes_read": read,
                "gbs": read / np.median(t) / 1e9,
                "fraction_of_bandwidth": float(np.median(read / t / (matvec_bytes / matvec))),
            }
        )
    return {
        "bandwidth_gbs": float(np.median(matvec_bytes / matvec) / 1e9),
        "weight_bytes": weight_bytes,
        "floor_ms": float(np.median(floor) * 1e3),
        "rows": rows,
        "rounds": rounds,
        "context": context,
        "cache_len": cache_len,
    }


def compile_seconds(model, params, *, layouts=("xla", "packed"), cache_len: int = 1024) -> dict:
    """First-call time minus second-call time of an AR and a speculative program, per layout.

    JAX's persistent compilation cache is switched off for the measurement, so each figure is
    a cold compile (trace, lower, XLA) of the 30-layer program.
    """
    jax.config.update("jax_enable_compilation_cache", False)
    greedy = make_warper(0.0)
    prompt = [np.arange(40) % (model.vocab_size - 1) + 1]
    out = {}
    for layout in layouts:
        m, p = with_matmul(model, params, layout)
        decoders = {
            "AR": (AutoregressiveDecoder(m, greedy, cache_len=cache_len), (p,)),
            "speculative (lookup, γ=4)": (
                SpeculativeDecoder(m, LookupDrafter(m.vocab_size), 4, greedy, cache_len=cache_len),
                (p, {}),
            ),
        }
        for name, (decoder, dec_params) in decoders.items():
            times = []
            for _ in range(2):
                start = time.perf_counter()
                decoder.generate(
                    *dec_params, prompts=prompt, key=jax.random.PRNGKey(0), max_new_tokens=8
                )
                times.append(time.perf_counter() - start)
            out[(layout, name)] = times[0] - times[1]
    return out


def format_speed(table: dict, compile_times: dict | None = None) -> str:
    """The speed table as markdown."""
    lines = [
        f"bandwidth {table['bandwidth_gbs']:.1f} GB/s (jitted 8192x8192 matvec, median of "
        f"{table['rounds']} rounds); weights {table['weight_bytes'] / 1e6:.0f} MB; floor F = "
        f"{table['floor_ms']:.1f} ms; {table['context']} tokens cached of {table['cache_len']}",
        "",
        "| layout | call | ms | / F (95 % interval) | MB read | GB/s | of bandwidth |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table["rows"]:
        low, high = r["over_floor_interval"] or (float("nan"), float("nan"))
        name = r["call"] if r["call"] != "T(k)" else f"T({r['k']})"
        lines.append(
            f"| {r['layout']} | {name} | {r['ms']:.1f} | {r['over_floor']:.2f} "
            f"({low:.2f}-{high:.2f}) | {r['bytes_read'] / 1e6:.0f} | {r['gbs']:.1f} | "
            f"{100 * r['fraction_of_bandwidth']:.0f} % |"
        )
    for layout in sorted({r["layout"] for r in table["rows"]}):
        t = {
            r["k"]: r["ms"] for r in table["rows"] if r["layout"] == layout and r["call"] == "T(k)"
        }
        if 1 in t:
            ratios = ", ".join(f"{k}: {t[k] / t[1]:.2f}" for k in sorted(t))
            lines.append(f"\n{layout}: T(k)/T(1) {ratios}")
    if compile_times:
        lines += ["", "| layout | program | compile s |", "|---|---|---|"]
        for (layout, name), s in compile_times.items():
            lines.append(f"| {layout} | {name} | {s:.1f} |")
    return "\n".join(lines)


def loop_overhead(model, params, drafts: dict, *, gamma: int = 4, rounds: int = 20) -> list:
    """What a speculative iteration costs beyond its model calls, for every draft kind.

    `benchmark.overhead.overhead_breakdown` over `rounds` interleaved rounds: ovh = iteration
    − T(γ+1) − γ·T_draft, as a share of T(1) with its 95 % interval, and the autoregressive
    iteration over T(1).

    Returns:
      [{"draft", "ovh_ms", "ovh_share" (median), "ovh_share_mean", "ovh_share_interval" (of the
      mean), "t1_ms", "ar_ratio"}].
    """
    from specjax.benchmark.overhead import overhead_breakdown

    greedy = make_warper(0.0)
    prompt = [np.arange(129) % (model.vocab_size - 1) + 1]
    rows = []
    for name, (draft, draft_params, *tree) in drafts.items():
        if tree:  # token trees: not a chain's iteration
            continue
        decoder = SpeculativeDecoder(model, draft, gamma, greedy, cache_len=512)
        b = overhead_breakdown(
            decoder, (params, draft_params), prompt, context=128, steps=8, repeats=rounds,
            pieces=False,
        )  # fmt: skip
        rows.append(
            {
                "draft": name,
                "ovh_ms": b["ovh"] * 1e3,
                "ovh_share": b["ovh_share"],
                "ovh_share_mean": b["ovh_share_mean"],
                "ovh_share_interval": b["ovh_share_interval"],
                "t1_ms": b["t_target_1"] * 1e3,
                "ar_ratio": b["ar_ratio"],
            }
        )
    return rows


def format_overhead(rows: list, gamma: int) -> str:
    """The loop-overhead rows as markdown."""
    lines = [
        f"| draft (γ={gamma}) | ovh ms (median) | ovh / T(1): median | mean (95 %) | T(1) ms "
        "| AR iteration / T(1) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        low, high = r["ovh_share_interval"] or (float("nan"), float("nan"))
        lines.append(
            f"| {r['draft']} | {r['ovh_ms']:.2f} | {100 * r['ovh_share']:.1f} % "
            f"| {100 * r['ovh_share_mean']:.1f} % ({100 * low:.1f}-{100 * high:.1f} %) "
            f"| {r['t1_ms']:.1f} | {r['ar_ratio']:.3f} |"
        )
    return "\n".join(lines)
