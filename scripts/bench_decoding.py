"""Autoregressive vs speculative decoding on CPU: ms/token, speedup, and the loops' own overhead.

    python scripts/bench_decoding.py                          # trained tiny pair, if cached
    python scripts/bench_decoding.py --weights=random         # target d=512/8L, draft d=128/2L
    python scripts/bench_decoding.py --draft=self             # draft == target: alpha = 1
    python scripts/bench_decoding.py --draft=truncated:2      # the target's first 2 blocks
    python scripts/bench_decoding.py --draft=bigram
    python scripts/bench_decoding.py --compare_xla_flag       # with vs without the XLA:CPU flag
    python scripts/bench_decoding.py --accept=block --temperature=1   # block verification
    python scripts/bench_decoding.py --tree=3,2,1 --tree_rule=without   # + a token tree

A thin script over `specjax.benchmark`: the flags build a pair and prompts, the library measures.

Weights (--weights): "auto" (default) benchmarks the tiny pipeline's trained models, the tiny
target (d=128, 4 layers) and its distilled draft (d=64, 1 layer), on prompts from the Python
validation split, when they are in the model cache (the tiny pipeline puts them there); else random
weights of the --target_* / --draft_* sizes, with one line saying why and how to get the trained
pair (`experiments/common/pair.py`). Random weights agree by chance only (alpha ~0.1 with the
default sizes), so that run shows the loops' costs and no speedup. "trained" insists on the
pair, "random" always initialises.

Greedy, batch 1 by default, one run; the figures (`specjax.benchmark.breakdown`, whose docstring
says how each is measured): each decoder's ms/token in wall-clock and process CPU time, timed
round-robin against autoregressive decoding, with the speedup's 95 % interval; one speculative
iteration broken down in-loop (model calls, ovh, the pieces around the calls); each decoder's
`generate` against prefill + iterations x its parts; and the cache-sized copy ops in each
compiled loop (the XLA:CPU pitfall, see specjax/runtime.py). CPU time is the figure to trust
when other processes share the cores. This script calls specjax.configure_cpu(), which sets
--xla_cpu_copy_insertion_use_region_analysis=true unless SPECJAX_NO_XLA_FLAGS=1;
--compare_xla_flag runs it twice in subprocesses, with and without the flag.

With --tree (TokenTree.parse: "3,2,1" children per depth, or "-1,0,0,1" parents), a
TreeSpeculativeDecoder with the same draft runs beside the two; --tree_rule picks the sibling rule
at temperature > 0 (at 0 children are the draft's top-k, which both rules verify alike).

Draft choices (random weights have no knowledge, so alpha comes from the construction):
  transformer   the trained distilled draft, or an independent random model (--draft_* sizes):
                alpha near chance
  self          the target itself: alpha = 1
  truncated:K   the target's first K blocks + its final norm and head (shared weights; with
                the default random init the later blocks still flip the argmax: alpha ~0)
  bigram        a bigram table fitted on the target's own greedy output
"""

import json
import os
import subprocess
import sys
import tempfile
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import specjax  # noqa: E402

specjax.configure_cpu()  # before JAX starts; SPECJAX_NO_XLA_FLAGS=1 opts out

_FLAG = "--xla_cpu_copy_insertion_use_region_analysis"

_WEIGHTS = flags.DEFINE_enum(
    "weights",
    "auto",
    ["auto", "trained", "random"],
    "auto: the tiny pipeline's trained pair if cached, else random; trained: that pair "
    "or an error; random: the --target_* / --draft_* sizes, randomly initialised.",
)
_VOCAB = flags.DEFINE_integer("vocab", 259, "Vocabulary size (259: the byte tokenizer's).")
_TARGET_DIM = flags.DEFINE_integer("target_dim", 512, "Target width.")
_TARGET_LAYERS = flags.DEFINE_integer("target_layers", 8, "Target blocks.")
_TARGET_HEADS = flags.DEFINE_integer("target_heads", 8, "Target heads.")
_DRAFT = flags.DEFINE_string("draft", "transformer", "transformer, self, truncated:K or bigram.")
_DRAFT_DIM = flags.DEFINE_integer("draft_dim", 128, "Transformer draft width.")
_DRAFT_LAYERS = flags.DEFINE_integer("draft_layers", 2, "Transformer draft blocks.")
_DRAFT_HEADS = flags.DEFINE_integer("draft_heads", 4, "Transformer draft heads.")
_BATCH = flags.DEFINE_integer("batch", 1, "Rows (identical-length random prompts).")
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 16, "Prompt tokens per row.")
_NEW = flags.DEFINE_integer("max_new_tokens", 128, "Generated tokens per row.")
_GAMMA = flags.DEFINE_integer("gamma", 4, "Drafted tokens per iteration.")
_ACCEPT = flags.DEFINE_string(
    "accept", "tokenwise", "Acceptance rule by name (specjax.decoding.rules): tokenwise, block."
)
_CACHE_LEN = flags.DEFINE_integer(
    "cache_len", 512, "KV cache positions per row (at most the trained models' 256)."
)
_TEMPERATURE = flags.DEFINE_float("temperature", 0.0, "Sampling temperature (0: greedy).")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed rounds (medians reported).")
_STEPS = flags.DEFINE_integer("steps", 32, "Iterations (or calls) per timed device loop.")
_CLOCK = flags.DEFINE_enum(
    "clock",
    "cpu",
    ["cpu", "wall"],
    "Clock of the in-loop costs (iteration breakdown, prefill, loop overhead): process CPU time "
    "(steadier on shared cores) or wall time. The decoders' ms/token are reported in both.",
)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of weights, prompts and sampling.")
_COMPARE = flags.DEFINE_bool(
    "compare_xla_flag", False, "Run twice in subprocesses: with and without the XLA:CPU flag."
)
_TREE = flags.DEFINE_string(
    "tree", None, 'Also benchmark a token tree: "3,2,1" (children per depth) or a parents list.'
)
_TREE_RULE = flags.DEFINE_enum(
    "tree_rule", "without", ["without", "with"], "Tree siblings drawn without/with replacement."
)
_JSON_OUT = flags.DEFINE_string("json_out", None, "Also write every figure to this JSON file.")
_SUMMARY = flags.DEFINE_bool(
    "summary",
    False,
    "Also print issue 20's speed summary: the batch table (--batch_sizes) and the cache_len "
    "scaling ratio (--cache_lens).",
)
_BATCH_SIZES = flags.DEFINE_string(
    "batch_sizes", "1,4,16,64", "Batch sizes of the --summary batch table (empty: skip it)."
)
_CACHE_LENS = flags.DEFINE_string(
    "cache_lens",
    "256,4096",
    "Cache lengths of the --summary cache_len scaling ratio (empty: skip it).",
)


# -- the pair and the prompts --------------------------------------------------------------------


def _gpt2_fields(layers: int, heads: int, dim: int) -> dict:
    """GPT-2 style model fields: MLP 4x wide, positions up to --cache_len."""
    return dict(
        num_layers=layers, num_heads=heads, embed_dim=dim, mlp_dim=4 * dim, max_len=_CACHE_LEN.value
    )


def build_pair(jax, np):
    """Target, draft, their params and how they were made, from the flags.

    Returns:
      (target, target_params, draft, draft_params, info) where info holds "weights"
      ("trained" or "random"), "cache_len" (the flag, capped by a trained model's positions),
      "note" (one line, or None) and "target"/"draft" descriptions.
    """
    from experiments.common.pair import tiny_pair
    from specjax.checkpoint import load_model
    from specjax.decoding import AutoregressiveDecoder, make_warper
    from specjax.models import build

    vocab, cache_len = _VOCAB.value, _CACHE_LEN.value
    kind = _DRAFT.value
    if kind not in ("transformer", "self", "bigram") and not kind.startswith("truncated:"):
        raise ValueError(f"--draft must be transformer, self, truncated:K or bigram; got {kind!r}")
    dirs, note = tiny_pair(_WEIGHTS.value, option="--weights")
    info = {"weights": "random", "cache_len": cache_len, "note": note, "draft": kind}
    if dirs is not None:
        target, target_params, _ = load_model(dirs["target"])
        cache_len = min(cache_len, target.config.max_len)
        c = target.config
        info.update(weights="trained", cache_len=cache_len)
        info["target"] = f"trained mini_target gpt2 d={c.embed_dim} L={c.num_layers}"
        if kind == "transformer":
            draft, draft_params, _ = load_model(dirs["draft"])
            c = draft.config
            info["draft"] = f"trained mini_draft_distilled gpt2 d={c.embed_dim} L={c.num_layers}"
            return target, target_params, draft, draft_params, info
    else:
        target_fields = _gpt2_fields(_TARGET_LAYERS.value, _TARGET_HEADS.value, _TARGET_DIM.value)
        key = jax.random.PRNGKey(_SEED.value)
        target, target_params = build.init_model(target_fields, vocab, key)
        info["target"] = f"random gpt2 d={_TARGET_DIM.value} L={_TARGET_LAYERS.value}"
    tokens = None
    if kind == "bigram":
        # Fitted on the target's greedy continuation of a random prompt: some agreement.
        prompt = np.random.default_rng(_SEED.value + 7).integers(0, vocab, 16)
        ar = AutoregressiveDecoder(target, make_warper(0), cache_len=cache_len)
        tokens = ar.generate(target_params, [prompt], jax.random.PRNGKey(0), 256).new_tokens()[0]
    draft, draft_params = build.build_draft(
        kind,
        target,
        target_params,
        fields=_gpt2_fields(_DRAFT_LAYERS.value, _DRAFT_HEADS.value, _DRAFT_DIM.value),
        key=jax.random.PRNGKey(_SEED.value + 1),
        tokens=tokens,
    )
    return target, target_params, draft, draft_params, info


def bench_prompts(info: dict, np, count: int | None = None, ragged: bool = False) -> list:
    """--batch prompts of --prompt_len tokens (or `count` ragged ones of 16..48 tokens): from
    the Python validation split for trained models (text they know), random ids otherwise."""
    count = _BATCH.value if count is None else count
    lengths = [16 + (7 * i) % 33 if ragged else _PROMPT_LEN.value for i in range(count)]
    seed = _SEED.value + (3 if ragged else 0)
    if info["weights"] == "trained":
        from specjax.data import load_corpus
        from specjax.data.batches import sample_prompts

        val = np.asarray(load_corpus("python", "validation"))
        full = sample_prompts(val, count, max(lengths), seed).tokens
        return [np.asarray(p)[:n] for p, n in zip(full, lengths, strict=True)]
    rng = np.random.default_rng(seed)
    return [rng.integers(0, _VOCAB.value, n) for n in lengths]


# -- the measurements ------------------------------------------------------------------------


def measure(pair) -> dict:
    """Runs every measurement (`specjax.benchmark.breakdown`); returns the figures as a dict."""
    import jax
    import numpy as np

    from specjax.benchmark.breakdown import call_breakdown
    from specjax.decoding import (
        AutoregressiveDecoder,
        SpeculativeDecoder,
        TokenTree,
        TreeSpeculativeDecoder,
        make_warper,
    )
    from specjax.decoding.rules import accept_rule

    gamma = _GAMMA.value
    target, tp, draft, dp, info = pair
    cache_len = info["cache_len"]
    warper = make_warper(_TEMPERATURE.value)
    accept = accept_rule(_ACCEPT.value)
    decoders = {
        "ar": (AutoregressiveDecoder(target, warper, cache_len=cache_len), (tp,)),
        "spec": (
            SpeculativeDecoder(target, draft, gamma, warper, cache_len=cache_len, accept=accept),
            (tp, dp),
        ),
    }
    if _TREE.value:
        tree = TokenTree.parse(_TREE.value)
        with_replacement = _TREE_RULE.value == "with"
        tree_decoder = TreeSpeculativeDecoder(
            target, draft, tree, warper, replacement=with_replacement, cache_len=cache_len
        )
        decoders["tree"] = (tree_decoder, (tp, dp))
    shapes = {}
    for name, model in (("target", target), ("draft", draft)):
        if hasattr(model, "config"):
            c = model.config
            shapes[name] = (_BATCH.value, cache_len, c.num_kv_heads, c.head_dim)
    figures = call_breakdown(
        decoders,
        bench_prompts(info, np),
        jax.random.PRNGKey(_SEED.value),
        _NEW.value,
        repeats=_REPEATS.value,
        steps=_STEPS.value,
        clock=time.process_time if _CLOCK.value == "cpu" else time.perf_counter,
        cache_shapes=shapes,
    )
    figures["xla_flag_on"] = _FLAG in os.environ.get("XLA_FLAGS", "")
    names = ("batch", "prompt_len", "max_new_tokens", "gamma", "accept", "temperature", "repeats")
    figures["config"] = {
        **{k: info[k] for k in ("target", "draft", "weights", "note", "cache_len")},
        **{k: flags.FLAGS[k].value for k in (*names, "steps", "clock")},
        "vocab": target.vocab_size,
        "tree": _TREE.value and f"{_TREE.value} (siblings {_TREE_RULE.value} replacement)",
    }
    return figures


def speed_summary(pair, figures: dict) -> dict:
    """Issue 20's batch table and cache_len scaling ratio, in one run (`benchmark.batch`,
    `benchmark.attention`); the overhead ratio is `measure`'s breakdown."""
    import numpy as np

    from specjax.benchmark.attention import cache_len_scaling
    from specjax.benchmark.batch import batch_table, break_even, format_batch_rows
    from specjax.decoding import make_warper

    target, tp, draft, dp, info = pair
    cache_len, gamma = info["cache_len"], _GAMMA.value
    warper = make_warper(_TEMPERATURE.value)
    clock = time.process_time if _CLOCK.value == "cpu" else time.perf_counter
    out = {}
    b = figures["breakdown"]
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    print(
        f"\n== speed summary ({_CLOCK.value} clock; load average {load})"
        f"\noverhead ratio: ovh = I_spec - T_target({gamma + 1}) - {gamma} T_draft = "
        f"{b['ovh'] * 1e3:.3f} ms = {b['ovh_share']:.1%} of T_target(1) = "
        f"{b['t_target_1'] * 1e3:.3f} ms (goal <= 10 %); AR iteration / bare step = "
        f"{b['ar_ratio']:.3f} (goal <= 1.05); T_target(1) CV over rounds {b['cv']:.0%}",
        flush=True,
    )
    sizes = [int(x) for x in _BATCH_SIZES.value.split(",") if x.strip()]
    if sizes:
        print(f"batch table (gamma {gamma}, temperature {_TEMPERATURE.value:g}):", flush=True)
        rows = batch_table(
            target,
            tp,
            draft,
            dp,
            bench_prompts(info, np, max(sizes), ragged=True),
            warper,
            gamma,
            batches=sizes,
            max_new_tokens=_NEW.value,
            cache_len=cache_len,
            repeats=_REPEATS.value,
            clock=clock,
            log=None,
        )
        print(format_batch_rows(rows, gamma), flush=True)
        where = break_even(rows)
        print(
            "speculation paid at every batch size measured"
            if where is None
            else f"speculation stops paying at batch {where}",
            flush=True,
        )
        out["batch_table"] = [r.as_dict() for r in rows]
    lens = [int(x) for x in _CACHE_LENS.value.split(",") if x.strip()]
    if lens:
        # The target's shape; its own weights only if its position table covers the largest
        # buffer (a learned table caps cache_len), else random weights of that shape.
        cfg = target.config
        fits = cfg.positions != "learned" or cfg.max_len >= max(lens)
        if not fits:
            cfg = cfg.replace(max_len=max(lens))
        scaled = cache_len_scaling(cfg, cache_lens=lens, params=tp if fits else None)
        ratio = scaled["cpu"]["ratio"]
        print(
            f"cache_len scaling ratio (ms/token at {max(lens)} / at {min(lens)}, CPU time"
            f"{'' if fits else ', random weights of the target shape'}): "
            + ", ".join(f"{impl} {r:.2f}x" for impl, r in ratio.items()),
            flush=True,
        )
        out["cache_len_scaling"] = scaled
    return out


# -- the report --------------------------------------------------------------------------------


def report(figures: dict) -> str:
    """Terminal text for one run's figures."""
    from experiments.common.pair import why_no_speedup
    from specjax.benchmark.breakdown import format_breakdown

    c, spec = figures["config"], figures["decoders"]["spec"]
    tree = f", tree {c['tree']}" if c["tree"] else ""
    lines = [
        f"target {c['target']}, draft {c['draft']}, vocab {c['vocab']}, batch {c['batch']}, "
        f"prompt {c['prompt_len']}, {c['max_new_tokens']} new tokens, gamma {c['gamma']}"
        f"{tree}, accept {c['accept']}, temperature {c['temperature']}, cache {c['cache_len']}, "
        f"medians of {c['repeats']} rounds; XLA region-analysis flag "
        f"{'ON' if figures['xla_flag_on'] else 'OFF'}",
        format_breakdown(figures, c["gamma"], c["clock"]),
    ]
    why = why_no_speedup(
        spec["speedup_cpu"],
        spec["alpha_empirical"],
        random_weights=c.get("weights") == "random",
        self_draft="--draft=self" if c["draft"] == "self" else None,
    )
    if why:
        lines.append(why)
    return "\n".join(lines)


def compare_flag(argv) -> None:
    """Runs this script with and without the XLA flag in fresh processes; prints both."""
    results = {}
    args = [a for a in argv[1:] if not a.startswith("--compare_xla_flag")]
    for label in ("on", "off"):
        env = dict(os.environ)
        xla = env.get("XLA_FLAGS", "")
        xla = " ".join(t for t in xla.split() if not t.startswith(_FLAG))
        env["XLA_FLAGS"] = xla
        if label == "off":
            env["SPECJAX_NO_XLA_FLAGS"] = "1"
        else:
            env.pop("SPECJAX_NO_XLA_FLAGS", None)
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
            path = tmp.name
        cmd = [sys.executable, os.path.abspath(__file__), *args, f"--json_out={path}"]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode:
            sys.exit(f"child run ({label}) failed:\n{proc.stderr[-3000:]}")
        print(proc.stdout, flush=True)
        with open(path, encoding="utf-8") as f:
            results[label] = json.load(f)
        os.unlink(path)
    on, off = results["on"], results["off"]
    print("flag ON vs OFF (separate processes: drift between them is not cancelled)")
    for name in on["decoders"]:
        for key in ("wall_ms_per_token", "cpu_ms_per_token", "iteration_ms"):
            a, b = on["decoders"][name][key], off["decoders"][name][key]
            print(f"  {name:5s} {key:18s} ON {a:9.3f}   OFF {b:9.3f}   OFF/ON {b / a:.3f}")
    for key in ("t_target_1", "t_verify", "t_draft"):
        a, b = on["breakdown"][key] * 1e3, off["breakdown"][key] * 1e3
        print(f"  in-loop {key:12s} ON {a:9.3f}   OFF {b:9.3f}   OFF/ON {b / max(a, 1e-12):.3f}")
    print(f"  HLO cache copies ON {on['hlo_cache_copies']}")
    print(f"  HLO cache copies OFF {off['hlo_cache_copies']}")


def main(argv):
    if _COMPARE.value:
        compare_flag(sys.argv)
        return
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    import jax
    import numpy as np

    pair = build_pair(jax, np)
    if pair[-1]["note"]:
        print(pair[-1]["note"], flush=True)
    figures = measure(pair)
    print(report(figures), flush=True)
    if _SUMMARY.value:
        figures["summary"] = speed_summary(pair, figures)
    if _JSON_OUT.value:
        with open(_JSON_OUT.value, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    app.run(main)
