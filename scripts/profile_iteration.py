"""Profile one speculative iteration: model calls, `ovh`, and the pieces around the calls.

    PYTHONPATH=. python scripts/profile_iteration.py                       # mini pair, γ = 4
    PYTHONPATH=. python scripts/profile_iteration.py --target=zoo_random   # 10.8M random target
    PYTHONPATH=. python scripts/profile_iteration.py --target=zoo_random --all_drafts
    PYTHONPATH=. python scripts/profile_iteration.py --target=zoo_random_32k  # vocab 32000

For a bigram draft and the distilled transformer draft (--all_drafts: also uniform and prompt
lookup; at vocab 32000 a unigram and a random draft) at t = 0 and t = 1, prints the
iteration cost I, T_target(1), T_target(γ+1), T_draft, `ovh` = I − T(γ+1) − γ·T_draft (ms and
as a share of T_target(1)) and each piece of the iteration timed alone in a device loop
(`specjax.benchmark.overhead`). Writes a markdown table with --markdown.
"""

import json
import os
import subprocess
import sys

from absl import app, flags

# The specjax to profile: this checkout's, or the one --compare_tree hands a child.
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.environ.get("PROFILE_SPECJAX_TREE", _HERE))

import specjax  # noqa: E402

specjax.configure_cpu()

MODELS = os.path.expanduser("~/.cache/specjax/models")
_TARGET = flags.DEFINE_enum(
    "target",
    "mini",
    ["mini", "zoo_random", "zoo_random_32k"],
    "Target model: the trained mini target, or random weights of the zoo's shape at vocab 259 or "
    "32000 (a 32k vocabulary as Llama-2's; its drafts are then a unigram table and a random draft "
    "of the mini draft's shape: cost only, their alpha means nothing).",
)
_ALL_DRAFTS = flags.DEFINE_bool(
    "all_drafts", False, "Also the uniform and prompt-lookup drafts (every draft kind)."
)
_GAMMA = flags.DEFINE_integer("gamma", 4, "Drafted tokens per iteration.")
_BATCH = flags.DEFINE_integer("batch", 1, "Rows.")
_REPEATS = flags.DEFINE_integer("repeats", 7, "Timed loops per figure (medians).")
_CACHE_LEN = flags.DEFINE_integer("cache_len", 256, "Cache positions.")
_CLOCK = flags.DEFINE_enum(
    "clock", "wall", ["wall", "cpu"], "wall: time.perf_counter; cpu: process CPU time."
)
_JSON_OUT = flags.DEFINE_string("json_out", None, "Also write every figure to this JSON file.")
_COMPARE = flags.DEFINE_string(
    "compare_tree", None, "Also profile the specjax of this checkout (before vs after), alternated."
)
_MARKDOWN = flags.DEFINE_string("markdown", None, "Also append the tables to this file.")


def load_pair():
    """(target, target_params, {draft name: (model, params)}, description)."""
    import jax
    import numpy as np

    from specjax.checkpoint import load_model
    from specjax.data import load_corpus
    from specjax.data.tokenizer import ByteTokenizer
    from specjax.models import build
    from specjax.models.ngram import NgramLM, UniformLM, fit_ngram
    from specjax.models.prompt_lookup import PromptLookupLM

    draft, dparams, _ = load_model(f"{MODELS}/mini_draft-distill_tv_ft-python-0f7fdba813a9")
    train = np.asarray(load_corpus("python", "train", ByteTokenizer()))[:2_000_000]
    zoo_fields = dict(num_layers=6, num_heads=6, embed_dim=384, mlp_dim=1536, max_len=256)
    if _TARGET.value == "zoo_random_32k":
        import dataclasses

        from specjax.models.transformer import TransformerLM

        vocab = 32000
        target, tparams = build.init_model(zoo_fields, vocab, jax.random.PRNGKey(0))
        draft = TransformerLM(dataclasses.replace(draft.config, vocab_size=vocab))
        dparams = build.init_params(draft, jax.random.PRNGKey(1))
        unigram = NgramLM(vocab, 1), fit_ngram(train, vocab, 1)
        what = "zoo-shaped target at vocab 32000 (random weights)"
        return target, tparams, {"unigram": unigram, "random draft": (draft, dparams)}, what
    if _TARGET.value == "mini":
        target, tparams, _ = load_model(f"{MODELS}/mini_target-python-b1c5c50bde14")
        what = "mini target (0.86M, trained)"
    else:
        target, tparams = build.init_model(zoo_fields, 259, jax.random.PRNGKey(0))
        what = "zoo-shaped target (d=384, 6 layers, random weights)"
    drafts = {
        "bigram": (NgramLM(259, 2), fit_ngram(train, 259, 2)),
        "mini_draft distilled": (draft, dparams),
    }
    if _ALL_DRAFTS.value:  # every draft kind: n-gram, transformer, uniform, prompt lookup
        drafts.update({"uniform": (UniformLM(259), {}), "prompt lookup": (PromptLookupLM(259), {})})
    return target, tparams, drafts, what


def prompts_from_validation(batch: int):
    import numpy as np

    from specjax.data import load_corpus
    from specjax.data.batches import sample_prompts

    val = np.asarray(load_corpus("python", "validation"))
    return [np.asarray(p) for p in sample_prompts(val, batch, 64, seed=0).tokens]


def _load_here(name, folder=("specjax", "benchmark")):
    """This checkout's module `folder/name.py`, also when another tree's specjax is imported
    (--compare_tree runs the child that measures the other tree's decoders that way)."""
    import importlib.util

    path = os.path.join(_HERE, *folder, f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_{name}_here", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _overhead_breakdown():
    """This checkout's `overhead_breakdown`, also when another tree's specjax is imported."""
    # This checkout's timing harness (its runners donate their state: no copy of every cache
    # per timed run) and timers (the clock option), whichever specjax runs the decoders, so
    # both trees are measured the same way. They bind this checkout's argument checks too (an
    # older tree's specjax.checks may lack them).
    import importlib

    for name in ("specjax.decoding", "specjax.decoding.prefill", "specjax.models.interface"):
        importlib.import_module(name)  # first, so the running tree's modules bind its own checks
    swapped = {"specjax.checks": _load_here("checks", ("specjax",))}
    saved = {name: sys.modules.get(name) for name in ("specjax.checks", "specjax.benchmark.costs")}
    sys.modules.update(swapped)  # what the modules' `from ... import` binds
    try:
        costs, timing = _load_here("costs"), _load_here("timing")
        sys.modules["specjax.benchmark.costs"] = costs
        module = _load_here("overhead")
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
    module.interleaved, module.time_call = timing.interleaved, timing.time_call
    return module.overhead_breakdown


def compare_trees(argv, other: str, rounds: int = 2) -> None:
    """Runs this script on `other`'s specjax and on this tree's, alternately, `rounds` times
    each (same load window); prints ovh and I of each case, medians over the runs."""
    import numpy as np

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = [a for a in argv[1:] if not a.startswith(("--compare_tree", "--json_out"))]
    runs = {"before": [], "after": []}
    for i in range(rounds):
        for label, tree in (("before", other), ("after", here)):
            path = f"/tmp/profile_iteration_{os.getpid()}_{label}_{i}.json"
            env = dict(os.environ, PYTHONPATH=tree, PROFILE_SPECJAX_TREE=tree)
            cmd = [sys.executable, os.path.abspath(__file__), *args, f"--json_out={path}"]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode:
                sys.exit(f"child run ({label}) failed:\n{proc.stderr[-3000:]}")
            with open(path, encoding="utf-8") as f:
                runs[label].append(json.load(f))
            os.unlink(path)
            print(f"{label} {i}: {runs[label][-1]['header']}", flush=True)
    print(f"\nbefore = specjax from {other}, after = {here}; {rounds} runs each, alternated")
    print(
        "| case | I before ms | I after ms | ovh before ms (share of T(1)) | ovh after ms "
        "| AR iteration / T(1) before | after |"
    )
    print("|---|---|---|---|---|---|---|")
    for case in runs["after"][0]:
        if case == "header":
            continue

        def med(label, field, case=case):
            return float(np.median([r[case][field] for r in runs[label]]))

        print(
            f"| {case} | {med('before', 'iteration') * 1e3:.3f} | "
            f"{med('after', 'iteration') * 1e3:.3f} | {med('before', 'ovh') * 1e3:.3f} "
            f"({med('before', 'ovh_share'):.0%}) | {med('after', 'ovh') * 1e3:.3f} "
            f"({med('after', 'ovh_share'):.0%}) | {med('before', 'ar_ratio'):.3f} | "
            f"{med('after', 'ar_ratio'):.3f} |"
        )


def main(argv):
    prepare_output = _load_here("script_checks").prepare_output  # this checkout's, see above
    for flag, path in (("--json_out", _JSON_OUT.value), ("--markdown", _MARKDOWN.value)):
        if path:
            prepare_output(path, flag)  # before the measuring, not after it
    if _COMPARE.value:
        compare_trees(sys.argv, _COMPARE.value)
        return
    del argv
    overhead_breakdown = _overhead_breakdown()
    from specjax.decoding import SpeculativeDecoder, make_warper

    target, tparams, drafts, what = load_pair()
    prompts = prompts_from_validation(_BATCH.value)
    load = open("/proc/loadavg").read().split()[:3]
    lines = [
        f"{what}, γ = {_GAMMA.value}, batch {_BATCH.value}, cache {_CACHE_LEN.value}, "
        f"{_CLOCK.value} clock, load average {' '.join(load)}, git {_git_head()}",
        "",
    ]
    results = {"header": lines[0]}
    for temperature in (0.0, 1.0):
        for name, (draft, dparams) in drafts.items():
            decoder = SpeculativeDecoder(
                target, draft, _GAMMA.value, make_warper(temperature), cache_len=_CACHE_LEN.value
            )
            b = overhead_breakdown(
                decoder, (tparams, dparams), prompts, repeats=_REPEATS.value, clock=clock()
            )
            t1 = b["t_target_1"]
            lines += [
                f"#### t = {temperature:g}, draft {name}",
                "",
                "| piece | ms | share of T_target(1) |",
                "|---|---|---|",
                f"| whole iteration I | {b['iteration'] * 1e3:.3f} | {b['iteration'] / t1:.0%} |",
                f"| T_target(1) | {t1 * 1e3:.3f} | 100% |",
                f"| T_target(γ+1) | {b['t_verify'] * 1e3:.3f} | {b['t_verify'] / t1:.0%} |",
                f"| γ·T_draft | {_GAMMA.value * b['t_draft'] * 1e3:.3f} | "
                f"{_GAMMA.value * b['t_draft'] / t1:.0%} |",
                f"| **ovh** = I − calls (median of rounds) | **{b['ovh'] * 1e3:.3f}** | "
                f"**{b['ovh_share']:.0%}** |",
                *(
                    f"| · {piece} (alone) | {sec * 1e3:.3f} | {sec / t1:.0%} |"
                    for piece, sec in b["pieces"].items()
                ),
                "",
                f"T_target(1) CV over rounds {b['cv']:.0%}; autoregressive iteration "
                f"{b['ar_iteration'] * 1e3:.3f} ms = {b['ar_ratio']:.3f} × T_target(1)",
                "",
            ]
            results[f"t{temperature:g}/{name}"] = b
            print("\n".join(lines[-len(b["pieces"]) - 13 :]), flush=True)
    if _MARKDOWN.value:
        with open(_MARKDOWN.value, "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    if _JSON_OUT.value:
        with open(_JSON_OUT.value, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    print(lines[0])


def clock():
    """The --clock flag's timer."""
    import time

    return time.process_time if _CLOCK.value == "cpu" else time.perf_counter


def _git_head() -> str:
    tree = os.path.dirname(os.path.dirname(os.path.abspath(specjax.__file__)))  # the one in use
    out = subprocess.run(
        ["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return out.stdout.strip() or "?"


if __name__ == "__main__":
    app.run(main)
