"""EAGLE heads in the xla and the packed layout on a real target: what a draft step costs.

A head trains in the xla layout; `EagleHead.with_matmul(params, "packed")` lays the same head
out for specjax's CPU kernels (`models/packed.py`). This part decodes the prompts with both, at
batch 1, for an EAGLE-1 head (full vocabulary, the target's output layer) and an EAGLE-3 head
over a reduced draft vocabulary of the trained heads' size, as a chain and as dynamic trees, and
times them round-robin against autoregressive decoding of the same prompts.

By default the heads have random weights: the time of an iteration does not depend on what a
head learned, only the number of iterations does, and an untrained head's drafts are all
rejected (one token per iteration, the same tokens as AR at t = 0). So the per-iteration cost is
measured, and the speedup a trained head gets follows from it and its tokens per iteration:
speedup = tokens per iteration x (AR ms per token) / (ms per iteration). The break-even column
is the tokens per iteration a head needs to match AR. Given trained heads (`heads=`), the same
table measures their tokens per iteration and speedup in both layouts directly.
"""

from __future__ import annotations

import jax
import numpy as np

from specjax.benchmark.timing import interleaved, ratio_interval
from specjax.decoding import (
    AutoregressiveDecoder,
    SpeculativeDecoder,
    TreeSpeculativeDecoder,
    loop,
    make_warper,
)
from specjax.models.eagle_head import EagleHead, eagle3_layers


def _heads(target, draft_vocab: int) -> dict:
    """name -> (xla head, its random params) for EAGLE-1 and EAGLE-3 over `draft_vocab` ids."""
    key = jax.random.PRNGKey(0)
    eagle1 = EagleHead(target)
    ids = tuple(range(min(draft_vocab, target.vocab_size)))
    depth = target.config.num_layers
    # A target too shallow for EAGLE-3's three distinct blocks (a test model) gives all of its.
    layers = eagle3_layers(depth) if depth >= 7 else tuple(range(min(depth, 3)))
    eagle3 = EagleHead(target, draft_ids=ids, feature_layers=layers)
    return {
        "EAGLE-1": (eagle1, eagle1.init_params(key)),
        f"EAGLE-3 over {len(ids)} tokens": (eagle3, eagle3.init_params(key)),
    }


def _decoder(target, head, structure, warper, cache_len: int):
    if isinstance(structure, int):
        return SpeculativeDecoder(target, head, structure, warper, cache_len=cache_len)
    return TreeSpeculativeDecoder(target, head, structure, warper, cache_len=cache_len)


def _name(structure) -> str:
    if isinstance(structure, int):
        return f"chain γ={structure}"
    return f"dynamic tree {structure.depth}-{structure.top_k}-{structure.num_nodes}"


def head_layout_table(
    target,
    target_params,
    prompt_ids,
    *,
    gamma: int = 3,
    dynamic=(),
    draft_vocab: int = 8192,
    heads: dict | None = None,
    temperature: float = 0.0,
    max_new_tokens: int = 32,
    rounds: int = 7,
    cache_len: int = 512,
) -> dict:
    """Per head kind and draft structure: generation time with the xla head and the packed head.

    Args:
      target, target_params: the target (any layout; the packed one is what the CPU decodes in).
      prompt_ids: token id arrays, each decoded alone (batch 1) in every timed run.
      gamma: the chain's drafted tokens.
      dynamic: `DynamicTree`s the heads also draft.
      draft_vocab: the random EAGLE-3 head's draft vocabulary size.
      heads: None (random EAGLE-1 and EAGLE-3 heads), or name -> (an `EagleHead` in the xla
        layout, its trained params), e.g. from `training.head_run.load_head`.
      temperature: the warper's (0: greedy, where both heads' tokens must equal AR's).
      max_new_tokens: tokens per prompt (no EOS).
      rounds: timed rounds (`interleaved`, rotated, one warm-up round).
      cache_len: positions per row.

    Returns:
      {"ar_ms_per_token", "rows": [{"head", "structure", "xla_ms", "packed_ms" (per
      iteration), "ratio" (packed / xla time), "interval" (its 95 %), "iterations" (the xla
      head's), "packed_iterations", "same_tokens"
      (the two layouts, and AR's at t = 0), "break_even_xla", "break_even_packed",
      "tokens_per_iteration" (the xla head's), "speedup_xla", "speedup_packed" (AR time /
      decoder time, medians) with "speedup_xla_interval", "speedup_packed_interval"}]}.
    """
    if heads is None:
        heads = _heads(target, draft_vocab)
    for name, (head, _) in heads.items():
        if not isinstance(head, EagleHead) or head.packed:
            raise ValueError(
                f"heads[{name!r}] must be an EagleHead in the xla layout, got {head!r}"
            )
    warper = make_warper(temperature)
    key = jax.random.PRNGKey(1)
    ar = AutoregressiveDecoder(target, warper, cache_len=cache_len)

    def runner(decoder, params):
        prepared = [decoder.prepare([ids], max_new_tokens) for ids in prompt_ids]
        return lambda: [
            loop.generate_jit(decoder, params, tok, lens, key, max_new_tokens, -1)
            for tok, lens in prepared
        ]

    calls = {"AR": runner(ar, (target_params,))}
    cases = []
    for head_name, (head, head_params) in heads.items():
        packed, packed_params = head.with_matmul(head_params, "packed")
        for structure in (gamma, *dynamic):
            label = (head_name, _name(structure))
            for layout, (h, p) in {
                "xla": (head, head_params),
                "packed": (packed, packed_params),
            }.items():
                decoder = _decoder(target, h, structure, warper, cache_len)
                calls[(*label, layout)] = runner(decoder, (target_params, p))
            cases.append(label)
    timed = interleaved(calls, repeats=rounds, warmup=1, rotate=True)
    tokens = len(prompt_ids) * max_new_tokens
    ar_ms = timed["AR"].median / tokens * 1e3
    ar_out = [np.asarray(o.tokens) for o in timed["AR"].output]
    rows = []
    for label in cases:
        xla, packed = timed[(*label, "xla")], timed[(*label, "packed")]
        outs = {lay: timed[(*label, lay)].output for lay in ("xla", "packed")}
        # Each layout's own count: at t > 0 rounding may change a draw, and so the iterations.
        iterations = {
            lay: int(sum(int(np.asarray(o.stats.iterations).sum()) for o in out))
            for lay, out in outs.items()
        }
        same = all(
            np.array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
            for a, b in zip(outs["xla"], outs["packed"], strict=True)
        )
        if temperature == 0:
            same = same and all(
                np.array_equal(np.asarray(a.tokens), b)
                for a, b in zip(outs["packed"], ar_out, strict=True)
            )
        xla_ms = xla.median / iterations["xla"] * 1e3
        packed_ms = packed.median / iterations["packed"] * 1e3
        rows.append(
            {
                "head": label[0],
                "structure": label[1],
                "xla_ms": xla_ms,
                "packed_ms": packed_ms,
                "ratio": packed.median / xla.median,
                "interval": ratio_interval(packed.samples, xla.samples),
                "iterations": iterations["xla"],
                "packed_iterations": iterations["packed"],
                "same_tokens": same,
                "break_even_xla": xla_ms / ar_ms,
                "break_even_packed": packed_ms / ar_ms,
                "tokens_per_iteration": tokens / iterations["xla"],
                "speedup_xla": timed["AR"].median / xla.median,
                "speedup_packed": timed["AR"].median / packed.median,
                "speedup_xla_interval": ratio_interval(timed["AR"].samples, xla.samples),
                "speedup_packed_interval": ratio_interval(timed["AR"].samples, packed.samples),
            }
        )
    return {"ar_ms_per_token": ar_ms, "rows": rows}


def _interval(interval) -> str:
    """ "(low-high)", or "(-)" where too few samples gave none."""
    return "(-)" if interval is None else f"({interval[0]:.3f}-{interval[1]:.3f})"


def _iterations(row: dict) -> str:
    """ "n", or "n / m" where the packed head took m iterations to the xla head's n."""
    n, m = row["iterations"], row.get("packed_iterations", row["iterations"])
    return f"{n}" if n == m else f"{n} / {m}"


def format_head_layout(table: dict, temperature: float) -> str:
    """The table as markdown."""
    lines = [
        f"t {temperature:g}; AR {table['ar_ms_per_token']:.2f} ms/token; ms per iteration; "
        "break-even: the tokens per iteration a head needs to match AR",
        "",
        "| head | draft | xla ms | packed ms | packed / xla (95 %) | break-even xla → packed "
        "| iterations | tokens / iteration | speedup vs AR, xla | speedup vs AR, packed "
        "| same tokens |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table["rows"]:
        lines.append(
            f"| {r['head']} | {r['structure']} | {r['xla_ms']:.2f} | {r['packed_ms']:.2f} | "
            f"{r['ratio']:.3f} {_interval(r['interval'])} | {r['break_even_xla']:.2f} → "
            f"{r['break_even_packed']:.2f} | {_iterations(r)} | "
            f"{r['tokens_per_iteration']:.2f} | "
            f"{r['speedup_xla']:.2f}x {_interval(r['speedup_xla_interval'])} | "
            f"{r['speedup_packed']:.2f}x {_interval(r['speedup_packed_interval'])} | "
            f"{r['same_tokens']} |"
        )
    return "\n".join(lines)
