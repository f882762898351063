"""A draft's γ steps as a loop or unrolled (`unroll_draft`), on a real target: speed and compile.

`specjax/decoding/drafters/model.py`'s `default_unroll` keeps the steps a loop on CPU and
unrolls them on an accelerator (for a draft with a KV cache), from measurements on a CPU only.
This part measures both on the device it runs on, for three drafters of the target: its first K
layers (`ModelDrafter`), the same under a γ policy (`AdaptiveDrafter`) and an EAGLE-1 head with
random weights (`EagleDrafter`; the speed of a call does not depend on what the head learned,
only the number of iterations does, and both variants draw the same tokens).
"""

from __future__ import annotations

import time

import jax
import numpy as np

from specjax.benchmark.timing import interleaved, ratio_interval
from specjax.decoding import HeuristicGamma, SpeculativeDecoder, loop, make_warper
from specjax.decoding.drafters.eagle import EagleDrafter
from specjax.models.build import truncated
from specjax.models.eagle_head import EagleHead


def _builders(target, target_params, gamma: int, layers: int, cache_len: int) -> dict:
    """name -> (make(unroll, warper) -> decoder, draft params)."""
    draft, draft_params = truncated(target, target_params, layers)
    head = EagleHead(target)
    head, head_params = head.with_matmul(
        head.init_params(jax.random.PRNGKey(0)), target.config.matmul
    )

    def chain(unroll, warper, policy=None):
        return SpeculativeDecoder(
            target, draft, gamma, warper, cache_len=cache_len, unroll_draft=unroll,
            gamma_policy=policy,
        )  # fmt: skip

    def eagle(unroll, warper):
        drafter = EagleDrafter(head, warper, unroll=unroll)
        return SpeculativeDecoder(target, drafter, gamma, warper, cache_len=cache_len)

    return {
        f"first {layers} layers": (chain, draft_params),
        f"first {layers} layers, HeuristicGamma": (
            lambda u, w: chain(u, w, HeuristicGamma()),
            draft_params,
        ),
        "EAGLE-1 head (random weights)": (eagle, head_params),
    }


def _compile_seconds(decoder, params, tokens, lengths) -> float:
    start = time.perf_counter()
    loop.generate_jit.lower(
        decoder, params, tokens, lengths, jax.random.PRNGKey(0), 8, -1
    ).compile()
    return time.perf_counter() - start


def unroll_table(
    target,
    target_params,
    prompt_ids,
    *,
    gamma: int = 4,
    temperature: float = 0.0,
    layers: int = 4,
    max_new_tokens: int = 64,
    rounds: int = 7,
    compile_rounds: int = 4,
    cache_len: int = 512,
) -> list[dict]:
    """Rolled / unrolled draft steps per drafter: generation time and compile time.

    Speed: the prompts (token id arrays) as one ragged batch, both variants timed round-robin
    (`interleaved`, rotated), the ratio's 95 % interval from paired rounds; the outputs are
    compared token for token. Compile: after a warm-up program (which traces the models at these
    shapes), `compile_rounds` rounds alternate which variant compiles first; round r compiles
    both at temperature 0.5 + 0.1 r, a new program each. JAX's persistent compilation cache is
    switched off (as in `speed.compile_seconds`), so a second run of this part compiles anew.

    Returns:
      rows: {"draft", "rolled_s", "unrolled_s", "ratio", "interval", "same_tokens",
      "compile_rolled_s", "compile_unrolled_s", "compile_ratio"}; ratios are rolled / unrolled.
    """
    jax.config.update("jax_enable_compilation_cache", False)
    rows = []
    for name, (make, draft_params) in _builders(
        target, target_params, gamma, layers, cache_len
    ).items():
        params = (target_params, draft_params)
        warper = make_warper(temperature)
        decoders = {u: make(u, warper) for u in (False, True)}
        tokens, lengths = decoders[False].prepare(list(prompt_ids), max_new_tokens)
        args = (params, tokens, lengths, jax.random.PRNGKey(1), max_new_tokens, -1)
        calls = {u: (lambda d=d, a=args: loop.generate_jit(d, *a)) for u, d in decoders.items()}
        timed = interleaved(calls, repeats=rounds, warmup=1, rotate=True)
        leaves = [jax.tree.leaves(timed[u].output) for u in (False, True)]
        same = all(np.array_equal(a, b) for a, b in zip(*leaves, strict=True))
        compiled = {False: [], True: []}
        _compile_seconds(make(None, make_warper(0.3)), params, tokens, lengths)  # warm-up
        for r in range(compile_rounds):
            for u in (False, True) if r % 2 else (True, False):
                decoder = make(u, make_warper(0.5 + 0.1 * r))
                compiled[u].append(_compile_seconds(decoder, params, tokens, lengths))
        rolled, unrolled = timed[False].median, timed[True].median
        c_rolled, c_unrolled = (float(np.median(compiled[u])) for u in (False, True))
        rows.append(
            {
                "draft": name,
                "rolled_s": rolled,
                "unrolled_s": unrolled,
                "ratio": rolled / unrolled,
                "interval": ratio_interval(timed[False].samples, timed[True].samples),
                "same_tokens": same,
                "compile_rolled_s": c_rolled,
                "compile_unrolled_s": c_unrolled,
                "compile_ratio": c_rolled / c_unrolled,
            }
        )
    return rows


def format_unroll(rows: list[dict], gamma: int, temperature: float) -> str:
    """The table as markdown."""
    lines = [
        f"γ {gamma}, t {temperature:g}; ratios are loop / unrolled (below 1: the loop is faster)",
        "",
        "| draft | loop s | unrolled s | ratio (95 %) | same tokens | compile loop / unrolled s "
        "| compile ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        low, high = r["interval"] or (float("nan"), float("nan"))
        lines.append(
            f"| {r['draft']} | {r['rolled_s']:.3f} | {r['unrolled_s']:.3f} | {r['ratio']:.3f} "
            f"({low:.3f}–{high:.3f}) | {r['same_tokens']} | {r['compile_rolled_s']:.2f} / "
            f"{r['compile_unrolled_s']:.2f} | {r['compile_ratio']:.2f} |"
        )
    return "\n".join(lines)
