"""Autoregressive vs speculative decoding on CPU: ms/token, speedup, and the loops' own overhead.

    python scripts/bench_decoding.py                          # trained tiny pair, if cached
    python scripts/bench_decoding.py --weights=random         # target d=512/8L, draft d=128/2L
    python scripts/bench_decoding.py --draft=self             # draft == target: alpha = 1
    python scripts/bench_decoding.py --draft=truncated:2      # the target's first 2 blocks
    python scripts/bench_decoding.py --draft=bigram
    python scripts/bench_decoding.py --compare_xla_flag       # with vs without the XLA:CPU flag
    python scripts/bench_decoding.py --accept=block --temperature=1   # block verification
    python scripts/bench_decoding.py --tree=3,2,1 --tree_rule=without   # + a token tree

Weights (--weights): "auto" (default) benchmarks the README main job's trained models, the tiny
target (d=128, 4 layers) and its distilled draft (d=64, 1 layer), on prompts from the Python
validation split, when they are in the model cache (the main job puts them there); else random
weights of the --target_* / --draft_* sizes, with one line saying why and how to get the trained
pair. Random weights agree by chance only (alpha ~0.1 with the default sizes), so that run shows
the loops' costs and no speedup. "trained" insists on the pair, "random" always initialises.

Greedy, batch 1 by default, one run: the decoders and every part are timed
round-robin (machine drift hits all alike), medians over --repeats after a warm-up round that
absorbs compilation, in wall-clock time and in process CPU time. CPU time (both XLA threads
summed) is the figure to trust when other processes share the cores: wall time then includes
waiting for a core, which hurts second-long loops more than millisecond parts. Prints
  * ms/token of the autoregressive and the speculative decoder, their ratio, tokens/iteration
    and the empirical acceptance rate;
  * loop overhead: each decoder's `generate` against the sum of its parts timed alone —
    speculative: prefill + iterations x (one 2-token draft call + (gamma - 1) one-token draft
    calls + the (gamma + 1)-token verification + the acceptance rule); autoregressive: prefill +
    steps x one-token step. Parts are timed two ways: as separately dispatched jitted calls
    (block_until_ready after each; includes ~0.1-0.3 ms of Python dispatch per call) and inside
    one device loop (`fori_loop` of --inner calls, divided), which is how the decoders pay them;
  * the number of cache-sized copy ops in the compiled HLO of the one-token step and of both
    decoders' loops (XLA:CPU pitfall, see specjax/runtime.py). This script calls
    specjax.configure_cpu(), which sets --xla_cpu_copy_insertion_use_region_analysis=true
    unless SPECJAX_NO_XLA_FLAGS=1;
    --compare_xla_flag runs this script twice in subprocesses, with and without it.

With --tree (TokenTree.parse: "3,2,1" children per depth, or "-1,0,0,1" parents), a
TreeSpeculativeDecoder with the same draft runs beside the two: its ms/token, speedup, tokens per
iteration, its tree verification (N nodes under the tree mask) as a part, its loop step, and the
cache-sized copies of its compiled loop. --tree_rule picks the sibling rule at temperature > 0
(at 0 children are the draft's top-k, which both rules verify alike).

Draft choices (random weights have no knowledge, so alpha comes from the construction):
  transformer   the trained distilled draft, or an independent random model (--draft_* sizes):
                alpha near chance
  self          the target itself: alpha = 1
  truncated:K   the target's first K blocks + its final norm and head (shared weights; with
                the default random init the later blocks still flip the argmax: alpha ~0)
  bigram        a bigram table fitted on the target's own greedy output
"""

import functools
import json
import os
import re
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
    "auto: the README main job's trained tiny pair if cached, else random; trained: that pair "
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
_INNER = flags.DEFINE_integer("inner", 16, "Calls per device loop when timing parts in-device.")
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
    "Also print issue 20's speed summary: the overhead ratio (ovh / T_target(1) and the AR "
    "iteration / its bare step), the batch table (--batch_sizes) and the cache_len scaling "
    "ratio (--cache_lens).",
)
_BATCH_SIZES = flags.DEFINE_string(
    "batch_sizes", "1,4,16,64", "Batch sizes of the --summary batch table (empty: skip it)."
)
_SUMMARY_CLOCK = flags.DEFINE_enum(
    "summary_clock",
    "cpu",
    ["cpu", "wall"],
    "Clock of the --summary timings: process CPU time (steadier on shared cores) or wall time.",
)
_CACHE_LENS = flags.DEFINE_string(
    "cache_lens",
    "256,4096",
    "Cache lengths of the --summary cache_len scaling ratio (needs "
    "specjax.benchmark.attention.cache_len_scaling; empty: skip it).",
)


def _gpt2_fields(layers: int, heads: int, dim: int) -> dict:
    """GPT-2 style model fields: MLP 4x wide, positions up to --cache_len."""
    return dict(
        num_layers=layers, num_heads=heads, embed_dim=dim, mlp_dim=4 * dim, max_len=_CACHE_LEN.value
    )


def trained_pair():
    """The README main job's trained tiny target and distilled draft, or why not.

    Returns:
      ((target, target_params), (draft, draft_params), None) when both are cached and
      --weights allows, else (None, None, note): `note` is one line for the user (None when
      --weights=random asked for random weights).
    """
    from experiments.common.pair import main_job_pair
    from specjax.checkpoint import load_model

    dirs, note = main_job_pair(_WEIGHTS.value, option="--weights")
    if dirs is None:
        return None, None, note
    target, tparams, _ = load_model(dirs["target"])
    draft, dparams, _ = load_model(dirs["draft"])
    return (target, tparams), (draft, dparams), None


def build_pair(jax, np):
    """Target, draft, their params and how they were made, from the flags.

    Returns:
      (target, target_params, draft, draft_params, info) where info holds "weights"
      ("trained" or "random"), "cache_len" (the flag, capped by a trained model's positions),
      "note" (one line, or None) and "target"/"draft" descriptions.
    """
    from specjax.models import build

    vocab, cache_len = _VOCAB.value, _CACHE_LEN.value
    kind = _DRAFT.value
    if kind not in ("transformer", "self", "bigram") and not kind.startswith("truncated:"):
        raise ValueError(f"--draft must be transformer, self, truncated:K or bigram; got {kind!r}")
    trained_target, trained_draft, note = trained_pair()
    info = {"weights": "random", "cache_len": cache_len, "note": note}
    if trained_target is not None:
        target, target_params = trained_target
        cache_len = min(cache_len, target.config.max_len)
        c = target.config
        info.update(weights="trained", cache_len=cache_len)
        info["target"] = f"trained mini_target gpt2 d={c.embed_dim} L={c.num_layers}"
    else:
        target_fields = _gpt2_fields(_TARGET_LAYERS.value, _TARGET_HEADS.value, _TARGET_DIM.value)
        key = jax.random.PRNGKey(_SEED.value)
        target, target_params = build.init_model(target_fields, vocab, key)
        info["target"] = f"random gpt2 d={_TARGET_DIM.value} L={_TARGET_LAYERS.value}"
    info["draft"] = kind
    if kind == "transformer" and trained_draft is not None:
        c = trained_draft[0].config
        info["draft"] = f"trained mini_draft_distilled gpt2 d={c.embed_dim} L={c.num_layers}"
        return (target, target_params, *trained_draft, info)
    draft_fields = _gpt2_fields(_DRAFT_LAYERS.value, _DRAFT_HEADS.value, _DRAFT_DIM.value)
    tokens = None
    if kind == "bigram":
        # Fitted on the target's greedy continuation of a random prompt: some agreement.
        from specjax.decoding import AutoregressiveDecoder, make_warper

        prompt = np.random.default_rng(_SEED.value + 7).integers(0, vocab, 16)
        ar = AutoregressiveDecoder(target, make_warper(0), cache_len=cache_len)
        tokens = ar.generate(target_params, [prompt], jax.random.PRNGKey(0), 256).new_tokens()[0]
    draft, draft_params = build.build_draft(
        kind,
        target,
        target_params,
        fields=draft_fields,
        key=jax.random.PRNGKey(_SEED.value + 1),
        tokens=tokens,
    )
    return target, target_params, draft, draft_params, info


def bench_prompts(info: dict, np) -> list:
    """--batch prompts of --prompt_len tokens: from the Python validation split for trained
    models (text they know), random token ids for random ones."""
    batch, length = _BATCH.value, _PROMPT_LEN.value
    if info["weights"] == "trained":
        from specjax.data import load_corpus
        from specjax.data.batches import sample_prompts

        val = np.asarray(load_corpus("python", "validation"))
        return [np.asarray(p) for p in sample_prompts(val, batch, length, _SEED.value).tokens]
    rng = np.random.default_rng(_SEED.value)
    return [rng.integers(0, _VOCAB.value, length) for _ in range(batch)]


def count_cache_copies(hlo: str, cache_shape) -> int:
    """Stand-alone copy ops (outside fusions) producing an f32 buffer of the KV cache's shape.

    A copy inside a fused computation is a layout change folded into the fusion's loop; a
    stand-alone copy is an extra pass over the whole buffer (what the XLA:CPU pitfall adds).
    """
    dims = ",".join(str(d) for d in cache_shape)
    pattern = re.compile(rf"= f32\[{dims}\]\{{[^}}]*\}} copy\(")
    count, fused = 0, False
    for line in hlo.split("\n"):
        if line and not line[0].isspace():  # a computation header
            fused = "fused" in line.split(" ")[0] or "fusion" in line.split(" ")[0]
        elif not fused and pattern.search(line):
            count += 1
    return count


def measure() -> dict:
    """Runs every measurement; returns the figures as a dict."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from specjax.benchmark.timing import interleaved
    from specjax.decoding import (
        AutoregressiveDecoder,
        SpeculativeDecoder,
        loop,
        make_warper,
        sample_from_probs,
    )
    from specjax.decoding.rules import accept_rule

    gamma, batch, new = _GAMMA.value, _BATCH.value, _NEW.value
    repeats, inner = _REPEATS.value, _INNER.value
    target, tp, draft, dp, info = build_pair(jax, np)
    if info["note"]:
        print(info["note"], flush=True)
    cache_len = info["cache_len"]
    warper = make_warper(_TEMPERATURE.value)
    prompts = bench_prompts(info, np)
    key = jax.random.PRNGKey(_SEED.value)
    ar = AutoregressiveDecoder(target, warper, cache_len=cache_len)
    spec = SpeculativeDecoder(
        target, draft, gamma, warper, cache_len=cache_len, accept=accept_rule(_ACCEPT.value)
    )
    tree = tree_dec = None
    if _TREE.value:
        from specjax.decoding import TokenTree, TreeSpeculativeDecoder
        from specjax.decoding.trees.topology import tree_inputs

        tree = TokenTree.parse(_TREE.value)
        tree_dec = TreeSpeculativeDecoder(
            target,
            draft,
            tree,
            warper,
            replacement=_TREE_RULE.value == "with",
            cache_len=cache_len,
        )

    ar_result = ar.generate(tp, prompts, key, new)
    spec_result = spec.generate(tp, dp, prompts, key, new)
    summary = spec_result.summary()
    emitted = summary["tokens_emitted"]
    iterations = int(spec_result.stats.target_calls)
    steps = int(ar_result.stats.target_calls)
    same = [a.tolist() for a in ar_result.new_tokens()] == [
        s.tolist() for s in spec_result.new_tokens()
    ]

    # -- the parts, each as its own jitted program, at a prefilled cache --------------------
    tokens, lengths = spec.prepare(prompts, new)
    vocab = target.vocab_size
    ones = jnp.ones((batch,), jnp.int32)

    @functools.partial(jax.jit, static_argnums=0)
    def prefill(model, params, tokens, lengths):
        state = model.init_state(batch, cache_len)
        return model.apply(params, state, tokens, lengths - 1)

    _, t_state = prefill(target, tp, tokens, lengths)
    _, d_state = prefill(draft, dp, tokens, lengths)
    tok1 = tokens[:, :1]  # [batch, 1]
    tok2 = tokens[:, :2]  # [batch, 2]
    tokv = tokens[:, : gamma + 1]  # [batch, gamma + 1]
    drafted = tokens[:, :gamma]  # [batch, gamma]
    q = jax.nn.softmax(jax.random.normal(key, (batch, gamma, vocab)))  # [batch, gamma, vocab]
    p = jax.nn.softmax(jax.random.normal(key, (batch, gamma + 1, vocab)))

    # Each part is (state, i) -> (state rolled back to where it was, a small output); tokens
    # and keys vary with i so that a device loop cannot hoist the call out of the loop.
    def draft_part(toks, num):
        def part(state, i):
            logits, new_state = draft.apply(dp, state, (toks + i) % vocab, num)
            x = sample_from_probs(jax.random.fold_in(key, i), warper.probs(logits[:, -1]))
            return new_state.replace(lengths=state.lengths), x.astype(jnp.float32)

        return part

    def verify_part(state, i):
        logits, new_state = target.apply(tp, state, (tokv + i) % vocab, ones * (gamma + 1))
        return new_state.replace(lengths=state.lengths), warper.probs(logits)[:, -1, 0]

    def ar_part(state, i):
        logits, new_state = target.apply(tp, state, (tok1 + i) % vocab, ones)
        x = sample_from_probs(jax.random.fold_in(key, i), warper.probs(logits[:, 0]))
        return new_state.replace(lengths=state.lengths), x.astype(jnp.float32)

    def accept_part(state, i):
        out, n = spec.accept(jax.random.fold_in(key, i), (drafted + i) % vocab, q, p)
        return state, (out.sum() + n.sum()).astype(jnp.float32)

    if tree is not None:
        num_nodes = tree.num_nodes
        tok_tree = jnp.resize(tokens[0], (batch, num_nodes)).astype(jnp.int32)  # [batch, N]

        def tree_verify_part(state, i):
            positions, mask = tree_inputs(tree, state.lengths, cache_len)
            logits, new_state = target.apply(
                tp,
                state,
                (tok_tree + i) % vocab,
                ones * num_nodes,
                positions=positions,
                mask=mask,
            )
            return new_state.replace(lengths=state.lengths), warper.probs(logits)[:, -1, 0]

    parts = {
        "draft_1tok": (draft_part(tok1, ones), d_state),
        "draft_2tok": (draft_part(tok2, ones * 2), d_state),
        "verify": (verify_part, t_state),
        "accept": (accept_part, jnp.zeros(())),
        "ar_step": (ar_part, t_state),
    }
    if tree is not None:
        parts["tree_verify"] = (tree_verify_part, t_state)

    def dispatched(part, state):
        fn = jax.jit(lambda s: part(s, 0))
        return lambda: fn(state)

    def in_device(part, state):
        def body(i, carry):
            s, acc = carry
            s, out = part(s, i)
            return s, acc + jnp.sum(out)

        fn = jax.jit(lambda s: jax.lax.fori_loop(0, inner, body, (s, jnp.zeros(()))))
        return lambda: fn(state)

    s_ar = loop.init_jit(ar, (tp,), tokens, lengths, key, new, -1)
    s_spec = loop.init_jit(spec, (tp, dp), tokens, lengths, key, new, -1)
    calls = {
        "ar_loop": lambda: ar.generate(tp, prompts, key, new).tokens,
        "spec_loop": lambda: spec.generate(tp, dp, prompts, key, new).tokens,
        "target_prefill": lambda: prefill(target, tp, tokens, lengths),
        "draft_prefill": lambda: prefill(draft, dp, tokens, lengths),
        "ar_full_step": lambda: loop.step_jit(ar, (tp,), s_ar),
        "spec_full_step": lambda: loop.step_jit(spec, (tp, dp), s_spec),
    }
    tree_figures = None
    if tree is not None:
        tree_result = tree_dec.generate(tp, dp, prompts, key, new)
        tree_summary = tree_result.summary()
        s_tree = loop.init_jit(tree_dec, (tp, dp), tokens, lengths, key, new, -1)
        calls["tree_loop"] = lambda: tree_dec.generate(tp, dp, prompts, key, new).tokens
        calls["tree_full_step"] = lambda: loop.step_jit(tree_dec, (tp, dp), s_tree)
        tree_figures = {
            "tree": _TREE.value,
            "parents": list(tree.parents),
            "nodes": tree.num_nodes,
            "depth": tree.max_depth,
            "rule": _TREE_RULE.value,
            "tokens_per_iteration": tree_summary["tokens_per_iteration"],
            "iterations": int(tree_result.stats.target_calls),
            "emitted": tree_summary["tokens_emitted"],
            "accepted_depth_histogram": tree_summary.get("accepted_depth_histogram"),
            "greedy_identical": (
                [a.tolist() for a in ar_result.new_tokens()]
                == [s.tolist() for s in tree_result.new_tokens()]
            )
            if warper.is_greedy
            else None,
        }
    for name, (part, state) in parts.items():
        calls[name] = dispatched(part, state)
        calls[f"{name}_dev{inner}"] = in_device(part, state)
    timed = {
        name: {"wall": t.median, "cpu": t.cpu_median, "spread": t.spread}
        for name, t in interleaved(calls, repeats).items()
    }

    figures = {
        "xla_flag_on": _FLAG in os.environ.get("XLA_FLAGS", ""),
        "config": {
            "target": info["target"],
            "draft": info["draft"],
            "weights": info["weights"],
            "note": info["note"],
            "vocab": vocab,
            "batch": batch,
            "prompt_len": _PROMPT_LEN.value,
            "max_new_tokens": new,
            "gamma": gamma,
            "accept": _ACCEPT.value,
            "cache_len": cache_len,
            "temperature": _TEMPERATURE.value,
            "repeats": repeats,
            "inner": inner,
        },
        "tokens_per_iteration": summary["tokens_per_iteration"],
        "alpha_empirical": summary["alpha_empirical"],
        "iterations": iterations,
        "ar_steps": steps,
        "greedy_identical": same if warper.is_greedy else None,
        "timings": timed,
        "tree": tree_figures,
    }
    for clock in ("wall", "cpu"):
        t = {n: v[clock] for n, v in timed.items()}
        dev = {name: t[f"{name}_dev{inner}"] / inner for name in parts}
        disp = {name: t[name] for name in parts}
        prefill_s = t["target_prefill"] + t["draft_prefill"]

        def spec_sum(part_s, prefill_s=prefill_s):
            per_iteration = part_s["draft_2tok"] + (gamma - 1) * part_s["draft_1tok"]
            return prefill_s + iterations * (per_iteration + part_s["verify"] + part_s["accept"])

        f = {
            "ar_ms_per_token": t["ar_loop"] * 1e3 / (batch * new),
            "spec_ms_per_token": t["spec_loop"] * 1e3 / emitted,
            "parts_dispatched_ms": {k: v * 1e3 for k, v in disp.items()},
            "parts_in_device_ms": {k: v * 1e3 for k, v in dev.items()},
            "prefill_ms": {"target": t["target_prefill"] * 1e3, "draft": t["draft_prefill"] * 1e3},
            "full_step_ms": {"ar": t["ar_full_step"] * 1e3, "spec": t["spec_full_step"] * 1e3},
            "spec_loop_ms": t["spec_loop"] * 1e3,
            "spec_sum_dispatched_ms": spec_sum(disp) * 1e3,
            "spec_sum_in_device_ms": spec_sum(dev) * 1e3,
            "spec_sum_full_steps_ms": (prefill_s + iterations * t["spec_full_step"]) * 1e3,
            "ar_loop_ms": t["ar_loop"] * 1e3,
            "ar_sum_dispatched_ms": (t["target_prefill"] + steps * disp["ar_step"]) * 1e3,
            "ar_sum_in_device_ms": (t["target_prefill"] + steps * dev["ar_step"]) * 1e3,
            "ar_sum_full_steps_ms": (t["target_prefill"] + steps * t["ar_full_step"]) * 1e3,
        }
        f["speedup"] = f["ar_ms_per_token"] / f["spec_ms_per_token"]
        if tree is not None:
            f["tree_ms_per_token"] = t["tree_loop"] * 1e3 / tree_figures["emitted"]
            f["tree_speedup"] = f["ar_ms_per_token"] / f["tree_ms_per_token"]
            f["full_step_ms"]["tree"] = t["tree_full_step"] * 1e3
        for name in ("spec", "ar"):
            for how in ("dispatched", "in_device", "full_steps"):
                f[f"{name}_overhead_vs_{how}"] = (
                    f[f"{name}_loop_ms"] / f[f"{name}_sum_{how}_ms"] - 1
                )
        figures[clock] = f

    # -- HLO: stand-alone copies of cache-sized buffers ----------------------------------------
    cfg = target.config
    cache_shapes = {"target": (batch, cache_len, cfg.num_kv_heads, cfg.head_dim)}
    if hasattr(draft, "config"):
        cache_shapes["draft"] = (batch, cache_len, draft.config.num_kv_heads, draft.config.head_dim)
    hlo = {
        "ar_step": loop.step_jit.lower(ar, (tp,), s_ar).compile().as_text(),
        "ar_loop": loop.generate_jit.lower(ar, (tp,), tokens, lengths, key, new, -1)
        .compile()
        .as_text(),
        "spec_loop": loop.generate_jit.lower(spec, (tp, dp), tokens, lengths, key, new, -1)
        .compile()
        .as_text(),
    }
    if tree is not None:
        hlo["tree_loop"] = (
            loop.generate_jit.lower(tree_dec, (tp, dp), tokens, lengths, key, new, -1)
            .compile()
            .as_text()
        )
    figures["hlo_cache_copies"] = {
        f"{program}/{model}": count_cache_copies(text, shape)
        for program, text in hlo.items()
        for model, shape in cache_shapes.items()
        if not (model == "draft" and program.startswith("ar"))
    }
    figures["cache_buffers"] = {
        "target": 2 * cfg.num_layers,
        "draft": 2 * draft.config.num_layers if hasattr(draft, "config") else 0,
    }
    return figures


def _ragged_prompts(info: dict, count: int, np) -> list:
    """`count` prompts of 16..48 tokens (ragged), from the validation split for trained models."""
    lengths = [16 + (7 * i) % 33 for i in range(count)]
    if info["weights"] == "trained":
        from specjax.data import load_corpus
        from specjax.data.batches import sample_prompts

        val = np.asarray(load_corpus("python", "validation"))
        full = sample_prompts(val, count, max(lengths), _SEED.value + 3).tokens
        return [np.asarray(p)[:n] for p, n in zip(full, lengths, strict=True)]
    rng = np.random.default_rng(_SEED.value + 3)
    return [rng.integers(0, _VOCAB.value, n) for n in lengths]


def speed_summary() -> dict:
    """Issue 20's figures in one run: overhead ratio, batch table, cache_len scaling ratio."""
    import importlib

    import jax
    import numpy as np

    from specjax.benchmark.batch import batch_table, break_even, format_batch_rows
    from specjax.benchmark.overhead import overhead_breakdown
    from specjax.decoding import SpeculativeDecoder, make_warper

    target, tp, draft, dp, info = build_pair(jax, np)
    cache_len, gamma = info["cache_len"], _GAMMA.value
    warper = make_warper(_TEMPERATURE.value)
    prompts = bench_prompts(info, np)
    out = {}
    spec = SpeculativeDecoder(target, draft, gamma, warper, cache_len=cache_len)
    clock = time.process_time if _SUMMARY_CLOCK.value == "cpu" else time.perf_counter
    b = overhead_breakdown(spec, (tp, dp), prompts, repeats=_REPEATS.value, clock=clock)
    out["overhead"] = {k: v for k, v in b.items() if k != "pieces"}
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    print(
        f"\n== speed summary ({_SUMMARY_CLOCK.value} clock; load average {load})"
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
            _ragged_prompts(info, max(sizes), np),
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
        try:
            attention = importlib.import_module("specjax.benchmark.attention")
            scaling = attention.cache_len_scaling
        except (ImportError, AttributeError):
            print(
                "cache_len scaling ratio: unavailable on this branch "
                "(specjax.benchmark.attention.cache_len_scaling is not importable)",
                flush=True,
            )
        else:
            # The target's shape; its own weights only if its position table covers the
            # largest buffer (a learned table caps cache_len), else random weights of that shape.
            cfg = target.config
            fits = cfg.positions != "learned" or cfg.max_len >= max(lens)
            if not fits:
                cfg = cfg.replace(max_len=max(lens))
            scaled = scaling(cfg, cache_lens=lens, params=tp if fits else None)
            ratio = scaled["cpu"]["ratio"]
            print(
                f"cache_len scaling ratio (ms/token at {max(lens)} / at {min(lens)}, CPU time"
                f"{'' if fits else ', random weights of the target shape'}): "
                + ", ".join(f"{impl} {r:.2f}x" for impl, r in ratio.items()),
                flush=True,
            )
            out["cache_len_scaling"] = scaled
    return out


def _overhead_line(f: dict, name: str) -> str:
    label = "speculative   " if name == "spec" else "autoregressive"
    parts = [f"  {label}  loop {f[f'{name}_loop_ms']:9.2f} ms;"]
    for how, text in (
        ("dispatched", "parts dispatched"),
        ("in_device", "in-device"),
        ("full_steps", "full steps"),
    ):
        total, overhead = f[f"{name}_sum_{how}_ms"], f[f"{name}_overhead_vs_{how}"]
        parts.append(f"{text} {total:9.2f} ({overhead:+.1%})")
    return " ".join(parts)


def report(figures: dict) -> str:
    """Terminal text for one run's figures."""
    c = figures["config"]
    g = c["gamma"]
    timed = figures["timings"]
    lines = [
        f"target {c['target']}, draft {c['draft']}, vocab {c['vocab']}, batch {c['batch']}, "
        f"prompt {c['prompt_len']}, {c['max_new_tokens']} new tokens, gamma {g}, "
        f"temperature {c['temperature']}, cache {c['cache_len']}, medians of {c['repeats']} "
        f"rounds; XLA region-analysis flag {'ON' if figures['xla_flag_on'] else 'OFF'}",
        f"tokens/iteration {figures['tokens_per_iteration']:.3f}; alpha "
        f"{figures['alpha_empirical']:.3f}; {figures['iterations']} iterations; greedy "
        f"identical: {figures['greedy_identical']}; wall-time spread (p90-p10)/median: AR "
        f"{timed['ar_loop']['spread']:.0%}, speculative {timed['spec_loop']['spread']:.0%}",
    ]
    tf = figures.get("tree")
    if tf:
        lines.append(
            f"tree {tf['tree']} ({tf['nodes']} nodes, depth {tf['depth']}, siblings "
            f"{tf['rule']} replacement): tokens/iteration {tf['tokens_per_iteration']:.3f}; "
            f"{tf['iterations']} iterations; greedy identical: {tf['greedy_identical']}; "
            f"wall-time spread {timed['tree_loop']['spread']:.0%}"
        )
    for clock in ("wall", "cpu"):
        f = figures[clock]
        d, e = f["parts_dispatched_ms"], f["parts_in_device_ms"]
        title = "wall clock" if clock == "wall" else "process CPU time (both XLA threads summed)"
        lines += [
            "",
            f"== {title}",
            f"autoregressive  {f['ar_ms_per_token']:8.3f} ms/token",
            f"speculative     {f['spec_ms_per_token']:8.3f} ms/token",
            f"speedup (AR / speculative): {f['speedup']:.3f}x",
            *(
                [
                    f"tree            {f['tree_ms_per_token']:8.3f} ms/token",
                    f"speedup (AR / tree): {f['tree_speedup']:.3f}x",
                ]
                if tf
                else []
            ),
            "part (ms)                dispatched  in-device",
            f"  target prefill        {f['prefill_ms']['target']:10.3f}          -",
            f"  draft prefill         {f['prefill_ms']['draft']:10.3f}          -",
            f"  draft call, 1 token   {d['draft_1tok']:10.3f}  {e['draft_1tok']:9.3f}",
            f"  draft call, 2 tokens  {d['draft_2tok']:10.3f}  {e['draft_2tok']:9.3f}",
            f"  verify, {g + 1} tokens      {d['verify']:10.3f}  {e['verify']:9.3f}",
            f"  acceptance rule       {d['accept']:10.3f}  {e['accept']:9.3f}",
            f"  AR one-token step     {d['ar_step']:10.3f}  {e['ar_step']:9.3f}",
            f"  AR loop step          {f['full_step_ms']['ar']:10.3f}          -",
            f"  spec loop step        {f['full_step_ms']['spec']:10.3f}          -",
            *(
                [
                    f"  tree verify, {tf['nodes']:2d} nodes {d['tree_verify']:10.3f}  "
                    f"{e['tree_verify']:9.3f}",
                    f"  tree loop step        {f['full_step_ms']['tree']:10.3f}          -",
                ]
                if tf
                else []
            ),
            "loop overhead: generate() vs the sum of its parts timed alone",
            *(_overhead_line(f, name) for name in ("spec", "ar")),
        ]
    lines += [
        "",
        f"stand-alone cache-sized copies in compiled HLO (cache buffers: "
        f"{figures['cache_buffers']}): {figures['hlo_cache_copies']}",
    ]
    why = _why_no_speedup(figures)
    if why:
        lines.append(why)
    return "\n".join(lines)


def _why_no_speedup(figures: dict) -> str | None:
    """One line on why speculation was not faster (process CPU time), when it was not."""
    from experiments.common.pair import why_no_speedup

    c = figures["config"]
    return why_no_speedup(
        figures["cpu"]["speedup"],
        figures["alpha_empirical"],
        random_weights=c.get("weights") == "random",
        self_draft="--draft=self" if c["draft"] == "self" else None,
    )


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
    for clock in ("wall", "cpu"):
        for key in ("ar_ms_per_token", "spec_ms_per_token", "speedup"):
            a, b = on[clock][key], off[clock][key]
            print(f"  {clock:4s} {key:22s} ON {a:9.3f}   OFF {b:9.3f}   OFF/ON {b / a:.3f}")
        for key in ("ar_step", "draft_1tok", "verify"):
            a, b = on[clock]["parts_in_device_ms"][key], off[clock]["parts_in_device_ms"][key]
            print(
                f"  {clock:4s} in-device {key:12s} ON {a:9.3f}   OFF {b:9.3f}   OFF/ON {b / a:.3f}"
            )
    print(f"  HLO cache copies ON {on['hlo_cache_copies']}")
    print(f"  HLO cache copies OFF {off['hlo_cache_copies']}")


def main(argv):
    if _COMPARE.value:
        compare_flag(sys.argv)
        return
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    figures = measure()
    print(report(figures), flush=True)
    if _SUMMARY.value:
        figures["summary"] = speed_summary()
    if _JSON_OUT.value:
        with open(_JSON_OUT.value, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    app.run(main)
