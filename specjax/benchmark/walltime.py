"""Autoregressive vs speculative walltime, side by side in one run, with the theory's prediction.

For each γ the speculative decoder and the autoregressive baseline generate the same prompts
with the same key policy; they are timed round-robin (drift hits both alike) and the measured
speedup is set next to (a) the paper's formula with the measured α and c and (b) the
measured-cost model with the measured T_target(k) curve.
"""

from __future__ import annotations

import dataclasses

import jax

from specjax import theory
from specjax.benchmark.timing import interleaved
from specjax.decoding.autoregressive import AutoregressiveDecoder
from specjax.decoding.speculative import SpeculativeDecoder
from specjax.decoding.state import summarize_stats


@dataclasses.dataclass(frozen=True)
class WalltimeRow:
    """One γ's measurement.

    Attributes:
      gamma: drafted tokens per iteration.
      ar_ms_per_token: autoregressive median ms per generated token (all rows).
      spec_ms_per_token: speculative median ms per generated token.
      speedup: ar / spec.
      tokens_per_iteration: measured mean tokens per row-iteration as sampled (n + 1, before
        the budget truncates a row's last iteration).
      alpha_empirical: acceptance events / acceptance trials in the speculative run.
      predicted_tokens_per_iteration: (1 - α^{γ+1}) / (1 - α) with the measured α.
      predicted_speedup_paper: the paper's formula with measured α and c.
      predicted_speedup_measured: the measured-cost model with T_target(k) and T_draft.
    """

    gamma: int
    ar_ms_per_token: float
    spec_ms_per_token: float
    speedup: float
    tokens_per_iteration: float
    alpha_empirical: float
    acceptance_by_position: tuple
    predicted_tokens_per_iteration: float
    predicted_speedup_paper: float | None
    predicted_speedup_measured: float | None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def measure_walltime(
    target,
    target_params,
    draft,
    draft_params,
    prompts,
    warper,
    gammas,
    *,
    max_new_tokens: int = 128,
    cache_len: int = 512,
    repeats: int = 5,
    seed: int = 0,
    batch_size: int = 1,
    c: float | None = None,
    t_target: dict | None = None,
    t_draft: float | None = None,
    log=print,
) -> list[WalltimeRow]:
    """Times autoregressive and speculative generation for each γ.

    Args:
      target, target_params, draft, draft_params: the pair.
      prompts: list of token arrays, decoded `batch_size` at a time, one call after another
        (batch 1, as in the paper, by default); times are totals over all of them.
      warper: shared sampling warper.
      gammas: γ values to measure.
      max_new_tokens: tokens per row (no EOS, so every run emits the same count).
      cache_len: cache positions.
      repeats: timed rounds (medians are reported).
      seed: PRNG seed (the same key for every decoder).
      c: measured draft/target step-cost ratio, for the paper's formula (None: skip).
      t_target: {k: seconds} verification cost curve, for the measured-cost model (None: skip).
      t_draft: seconds per draft step, for the measured-cost model.
      log: progress printer.

    Returns:
      One WalltimeRow per γ.
    """
    key = jax.random.PRNGKey(seed)
    batches = [prompts[i : i + batch_size] for i in range(0, len(prompts), batch_size)]
    ar = AutoregressiveDecoder(target, warper, cache_len=cache_len)
    rows = []
    for gamma in gammas:
        spec = SpeculativeDecoder(target, draft, gamma, warper, cache_len=cache_len)
        calls = {
            "ar": lambda: [
                ar.generate(target_params, b, key, max_new_tokens).tokens for b in batches
            ],
            "spec": lambda spec=spec: [
                spec.generate(target_params, draft_params, b, key, max_new_tokens).tokens
                for b in batches
            ],
        }
        timings = interleaved(calls, repeats=repeats)
        summary = summarize_stats(
            [
                spec.generate(target_params, draft_params, b, key, max_new_tokens).stats
                for b in batches
            ]
        )
        emitted = summary["tokens_emitted"]
        ar_ms = timings["ar"].median * 1e3 / emitted
        spec_ms = timings["spec"].median * 1e3 / emitted
        alpha = min(summary["alpha_empirical"], 1.0)
        paper = None if c is None else float(theory.walltime_improvement(alpha, gamma, c))
        measured = None
        if t_target is not None and t_draft is not None and gamma + 1 in t_target:
            measured = float(theory.measured_speedup(alpha, gamma, t_target, t_draft))
        row = WalltimeRow(
            gamma=gamma,
            ar_ms_per_token=ar_ms,
            spec_ms_per_token=spec_ms,
            speedup=ar_ms / spec_ms,
            tokens_per_iteration=summary["sampler_tokens_per_iteration"],
            alpha_empirical=alpha,
            acceptance_by_position=tuple(summary["acceptance_by_position"]),
            predicted_tokens_per_iteration=float(
                theory.expected_tokens_per_iteration(alpha, gamma)
            ),
            predicted_speedup_paper=paper,
            predicted_speedup_measured=measured,
        )
        log(
            f"  gamma={gamma}: AR {ar_ms:.3f} ms/tok, spec {spec_ms:.3f} ms/tok, "
            f"speedup {row.speedup:.2f}x (paper {_fmt(paper)}, measured-cost {_fmt(measured)}); "
            f"tokens/iter {row.tokens_per_iteration:.3f} "
            f"(predicted {row.predicted_tokens_per_iteration:.3f}); alpha {alpha:.3f}"
        )
        rows.append(row)
    return rows


def _fmt(x):
    return "n/a" if x is None else f"{x:.2f}x"
