r"""Speculative beam search vs plain beam search: target calls per beam step and walltime.

    PYTHONPATH=. python -c "import specjax; specjax.configure_cpu(); \
      from configs import extensions; from experiments.extensions import beam; \
      r = beam.run(extensions.beam(), '/tmp/beam'); print(beam.report(r))"

Measured results: experiments/extensions/BEAM.md.

For each beam width B, plain beam search (`BeamSearchDecoder`) and speculative beam search
(`SpeculativeBeamDecoder`, each draft, each chain γ and each token tree below the beams)
decode the same ragged prompts (one call each, or one batch); every decoder is timed once per
round (round-robin after an untimed compile round, so other processes' load hits all alike)
and the median over rounds is kept, with the load average before and after. Each speculative
result is checked against the plain one (same hypotheses; scores within 1e-4). Counted: target
calls (loop iterations, summed over calls) and the rows' iterations per beam step (calls per
generated token of each beam). Writes <workdir>/beam.json.

Knobs: `configs/extensions.py`'s `beam(tiny)`; tiny=True: random-weight tiny models (no trained
models needed), seconds to run.
"""

from __future__ import annotations

import json
import os
import time

import jax
import ml_collections
import numpy as np

from experiments.common.models import model_path
from specjax import checkpoint
from specjax.benchmark.timing import interleaved
from specjax.data import load_corpus
from specjax.data.batches import sample_prompts
from specjax.data.tokenizer import EOS_ID
from specjax.decoding import BeamSearchDecoder, SpeculativeBeamDecoder, TokenTree
from specjax.models import TransformerConfig, TransformerLM


def load(name: str, vocab: int, cache_len: int, seed: int, corpus: str = "python"):
    """(model, params) of a trained model's name (`models.model_path`) or a
    "random:<layers>x<embed>" spec."""
    if name.startswith("random:"):
        layers, embed = (int(x) for x in name.split(":")[1].split("x"))
        model = TransformerLM(
            TransformerConfig.gpt2(
                vocab,
                num_layers=layers,
                embed_dim=embed,
                num_heads=2,
                mlp_dim=2 * embed,
                max_len=cache_len,
            )
        )
        return model, model.init_params(jax.random.PRNGKey(seed))
    model, params, _ = checkpoint.load_model(model_path(name, corpus, option="beam model"))
    return model, params


def _prompts(c) -> list[np.ndarray]:
    tokens = load_corpus(c.corpus, "validation")
    cut = sample_prompts(tokens, c.prompts, c.prompt_len, c.seed).tokens
    return [row[: max(1, c.prompt_len - 3 * i)].astype(np.int32) for i, row in enumerate(cut)]


def _same(results, references) -> bool:
    """Same hypotheses and scores (within 1e-4) in every call."""
    for a, b in zip(results, references, strict=True):
        ta, tb = a.new_tokens(), b.new_tokens()
        same = all(
            len(x) == len(y) and all(np.array_equal(u, v) for u, v in zip(x, y, strict=True))
            for x, y in zip(ta, tb, strict=True)
        )
        if not (same and np.allclose(a.scores, b.scores, atol=1e-4)):
            return False
    return True


def _counts(results, beams: int) -> dict:
    """Target calls (summed over calls), beam steps per prompt, row iterations per beam step."""
    steps = np.concatenate([np.asarray(r.stats.emitted).reshape(-1, beams)[:, 0] for r in results])
    iters = np.concatenate(
        [np.asarray(r.stats.iterations).reshape(-1, beams)[:, 0] for r in results]
    )
    return {
        "target_calls": int(sum(int(r.stats.target_calls) for r in results)),
        "beam_steps": steps.tolist(),
        "row_iterations": iters.tolist(),
        "calls_per_step": float(iters.sum() / max(steps.sum(), 1)),
    }


def run(c: ml_collections.ConfigDict, workdir: str, log=print) -> dict:
    """Measures every decoder; returns (and writes to <workdir>/beam.json) the results."""
    t0 = time.perf_counter()
    vocab = EOS_ID + 1
    target, tparams = load(c.target, vocab, c.cache_len, c.seed, c.corpus)
    drafts = {
        n: load(n, vocab, c.cache_len, c.seed + 1 + i, c.corpus) for i, n in enumerate(c.drafts)
    }
    prompts = _prompts(c)
    eos = EOS_ID if c.use_eos else None
    new = int(c.max_new_tokens)
    load_before = os.getloadavg()
    rows = []
    for beams in c.beams:
        calls = {
            "plain": (
                BeamSearchDecoder(target, beams, c.length_penalty, cache_len=c.cache_len),
                (tparams,),
            )
        }
        for name, (draft, dparams) in drafts.items():
            shapes = [(str(g), int(g), None) for g in c.gammas]
            shapes += [(f"tree {s}", 1, TokenTree.parse(s)) for s in c.trees]
            for label, g, tree in shapes:
                dec = SpeculativeBeamDecoder(
                    target, draft, g, beams, c.length_penalty, tree, cache_len=c.cache_len
                )
                calls[(name, label)] = (dec, (tparams, dparams))

        def go(dec, params):
            batches = [prompts] if c.batched else [[p] for p in prompts]
            results = [dec.generate(*params, b, max_new_tokens=new, eos_id=eos) for b in batches]
            return jax.block_until_ready(results)

        # One untimed compile round, then `c.repeats` interleaved rounds.
        timed = interleaved({k: (lambda v=v: go(*v)) for k, v in calls.items()}, c.repeats)
        last = {k: t.output for k, t in timed.items()}
        plain_s = timed["plain"].median
        for k in calls:
            median = timed[k].median
            row = {
                "beams": int(beams),
                "draft": "-" if k == "plain" else k[0],
                "gamma": "-" if k == "plain" else k[1],
                "median_s": median,
                "speedup": plain_s / median,
                "exact": _same(last[k], last["plain"]),
                **_counts(last[k], beams),
            }
            rows.append(row)
            log(
                f"B={beams} {row['draft']} γ={row['gamma']}: {median * 1e3:.1f} ms "
                f"({row['speedup']:.2f}x), calls {row['target_calls']}, "
                f"calls/step {row['calls_per_step']:.2f}, exact {row['exact']}"
            )
    results = {
        "config": c.to_dict(),
        "rows": rows,
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
        "devices": str(jax.devices()),
        "seconds": time.perf_counter() - t0,
    }
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "beam.json"), "w") as f:
        json.dump(results, f, indent=1, default=list)
    return results


def report(results: dict) -> str:
    """A markdown table of `run`'s results."""
    c = results["config"]
    lines = [
        f"Target `{c['target']}`, {c['prompts']} ragged prompts of <= {c['prompt_len']} tokens "
        f"from {c['corpus']} ({'one batch' if c['batched'] else 'one call each'}), "
        f"max_new_tokens {c['max_new_tokens']}, length penalty "
        f"{c['length_penalty']}, EOS {'on' if c['use_eos'] else 'off'}; medians of "
        f"{c['repeats']} interleaved rounds; load average (1/5/15 min) before "
        + "/".join(f"{x:.2f}" for x in results["load_average"]["before"])
        + ", after "
        + "/".join(f"{x:.2f}" for x in results["load_average"]["after"])
        + ".",
        "",
        "| B | draft | γ or tree | target calls | calls per beam step | median ms | speedup "
        "| exact |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        lines.append(
            f"| {r['beams']} | {r['draft']} | {r['gamma']} | {r['target_calls']} | "
            f"{r['calls_per_step']:.2f} | {r['median_s'] * 1e3:.1f} | {r['speedup']:.2f}x | "
            f"{'yes' if r['exact'] else 'NO'} |"
        )
    return "\n".join(lines)
