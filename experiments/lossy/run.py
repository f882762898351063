r"""Speedup vs shift from p of the lossy acceptance knobs, beside the lossless rules (issue #18 §3).

    PYTHONPATH=. python -m experiments.lossy.run --workdir=runs/lossy
    # quicker: --timing_prompts=2 --max_new_tokens=64 --repeats=3 --stat_prompts=32

Uses only cached weights (~/.cache/specjax/models, or $SPECJAX_CACHE/models; never trains): the
leviathan2023:tiny mini pair on the Python corpus (target `mini_target-python-*`, distilled
draft `mini_draft-distill_tv_ft-python-*`) at temperature `--temperature` and γ = `--gamma`.
Settings: tokenwise, block (lossless), lenient:{0.9, 0.7, 0.5, 0.3}, typical:0.09,0.3 (LOSSY).

Per setting:
  * tokens per target call, from one batched run over `--stat_prompts` validation prompts
    (`specjax.benchmark.rule_compare`), and walltime speedup over autoregressive decoding,
    AR and every rule timed round-robin at batch 1 in the same run (medians);
  * TV from p of the first emitted token on the real pair, in closed form in (p₁, q₁)
    (`lossy.lenient_first_token_law`, `typical_first_token_law`), averaged over `--prefixes`
    fixed validation prefixes (no sampling: a plug-in TV from samples is biased upward by about
    the size of the shifts measured); 0 for the lossless rules;
  * TV from p by exact enumeration on the kit's tiny prefix-dependent pairs (vocab 4, γ = 2:
    `specjax.testing.law.stream_law`; the first token and the joint of the first 3 chained
    tokens, mean over the "prefix" and "peaked" cases); the lossless rules are exact there
    (lenient:1 = tokenwise is enumerated; block by tests/test_block_accept_exact.py).

Writes <workdir>/results.json, results.md (the table), speedup_vs_tv.png and
tokens_per_call_vs_tv.png (`--from_json=results.json` redraws them without measuring). Measured
numbers: experiments/lossy/RESULTS.md.
"""

from __future__ import annotations

import functools
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from experiments.common.models import model_path
from specjax.benchmark.rule_compare import compare_rules
from specjax.checkpoint import load_model
from specjax.data import load_corpus
from specjax.data.batches import sample_prompts
from specjax.data.tokenizer import ByteTokenizer
from specjax.decoding import make_warper
from specjax.decoding.rules import accept_rule, lossy
from specjax.plotting import Series, save_line_plot
from specjax.testing import law

SETTINGS = (
    "tokenwise",
    "block",
    "lenient:0.9",
    "lenient:0.7",
    "lenient:0.5",
    "lenient:0.3",
    "typical:0.09,0.3",
)

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The script's flags, defined only when it runs as a script (importing this module from
    another absl program, e.g. experiments.main in the same test process, must not clash)."""
    flags.DEFINE_string("workdir", "runs/lossy", "output directory")
    flags.DEFINE_string("corpus", "python", "corpus of the cached mini pair")
    flags.DEFINE_integer("gamma", 4, "drafted tokens per call")
    flags.DEFINE_float("temperature", 1.0, "sampling temperature of both models")
    flags.DEFINE_integer("prefixes", 512, "validation prefixes for the first-token TV")
    flags.DEFINE_integer("prompt_len", 32, "prompt / prefix length (bytes)")
    flags.DEFINE_integer("timing_prompts", 3, "prompts timed at batch 1")
    flags.DEFINE_integer("stat_prompts", 64, "rows of the batched tokens-per-call run")
    flags.DEFINE_integer("max_new_tokens", 128, "tokens per row")
    flags.DEFINE_integer("repeats", 3, "timed rounds")
    flags.DEFINE_integer("seed", 0, "seed")
    flags.DEFINE_string("from_json", "", "write the table and plots from this results.json only")


def first_token_laws(model, params, prefixes, warper) -> np.ndarray:
    """float64 [N, vocab]: the warped next-token law after each prefix (one forward pass)."""
    rows, width = prefixes.shape
    state = model.init_state(rows, width + 1)
    logits, _ = model.apply(params, state, jnp.asarray(prefixes), jnp.full((rows,), width))
    return np.asarray(warper.probs(logits[:, -1]), np.float64)


def first_token_tv(p1: np.ndarray, q1: np.ndarray, spec: str) -> float:
    """Mean over rows of TV(first emitted token's law, p₁), in closed form."""
    name, _, args = spec.partition(":")
    values = [float(a) for a in args.replace("/", ",").split(",") if a]
    if name in ("tokenwise", "block"):
        return 0.0  # lossless: the emitted law is p
    if name == "lenient":
        emitted = lossy.lenient_first_token_law(p1, q1, values[0])
    else:
        emitted = lossy.typical_first_token_law(p1, q1, *values)
    return float(np.mean(lossy.total_variation(emitted, p1)))


def tiny_pair_tv(spec: str, vocab: int = 4, gamma: int = 2) -> tuple[float, float]:
    """(TV of the first token, TV of the joint of the first 3 tokens) on the kit's tiny pairs,
    exact (enumeration), mean over the "prefix" and "peaked" cases."""
    name, _, args = spec.partition(":")
    values = [float(a) for a in args.replace("/", ",").split(",") if a]
    if name == "block":
        return 0.0, 0.0  # lossless (exact law: tests/test_block_accept_exact.py)
    if name == "tokenwise":
        rule = functools.partial(lossy.lenient_call_law, lenience=1.0)
    elif name == "lenient":
        rule = functools.partial(lossy.lenient_call_law, lenience=values[0])
    else:
        rule = functools.partial(lossy.typical_call_law, epsilon=values[0], delta=values[1])
    first, joint = [], []
    for kind in ("prefix", "peaked"):
        case = law.make_case(kind, gamma, vocab=vocab)
        target, stream = law.target_law(case), law.stream_law(case, rule)
        first.append(lossy.total_variation(law.marginal(stream, 0), law.marginal(target, 0)))
        joint.append(lossy.total_variation(stream.ravel(), target.ravel()))
    return float(np.mean(first)), float(np.mean(joint))


def format_table(rows: list[dict], meta: dict) -> str:
    lines = [
        f"γ = {meta['gamma']}, t = {meta['temperature']:g}, {meta['target']} / {meta['draft']}",
        "",
        "| rule | lossless | tokens/call | speedup (95% CI) | TV first token, mini pair "
        "| TV first token, tiny | TV 3 tokens, tiny |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ci = (
            "" if r["speedup_low"] is None else f" ({r['speedup_low']:.2f}-{r['speedup_high']:.2f})"
        )
        lines.append(
            f"| {r['rule']} | {'yes' if r['lossless'] else 'NO'} | {r['tokens_per_call']:.3f} "
            f"| {r['speedup']:.2f}x{ci} | {r['tv_first_mini']:.4f} | {r['tv_first_tiny']:.4f} "
            f"| {r['tv_joint_tiny']:.4f} |"
        )
    return "\n".join(lines)


def write_outputs(rows: list[dict], meta: dict, workdir: str) -> None:
    """results.json, results.md and two PNGs: speedup vs TV, tokens per call vs TV."""
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "results.json"), "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1, default=float)
    with open(os.path.join(workdir, "results.md"), "w", encoding="utf-8") as f:
        f.write(format_table(rows, meta) + "\n")
    setting = f"γ = {meta['gamma']}, t = {meta['temperature']:g}"
    for column, name, label in (
        ("speedup", "speedup_vs_tv.png", "walltime speedup over AR (batch 1, medians)"),
        ("tokens_per_call", "tokens_per_call_vs_tv.png", "tokens per target call"),
    ):
        series = [
            Series([r["tv_first_mini"]], [r[column]], label=r["rule"], marker="o") for r in rows
        ]
        save_line_plot(
            os.path.join(workdir, name),
            series,
            xlabel="TV from p of the first emitted token (mini pair, closed form)",
            ylabel=label,
            title=f"What each acceptance knob buys and costs ({setting})",
            hline=1.0 if column == "speedup" else None,
            integer_x=False,
        )


def main(argv) -> None:
    del argv
    if FLAGS.from_json:  # only the table and plots again, from a saved run
        with open(FLAGS.from_json, encoding="utf-8") as f:
            saved = json.load(f)
        write_outputs(saved["rows"], saved["meta"], FLAGS.workdir)
        print(format_table(saved["rows"], saved["meta"]))
        return
    start = time.perf_counter()
    os.makedirs(FLAGS.workdir, exist_ok=True)
    target_dir = model_path("mini_target", FLAGS.corpus)
    draft_dir = model_path("mini_draft_distilled", FLAGS.corpus, option="draft")
    target, tparams, _ = load_model(target_dir)
    draft, dparams, _ = load_model(draft_dir)
    warper = make_warper(FLAGS.temperature)
    val = np.asarray(load_corpus(FLAGS.corpus, "validation", ByteTokenizer()))
    prefixes = np.asarray(
        sample_prompts(val, FLAGS.prefixes, FLAGS.prompt_len, seed=FLAGS.seed + 3).tokens
    )
    p1 = first_token_laws(target, tparams, prefixes, warper)
    q1 = first_token_laws(draft, dparams, prefixes, warper)
    timed = sample_prompts(val, FLAGS.timing_prompts, FLAGS.prompt_len, seed=FLAGS.seed + 1)
    stat = sample_prompts(val, FLAGS.stat_prompts, FLAGS.prompt_len, seed=FLAGS.seed + 2)
    compared = compare_rules(
        target,
        tparams,
        draft,
        dparams,
        [np.asarray(p) for p in timed.tokens],
        warper,
        FLAGS.gamma,
        {spec: accept_rule(spec) for spec in SETTINGS},
        stat_prompts=np.asarray(stat.tokens),
        max_new_tokens=FLAGS.max_new_tokens,
        repeats=FLAGS.repeats,
        seed=FLAGS.seed,
    )
    rows = []
    for row in compared:
        tv_first, tv_joint = tiny_pair_tv(row.rule)
        rows.append(
            {
                **row.as_dict(),
                "tv_first_mini": first_token_tv(p1, q1, row.rule),
                "tv_first_tiny": tv_first,
                "tv_joint_tiny": tv_joint,
            }
        )
    meta = {
        "gamma": FLAGS.gamma,
        "temperature": FLAGS.temperature,
        "target": os.path.basename(target_dir),
        "draft": os.path.basename(draft_dir),
        "prefixes": FLAGS.prefixes,
        "timing_prompts": FLAGS.timing_prompts,
        "stat_prompts": FLAGS.stat_prompts,
        "max_new_tokens": FLAGS.max_new_tokens,
        "repeats": FLAGS.repeats,
        "device": str(jax.devices()[0]),
        "load_average": os.getloadavg(),
        "seconds": time.perf_counter() - start,
    }
    write_outputs(rows, meta, FLAGS.workdir)
    print(format_table(rows, meta))
    print(f"load average {meta['load_average']}; {meta['seconds']:.0f} s; in {FLAGS.workdir}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
