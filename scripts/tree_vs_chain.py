"""sequoia2024's walltime question, trimmed to fit a short accelerator lease: AR, chains and
Sequoia DP trees on the real target, batch 1, timed round-robin.

    python scripts/tree_vs_chain.py --head=runs/distilled2-smollm2.head.npz \
        --acceptance=0.206,0.074,0.047,0.034,0.028,0.022,0.019,0.015 --out=runs/tree-vs-chain

The full pipeline (`configs/sequoia2024.py:smollm2`) measures the acceptance vector P, tokens
per call for every method and size, and the hardware-aware pick before it times anything; on
a GPU each decoder compiles in 15-30 s, so it does not fit a 10-minute call. This script takes
P as measured by that pipeline (`--acceptance`: "without" replacement, ranks 1..8, at the
temperature given), builds Sequoia's DP tree for each `--trees` size (`n` unbounded depth,
`nd1` depth 1), and decodes the sequoia2024 prompts (the 15 chat prompts cut to one length,
`experiments/sequoia2024/real.py`) with AR, each chain of `--gammas` and each tree. Decoders
compile in `--plan` order until `--compile_budget` seconds have passed since the start (later
ones are skipped and said so), then all are timed round-robin (`timing.interleaved`).

Prints, per decoder: tokens per target call, ms per token, the speedup over AR and, for trees,
over the fastest chain, each with a 95 % interval over the paired rounds; `--out` writes the
same as JSON. Results: experiments/sequoia2024/README.md.
"""

import json
import os
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import specjax  # noqa: E402

specjax.configure_cpu()  # before JAX starts; SPECJAX_NO_XLA_FLAGS=1 opts out

FLAGS = flags.FLAGS
flags.DEFINE_string("model", "smollm2-135m-instruct", "target: a registered name or a .gguf path")
flags.DEFINE_string("head", "distilled2", "the distilled draft: a name, run directory or file")
flags.DEFINE_list("acceptance", None, "P by rank, without replacement (measured)")
flags.DEFINE_float("temperature", 1.0, "sampling temperature (P must be measured at it)")
flags.DEFINE_list("plan", ["ar", "chain1", "16", "chain2", "16d1", "32", "chain3"], "decoders")
flags.DEFINE_float("compile_budget", 1e9, "seconds after which no further decoder compiles")
flags.DEFINE_integer("rounds", 5, "timed round-robin rounds")
flags.DEFINE_string("out", "", "directory for tree_vs_chain.json")
flags.DEFINE_string(
    "prompts_file", "", "your prompts, JSON Lines (experiments/common/real_prompts.py); '': ours"
)
flags.mark_flag_as_required("acceptance")


def _decoder(config, target, draft, warper, name, acceptance):
    """(decoder, tree or None) of a plan entry: "ar", "chain<γ>", "<n>" or "<n>d1"."""
    from experiments.sequoia2024 import methods
    from specjax.decoding import AutoregressiveDecoder, optimal_tree

    if name == "ar":
        return AutoregressiveDecoder(target, warper, cache_len=config.cache_len), None
    if name.startswith("chain"):
        tree = methods.chain(int(name[5:]) + 1)
    else:
        size, _, depth = name.partition("d")
        tree = optimal_tree(acceptance, int(size), int(depth) if depth else None)
    return methods.method_decoder(config, target, draft, warper, "sequoia", tree), tree


def main(argv):
    del argv
    import jax
    import numpy as np

    from configs import sequoia2024 as seq_config
    from experiments.sequoia2024 import real
    from specjax.benchmark.script_checks import prepare_output
    from specjax.benchmark.timing import interleaved, ratio_interval
    from specjax.decoding import loop, make_warper, summarize_stats
    from specjax.pretrained import check_path

    start = time.perf_counter()
    if FLAGS.out:
        prepare_output(FLAGS.out, "--out", folder=True)  # before the timing, not after it
    check_path(FLAGS.model, "--model")  # names the flag and the registered models
    specjax.configure_accelerator()  # float32 products on GPU/TPU
    acceptance = [float(x) for x in FLAGS.acceptance]
    config = seq_config.get_config("smollm2")
    config.pretrained, config.draft_head = FLAGS.model, FLAGS.head
    config.prompts_file = FLAGS.prompts_file
    target, tparams, draft, dparams, stat, wall, _, draft_name = real.load(config)
    prompts = list(wall) + list(stat)
    warper = make_warper(FLAGS.temperature)
    key = jax.random.PRNGKey(0)
    new = config.max_new_tokens
    decoders = {}
    for name in FLAGS.plan:
        if time.perf_counter() - start > FLAGS.compile_budget:
            print(f"{name}: skipped (past --compile_budget)", flush=True)
            continue
        dec, tree = _decoder(config, target, draft, warper, name, acceptance)
        params = (tparams,) if tree is None else (tparams, dparams)
        t0 = time.perf_counter()
        jax.block_until_ready(loop.generate(dec, params, [prompts[0]], key, new).tokens)
        shape = "" if tree is None else f" ({tree.num_nodes} nodes, depth {tree.max_depth})"
        print(f"{name}: compiled in {time.perf_counter() - t0:.1f} s{shape}", flush=True)
        decoders[name] = (dec, params, tree)
    calls = {
        n: (lambda d=d, p=p: [loop.generate(d, p, [x], key, new) for x in prompts])
        for n, (d, p, _) in decoders.items()
    }
    timed = interleaved(calls, repeats=FLAGS.rounds)
    rows = {}
    for name, t in timed.items():
        s = summarize_stats([r.stats for r in t.output])
        tree = decoders[name][2]
        ms = [x * 1e3 / s["tokens_emitted"] for x in t.samples]
        rows[name] = dict(
            nodes=1 if tree is None else tree.num_nodes,
            depth=0 if tree is None else tree.max_depth,
            parents=None if tree is None else list(tree.parents),
            tokens_per_call=s["tokens_emitted"] / s["target_calls"],
            ms_per_token=float(np.median(ms)),
            ms_samples=ms,
        )
    ar = rows["ar"]["ms_samples"]
    chains = [n for n in rows if n.startswith("chain")]
    best = min(chains, key=lambda n: rows[n]["ms_per_token"]) if chains else None
    for name, r in rows.items():
        r["speedup"] = rows["ar"]["ms_per_token"] / r["ms_per_token"]
        r["speedup_ci"] = ratio_interval(ar, r["ms_samples"])
        if best and name != "ar" and not name.startswith("chain"):
            r["vs_best_chain"] = rows[best]["ms_per_token"] / r["ms_per_token"]
            r["vs_best_chain_ci"] = ratio_interval(rows[best]["ms_samples"], r["ms_samples"])
    print(f"device {jax.devices()[0].device_kind}; draft {draft_name}; t = {FLAGS.temperature:g}")
    print("| decoder | nodes | depth | tokens/call | ms/token | vs AR (95 %) | vs best chain |")
    print("|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        low, high = r["speedup_ci"] or (float("nan"),) * 2
        vs = ""
        if "vs_best_chain" in r:
            b_low, b_high = r["vs_best_chain_ci"] or (float("nan"),) * 2
            vs = f"{r['vs_best_chain']:.3f} ({b_low:.3f}–{b_high:.3f}) vs {best}"
        print(
            f"| {name} | {r['nodes']} | {r['depth']} | {r['tokens_per_call']:.3f} | "
            f"{r['ms_per_token']:.3f} | {r['speedup']:.3f} ({low:.3f}–{high:.3f}) | {vs} |"
        )
    if FLAGS.out:
        os.makedirs(FLAGS.out, exist_ok=True)
        result = dict(
            device=jax.devices()[0].device_kind,
            draft=draft_name,
            temperature=FLAGS.temperature,
            acceptance=acceptance,
            prompts=len(prompts),
            prompt_len=config.prompt_len,
            max_new_tokens=new,
            best_chain=best,
            rows=rows,
            seconds=time.perf_counter() - start,
        )
        with open(os.path.join(FLAGS.out, "tree_vs_chain.json"), "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    print(f"done in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    app.run(main)
