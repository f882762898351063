"""Trees for a trained EAGLE head from its acceptance by rank and depth (`--parts=head_trees`).

    python scripts/bench_real.py --parts=head_trees --heads=runs/eagle3-broad --num_prompts=12

For each temperature: the target's own continuations of the evaluation prompts (one batch,
autoregressive), then for each head P[d][k], the probability that the k-th child tried at a node
of depth d + 1 is the one accepted (`training/head_acceptance.py`), with the rule the static
trees of `--trees` are verified with: the head's top-k at t = 0, draws without replacement at
t > 0. From it, predicted target tokens per call (1 + `expected_accepted`) of the chains, of
Sequoia's DP tree for each size on the per-depth P, and of Sequoia's DP tree on P's first row
alone (the positional assumption, one vector for every depth), each predicted both ways. The
trees print in the parents notation `--trees` takes, so the next run can decode them:

    python scripts/bench_real.py --parts=drafts --heads=runs/eagle3-broad \
        --kinds=EAGLE-3 --trees=-1/0/0/1/2 --gamma=3

With `--tree_timing`, each distinct chain and tree is also timed as a whole loop iteration
(`time_trees`: the packed head and target, in-loop, interleaved with AR), and the speedup it
predicts, tokens per call (P by depth) x AR's iteration / its iteration, picks the best: Sequoia's
hardware-aware choice of size and depth, on this machine's measured iterations rather than on a
model of T(k) and the draft's calls (the `loop_choice` of experiments/sequoia2024/walltime.py).
"""

from __future__ import annotations

import jax
import numpy as np

from experiments.common.real_drafts import tree_text
from specjax.benchmark.costs import iteration_cost
from specjax.decoding import (
    AutoregressiveDecoder,
    SpeculativeDecoder,
    TokenTree,
    TreeSpeculativeDecoder,
    make_warper,
)
from specjax.decoding.trees.search import expected_accepted, optimal_tree
from specjax.training.head_acceptance import head_rank_acceptance


def head_trees_table(
    target,
    target_params,
    prompt_ids,
    heads: dict,
    *,
    temperature: float,
    max_new_tokens: int = 64,
    ranks: int = 4,
    depth: int = 5,
    sizes=(4, 8, 16),
    trees=(),
    eos_id: int | None = None,
    seed: int = 0,
) -> dict:
    """P by rank and depth of each head and the trees it predicts (module docstring).

    Args:
      target, target_params: the target (any layout: it only generates here).
      prompt_ids: chat-templated prompts, 1-D token arrays.
      heads: label -> (EagleHead in the xla layout, params) (`real_drafts.eagle_heads`).
      temperature: the decoders' temperature; the continuations are sampled at it.
      max_new_tokens: continuation length per prompt (>= depth + 1 to measure every depth).
      ranks, depth: P's shape (children per node, draft depths).
      sizes: tree sizes n (nodes, the root included) for Sequoia's DP.
      trees: further TokenTrees to predict (e.g. the drafts part's static trees).
      eos_id: the target's end of reply.
      seed: continuations' and the "without" rule's PRNG seed.

    Returns:
      {"temperature", "rule", "prompts", "new_tokens", "heads": {label: {"positional",
      "conditional", "alpha", "positions", "trees": [{"name", "tree", "nodes", "depth",
      "tokens_by_depth", "tokens_by_vector"}]}}}.
    """
    warper = make_warper(temperature)
    rule = "top_k" if warper.is_greedy else "without"
    ids = [np.asarray(x, np.int32) for x in prompt_ids]
    cache_len = max(len(x) for x in ids) + max_new_tokens + 1
    ar = AutoregressiveDecoder(target, warper, cache_len=cache_len)
    result = ar.generate(
        target_params, prompts=ids, key=jax.random.PRNGKey(seed),
        max_new_tokens=max_new_tokens, eos_id=eos_id,
    )  # fmt: skip
    new = result.new_tokens()
    sequences = [
        np.concatenate([x, np.asarray(n, np.int32)]) for x, n in zip(ids, new, strict=True)
    ]
    out = {
        "temperature": float(temperature),
        "rule": rule,
        "prompts": len(ids),
        "new_tokens": int(sum(len(n) for n in new)),
        "heads": {},
    }
    for label, (head, params) in heads.items():
        measured = head_rank_acceptance(
            head, params, target_params, sequences, [len(x) for x in ids], warper,
            ranks=ranks, depth=depth, rules=(rule,), seed=seed,
        )[rule]  # fmt: skip
        rows = np.asarray(measured["positional"])
        candidates = [(f"chain γ = {g}", TokenTree.chain(g)) for g in range(1, depth + 1)]
        for n in sizes:
            bound = min(depth, n - 1)
            candidates.append((f"Sequoia by depth, {n} nodes", optimal_tree(rows, n, bound)))
            candidates.append((f"Sequoia one vector, {n} nodes", optimal_tree(rows[0], n, bound)))
        candidates += [(f"given {tree_text(t)}", t) for t in trees]
        measured["trees"] = [
            {
                "name": name,
                "tree": tree_text(tree),
                "nodes": tree.num_nodes,
                "depth": tree.max_depth,
                "tokens_by_depth": 1.0 + expected_accepted(tree, rows),
                "tokens_by_vector": 1.0 + expected_accepted(tree, rows[0]),
            }
            for name, tree in candidates
        ]
        out["heads"][label] = measured
    return out


def time_trees(
    table: dict,
    target,
    target_params,
    heads: dict,
    prompt,
    *,
    steps=16,
    repeats=3,
    rounds=2,
    cache_len=512,
) -> dict:
    """Adds to `table`'s trees their measured loop iteration and the speedup it predicts.

    Args:
      table: a `head_trees_table` result (its temperature is the decoders').
      target, target_params: the target in the layout to time (packed on the CPU).
      heads: label -> (EagleHead for that target and layout, params), the labels of `table`.
      prompt: one chat-templated prompt (1-D ids) the iterations continue.
      steps, repeats: `iteration_cost`'s iterations per timed loop and loops per round.
      rounds: interleaved rounds over AR and every distinct tree (the median of all samples).
      cache_len: the decoders' cache (the prompt plus one iteration must fit).

    Returns:
      `table`, each tree row with "iteration_ms" and "predicted_speedup" (tokens per call by
      depth x AR's iteration / the tree's), and per head "best" (the name of the fastest
      predicted) and the table's "ar_iteration_ms". Chains run as `SpeculativeDecoder`s, trees
      as `TreeSpeculativeDecoder`s (siblings without replacement; top-k children at t = 0).
    """
    warper = make_warper(table["temperature"])
    programs = {
        "AR": (AutoregressiveDecoder(target, warper, cache_len=cache_len), (target_params,))
    }
    for label, (head, params) in heads.items():
        for row in table["heads"][label]["trees"]:
            tree = TokenTree.parse(row["tree"])
            if tree.max_branch == 1:
                dec = SpeculativeDecoder(
                    target, head, tree.num_nodes - 1, warper, cache_len=cache_len
                )
            else:
                dec = TreeSpeculativeDecoder(
                    target, head, tree, warper, replacement=False, cache_len=cache_len
                )
            programs.setdefault((label, row["tree"]), (dec, (target_params, params)))
    samples = {name: [] for name in programs}
    for _ in range(rounds):
        for name, (dec, params) in programs.items():
            timing = iteration_cost(dec, params, [prompt], steps=steps, repeats=repeats)
            samples[name].extend(timing.samples)
    ms = {name: float(np.median(s)) * 1e3 for name, s in samples.items()}
    table["ar_iteration_ms"] = ms["AR"]
    for label in heads:
        rows = table["heads"][label]["trees"]
        for row in rows:
            row["iteration_ms"] = ms[(label, row["tree"])]
            row["predicted_speedup"] = row["tokens_by_depth"] * ms["AR"] / row["iteration_ms"]
        table["heads"][label]["best"] = max(rows, key=lambda r: r["predicted_speedup"])["name"]
    return table


def format_head_trees(table: dict) -> str:
    """Markdown: per head, P by depth and rank, then the trees' predicted tokens per call."""
    t = table["temperature"]
    lines = [
        f"t = {t:g}, rule {table['rule']!r} (the static trees' at this temperature), "
        f"{table['prompts']} prompts, {table['new_tokens']} tokens of the target's own "
        "continuations",
        "",
    ]
    for label, head in table["heads"].items():
        rows = head["positional"]
        ranks = len(rows[0])
        lines += [
            f"**{label}**: P[d][k], the k-th child tried at a node of depth d - 1 is accepted "
            "(alpha: sum min(p, q) at that depth)",
            "",
            "| depth | chain starts | alpha | "
            + " | ".join(f"P{k + 1}" for k in range(ranks))
            + " |",
            "|---|---|---|" + "---|" * ranks,
        ]
        for d, row in enumerate(rows):
            cells = " | ".join(f"{x:.3f}" for x in row)
            lines.append(f"| {d + 1} | {head['positions'][d]} | {head['alpha'][d]:.3f} | {cells} |")
        timed = "ar_iteration_ms" in table
        extra = " ms / iteration | predicted speedup |" if timed else ""
        lines += [
            "",
            "| tree | nodes | depth | tokens / call, P by depth | tokens / call, first row only "
            "| --trees |" + extra,
            "|---|---|---|---|---|---|" + ("---|---|" if timed else ""),
        ]
        for tr in head["trees"]:
            cells = ""
            if timed:
                mark = " (best)" if tr["name"] == head["best"] else ""
                cells = f" {tr['iteration_ms']:.1f} | {tr['predicted_speedup']:.2f}x{mark} |"
            lines.append(
                f"| {tr['name']} | {tr['nodes']} | {tr['depth']} | {tr['tokens_by_depth']:.3f} "
                f"| {tr['tokens_by_vector']:.3f} | `{tr['tree']}` |" + cells
            )
        if timed:
            lines += ["", f"AR: {table['ar_iteration_ms']:.1f} ms / iteration (token)."]
        lines.append("")
    return "\n".join(lines)
