"""Generate mode: the report printed and written to generate.json.

`format_report` renders the result dict as terminal text: the continuations of both decoders,
their statistics, the speedup and, when speculation was not faster, why
(`experiments/common/pair.py`).
"""

from __future__ import annotations

from experiments.common import pair
from specjax.decoding import (
    Greedy,
    Temperature,
    TopK,
    TopP,
)
from specjax.models import TransformerLM


def describe_warper(warper) -> str:
    """ "greedy" or e.g. "sampling: temperature 0.8, top-k 20, top-p 0.95"."""
    if warper.is_greedy:
        return "greedy"
    temperature, parts = 1.0, []
    for w in warper.warpers:
        if isinstance(w, Temperature):
            temperature = w.temperature
        elif isinstance(w, TopK):
            parts.append(f"top-k {w.top_k}")
        elif isinstance(w, TopP):
            parts.append(f"top-p {w.top_p:g}")
        elif not isinstance(w, Greedy):
            parts.append(type(w).__name__)
    return "sampling: " + ", ".join([f"temperature {temperature:g}"] + parts)


def format_count(n: int) -> str:
    """1234 -> "1.2K", 25_600_000 -> "25.6M" (params of tiny and large models alike)."""
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.1f}{suffix}"
    return str(int(n))


def decoder_report(result, tokenizer, first_call_s: float, versus, name: str) -> dict:
    new = result.new_tokens()
    report = {
        "continuations": [tokenizer.decode(row, stop_at_eos=True) for row in new],
        "new_tokens": [row.tolist() for row in new],
        "first_call_s": first_call_s,
        "median_s": versus.timings[name].median,
        "ms_per_token": versus.ms_per_token(name),
        "stats": result.summary(),
    }
    return report


def describe_model(model) -> str:
    if isinstance(model, TransformerLM):
        c = model.config
        family = "gpt2" if c.positions == "learned" else "llama"
        return f"{family} d={c.embed_dim} L={c.num_layers} ({format_count(c.num_params())} params)"
    return type(model).__name__


def draft_description(config, draft, weights: dict) -> str:
    if draft is None:
        return "none (autoregressive only)"
    kind = config.draft_kind
    if kind == "self":
        return "self (the target itself: α = 1, at the cost of a target call per draft)"
    text = f"{kind}: {describe_model(draft[0])}"
    if kind == "transformer":
        text += ", " + weights_origin(weights, "draft")
    elif kind in ("bigram", "unigram"):
        text += f" fitted on {config.ngram.max_tokens:,} {config.ngram.corpus} tokens"
    return text


def weights_origin(weights: dict, name: str) -> str:
    if weights.get(name) is None:
        return "random weights"
    if weights.get("trained"):
        return "trained (the tiny pipeline's " + (
            "distilled draft)" if name == "draft" else "target)"
        )
    return f"from {weights[name]}"


def _shape(result: dict) -> str:
    if result.get("speculative") is None:
        return "autoregressive only"
    tree = result.get("tree")
    if tree is None:
        accept = result.get("accept", "tokenwise")
        policy = result.get("gamma_policy", "fixed")
        text = f"gamma={result['gamma']}" + ("" if policy == "fixed" else f" (max, {policy})")
        lossy = (
            "" if result.get("lossless", True) else " (LOSSY: output does not follow the target)"
        )
        return text + ("" if accept == "tokenwise" else f", {accept}") + lossy
    rule = "with" if tree["replacement"] else "without"
    return f"tree of {tree['nodes']} nodes, depth {tree['depth']} (siblings {rule} replacement)"


def format_report(result: dict) -> str:
    """Renders the result dict as terminal text."""
    ar, spec = result["autoregressive"], result["speculative"]
    out = [
        f"Generate: target {result['target']}",
        f"          draft  {result['draft']}",
        f"          {_shape(result)}; {result['warper']}; up to {result['max_new_tokens']} new "
        f"tokens per prompt",
    ]
    if result.get("note"):
        out.append(result["note"])
    elif result.get("trained") and result["warper"] == "greedy":
        out.append(
            "(the tiny pipeline's models train for minutes: their greedy text repeats itself; "
            "--config.temperature=0.8 samples code-like text, at a smaller speedup)"
        )
    out.append("")
    for i, prompt in enumerate(result["prompts"]):
        out.append(f"[{i}] prompt:         {prompt!r}")
        out.append(f"    autoregressive: {ar['continuations'][i]!r}")
        if spec is not None:
            out.append(f"    speculative:    {spec['continuations'][i]!r}")
    out += [
        "",
        "decoder          ms/token  first call (s)  target calls  tokens/iter  alpha",
        f"autoregressive  {ar['ms_per_token']:9.3f}  {ar['first_call_s']:14.2f}  "
        f"{ar['stats']['target_calls']:12d}  {ar['stats']['tokens_per_iteration']:11.3f}      -",
    ]
    if spec is not None:
        s = spec["stats"]
        out.append(
            f"speculative     {spec['ms_per_token']:9.3f}  {spec['first_call_s']:14.2f}  "
            f"{s['target_calls']:12d}  {s['tokens_per_iteration']:11.3f}  "
            f"{s['alpha_empirical']:.3f}"
        )
        by_position = ", ".join(f"{a:.3f}" for a in s["acceptance_by_position"])
        what = "depth" if result.get("tree") else "draft position"
        out += [
            "",
            f"speedup (AR ms/token / speculative ms/token): {result['speedup']:.3f}x",
            f"acceptance rate by {what}: [{by_position}]",
        ]
        if "mean_gamma" in s:
            out.append(
                f"adaptive γ: mean {s['mean_gamma']:.2f}, histogram {s['drafted_histogram']}"
            )
        if "accepted_rank_by_depth" in s:
            ranks = ", ".join(f"{a:.3f}" for a in s["accepted_rank_by_depth"][0])
            out.append(f"acceptance by sibling rank at depth 1: [{ranks}]")
        if result["greedy_identical"] is not None:
            out.append(f"greedy outputs identical: {result['greedy_identical']}")
        else:
            out.append(
                "the two texts differ: at temperature > 0 both decoders sample the target's "
                "distribution with different random draws (only greedy output is token-identical)"
            )
        if len(result["prompts"]) > 1:
            out.append(
                f"target calls: one per loop iteration of the whole batch ({len(result['prompts'])}"
                " rows decoded together), so the slowest row sets them; tokens/iter is the mean "
                "per row and iteration, so target calls >= new tokens of a row / tokens/iter"
            )
        why = _why_no_speedup(result)
        if why:
            out.append(why)
    return "\n".join(out)


def _why_no_speedup(result: dict) -> str | None:
    """One line on why the speculative decoder was not faster, when it was not."""
    spec = result.get("speculative")
    return pair.why_no_speedup(
        result["speedup"],
        0.0 if spec is None else spec["stats"]["alpha_empirical"],
        random_weights=bool(result.get("random_weights")),
        self_draft="draft=self" if result.get("draft_kind") == "self" else None,
    )
