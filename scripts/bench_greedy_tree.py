"""A greedy token-tree iteration on the real target, with and without the point-mass verdict.

    python scripts/bench_greedy_tree.py --rounds=15

At temperature 0 `TreeSpeculativeDecoder` reads its verdict off the target's argmax
(`rules.point_mass.tree_point_mass_accept`) instead of running `tree_accept` on the one-hot p
(`verify_point_mass`); a subclass that returns None there is the same decoder without it. Both,
a γ = 1 chain, and the model calls each iteration makes (T(n) for the tree's n nodes, T(2), one
draft call) are timed in-loop, round-robin (`timing.interleaved`), batch 1, `--context` tokens
cached. Prints per-iteration medians, the overhead beyond the model calls (iteration − T(n) −
depth × T_draft(1); a deeper tree's draft calls score several nodes, so its figure includes
that) and the paired per-round difference without − with. The draft is the target's first
`--draft_layers` layers. Results: experiments/speed/REAL.md, "Fourth pass".
"""

import dataclasses
import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import specjax  # noqa: E402

specjax.configure_cpu()  # before JAX starts; SPECJAX_NO_XLA_FLAGS=1 opts out

FLAGS = flags.FLAGS
flags.DEFINE_string("model", "smollm2-135m-instruct", "target: a registered name or a .gguf path")
flags.DEFINE_integer("draft_layers", 2, "the draft: the target's first K layers")
flags.DEFINE_list("trees", ["15", "4-2-1"], "trees by branching per level, e.g. 4-2-1")
flags.DEFINE_integer("rounds", 15, "timed round-robin rounds")
flags.DEFINE_integer("steps", 8, "iterations (or calls) per timed loop")
flags.DEFINE_integer("context", 128, "cached tokens before the timed iterations")
flags.DEFINE_integer("cache_len", 1024, "cache positions per row")


def main(argv):
    del argv
    import numpy as np

    from specjax.benchmark.costs import call_runner, iteration_runner
    from specjax.benchmark.script_checks import gguf_model
    from specjax.benchmark.timing import interleaved
    from specjax.convert import load_gguf
    from specjax.decoding import SpeculativeDecoder, TokenTree, TreeSpeculativeDecoder, make_warper
    from specjax.models.build import truncated

    @dataclasses.dataclass(frozen=True)
    class WithoutShortcut(TreeSpeculativeDecoder):
        """The same decoder verifying with `tree_accept` on the one-hot p."""

        def verify_point_mass(self, proposal, logits):
            return None

    model, params, _ = load_gguf(gguf_model(FLAGS.model))
    draft, draft_params = truncated(model, params, FLAGS.draft_layers)
    greedy, cl, steps = make_warper(0), FLAGS.cache_len, FLAGS.steps
    prompt = [np.random.default_rng(0).integers(100, 20000, FLAGS.context).tolist()]
    shape = dict(context=FLAGS.context, cache_len=cl, steps=steps)
    pair = (params, draft_params)
    calls = {
        "T(2)": call_runner(model, params, 2, **shape),
        "T_draft(1)": call_runner(draft, draft_params, 1, **shape),
        "chain γ=1": iteration_runner(
            SpeculativeDecoder(model, draft, 1, greedy, cache_len=cl), pair, prompt, steps=steps
        ),
    }
    trees = {}
    for spec in FLAGS.trees:
        tree = TokenTree.from_branching(tuple(int(b) for b in spec.split("-")))
        trees[spec] = tree
        calls[f"T({tree.num_nodes}) tree"] = call_runner(
            model, params, tree.num_nodes, tree=tree, **shape
        )
        for label, cls in (("with", TreeSpeculativeDecoder), ("without", WithoutShortcut)):
            decoder = cls(model, draft, tree, greedy, cache_len=cl)
            calls[f"tree {spec} {label}"] = iteration_runner(decoder, pair, prompt, steps=steps)
    timed = interleaved(calls, repeats=FLAGS.rounds)
    per = {k: np.asarray(t.samples) / steps * 1e3 for k, t in timed.items()}  # ms per iteration
    print(f"{model.config.num_layers}-layer target, draft = its first {FLAGS.draft_layers} layers")
    for name, ms in per.items():
        print(f"{name:22s} {np.median(ms):7.2f} ms")
    chain_ovh = per["chain γ=1"] - per["T(2)"] - per["T_draft(1)"]
    print(f"chain γ=1: beyond its model calls {np.median(chain_ovh):.2f} ms")
    for spec, tree in trees.items():
        calls_ms = per[f"T({tree.num_nodes}) tree"] + tree.max_depth * per["T_draft(1)"]
        for label in ("with", "without"):
            ovh = per[f"tree {spec} {label}"] - calls_ms
            print(f"tree {spec} {label} the point-mass verdict: beyond its model calls "
                  f"{np.median(ovh):.2f} ms")  # fmt: skip
        diff = per[f"tree {spec} without"] - per[f"tree {spec} with"]
        lo, hi = np.percentile(diff, [25, 75])
        print(f"tree {spec}: without - with, per round: median {np.median(diff):.2f} ms "
              f"(quartiles {lo:.2f} .. {hi:.2f})")  # fmt: skip


if __name__ == "__main__":
    app.run(main)
