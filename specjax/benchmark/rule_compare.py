"""Acceptance rules side by side on one pair: tokens per target call and walltime, one run.

    rows = compare_rules(target, tp, draft, dp, prompts, make_warper(1.0), gamma=4,
                         rules={"tokenwise": speculative_accept, "block": block_accept})

For one γ, every rule's `SpeculativeDecoder` and the autoregressive decoder are timed
round-robin (`versus.versus_autoregressive`: drift hits all alike) on the prompts at batch 1, one
call after another, so the speedups are ratios from the same run. Tokens per call (1 + accepted
drafts per iteration, before truncation at max_new_tokens) come from one batched run over
`stat_prompts` per rule with the same key, as many rows as wanted, so a few-percent difference
between rules is resolved without timing a large batch. Each rule's `lossless` marker
(`rules.is_lossless`) is recorded beside its numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax

from specjax.benchmark.versus import versus_autoregressive
from specjax.decoding import AutoregressiveDecoder, SpeculativeDecoder, summarize_stats
from specjax.decoding import loop as decoding_loop
from specjax.decoding.rules import is_lossless


@dataclasses.dataclass(frozen=True)
class RuleRow:
    """One rule at one γ. Times are medians over the repeats; speedup = AR / spec ms per token
    with its 95 % interval (None with fewer than 2 repeats)."""

    rule: str
    gamma: int
    lossless: bool | None
    tokens_per_call: float
    alpha: float
    ar_ms_per_token: float
    spec_ms_per_token: float
    speedup: float
    speedup_low: float | None
    speedup_high: float | None
    # The counts behind tokens_per_call and alpha (the statistics batch), to recompute them.
    accepted: int | None = None
    tested: int | None = None
    row_iterations: int | None = None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def compare_rules(
    target,
    target_params,
    draft,
    draft_params,
    prompts,
    warper,
    gamma: int,
    rules: dict[str, Callable],
    *,
    stat_prompts=None,
    max_new_tokens: int = 64,
    cache_len: int = 256,
    repeats: int = 5,
    seed: int = 0,
) -> list[RuleRow]:
    """Times AR and each rule's decoder at `gamma`; tokens per call from a batched run.

    Args:
      target, target_params, draft, draft_params: the pair.
      prompts: token arrays timed at batch 1 (times are totals over them).
      warper: shared sampling warper.
      gamma: drafted tokens per call.
      rules: name -> acceptance rule (`speculative_accept`'s signature).
      stat_prompts: int [rows, P] prompts of one batched run per rule for tokens per call
        (None: the timed prompts, one batch).
      max_new_tokens: tokens per row (no EOS).
      cache_len: cache positions.
      repeats: timed rounds.
      seed: the key of every run.

    Returns:
      One RuleRow per rule, in `rules` order.
    """
    if not rules:
        raise ValueError("rules must name at least one acceptance rule")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1; got {repeats}")
    key = jax.random.key(seed)
    ar = AutoregressiveDecoder(target, warper, cache_len=cache_len)
    pair = (target_params, draft_params)
    decoders = {
        name: SpeculativeDecoder(target, draft, gamma, warper, cache_len=cache_len, accept=rule)
        for name, rule in rules.items()
    }

    def timed(decoder, params):
        return lambda: [
            decoding_loop.generate(decoder, params, [p], key, max_new_tokens) for p in prompts
        ]

    calls = {"ar": timed(ar, (target_params,))}
    calls.update({name: timed(d, pair) for name, d in decoders.items()})
    v = versus_autoregressive(calls, repeats=repeats)
    ar_ms = v.ms_per_token("ar")
    batch = list(prompts) if stat_prompts is None else stat_prompts
    rows = []
    for name, decoder in decoders.items():
        stats = decoding_loop.generate(decoder, pair, batch, key, max_new_tokens).stats
        summary = summarize_stats([stats])
        spec_ms = v.ms_per_token(name)
        interval = v.interval(name)
        rows.append(
            RuleRow(
                rule=name,
                gamma=gamma,
                lossless=is_lossless(rules[name]),
                tokens_per_call=float(summary["sampler_tokens_per_iteration"]),
                alpha=float(summary["alpha_empirical"]),
                ar_ms_per_token=ar_ms,
                spec_ms_per_token=spec_ms,
                speedup=ar_ms / spec_ms,
                speedup_low=None if interval is None else interval[0],
                speedup_high=None if interval is None else interval[1],
                accepted=summary["accepted"],
                tested=summary["tested"],
                row_iterations=summary["row_iterations"],
            )
        )
    return rows
