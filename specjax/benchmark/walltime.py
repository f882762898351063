"""Autoregressive vs speculative walltime, side by side in one run, with the theory's prediction.

For each γ the speculative decoder and the autoregressive baseline generate the same prompts
with the same key policy; they are timed round-robin (drift hits both alike) and the measured
speedup is set next to three predictions, each from the measured α:
  (a) the paper's formula with the measured c;
  (b) the measured-cost model: the model calls only, T_target(γ+1) + γ T_draft per iteration
      against T_target(1) per token (`theory.measured_speedup`);
  (c) the loop model: whole loop iterations timed in-loop (`costs.iteration_cost`: model calls
      plus sampling, acceptance, bookkeeping) and each call's fixed cost (prefill, dispatch, first
      iteration: a 1-token `generate`), with (1 − α^{γ+1})/(1 − α) tokens per iteration:
        T_ar   = F_ar   + (N − 1) · I_ar
        T_spec = F_spec + (N / E[tokens] − 1) · I_spec,       predicted speedup T_ar / T_spec.
(c) is what the harness checks measurement against; (b) − (c) is what the paper's cost model
leaves out on this hardware. (c) assumes batch 1: with more rows an iteration lasts until the
slowest row is done.
"""

from __future__ import annotations

import dataclasses

import jax

from specjax import checks, theory
from specjax.benchmark.costs import iteration_cost
from specjax.benchmark.timing import coefficient_of_variation
from specjax.benchmark.versus import versus_autoregressive
from specjax.decoding import AutoregressiveDecoder, SpeculativeDecoder, summarize_stats
from specjax.decoding import loop as decoding_loop


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
      acceptance_by_position: P(draft i accepted | tested), per draft position.
      survival_by_position: P(draft i accepted | drafts 1..i-1 accepted), an iteration that
        drafted fewer than i tokens counting as a rejection (`summarize_stats`).
      predicted_tokens_per_iteration: the loop model's tokens per iteration from this run's
        acceptance ((1 - α^{γ+1}) / (1 - α), or the positional model: see `tokens_model`).
      predicted_speedup_paper: the paper's formula with measured α and c.
      predicted_speedup_measured: the measured-cost model with T_target(k) and T_draft.
      ar_iteration_ms, spec_iteration_ms: one loop iteration, timed in-loop (I_ar, I_spec).
      ar_fixed_ms, spec_fixed_ms: one 1-token `generate` call per prompt batch (F_ar, F_spec).
      predicted_speedup_loop: the loop model (c) of the module docstring.
      speedup_low, speedup_high: 95 % interval of the speedup from the paired repeats
        (`timing.ratio_interval`; None with one repeat).
      ar_cv: coefficient of variation of the autoregressive call over the repeats (the
        machine's noise at this size).
      ar_samples, spec_samples: seconds of each timed round (paired: round i of both was timed
        back to back), so the interval can be recomputed from the results alone.
    """

    gamma: int
    ar_ms_per_token: float
    spec_ms_per_token: float
    speedup: float
    tokens_per_iteration: float
    alpha_empirical: float
    acceptance_by_position: tuple
    survival_by_position: tuple
    predicted_tokens_per_iteration: float
    predicted_speedup_paper: float | None
    predicted_speedup_measured: float | None
    ar_iteration_ms: float
    spec_iteration_ms: float
    ar_fixed_ms: float
    spec_fixed_ms: float
    predicted_speedup_loop: float
    speedup_low: float | None = None
    speedup_high: float | None = None
    ar_cv: float | None = None
    ar_samples: tuple = ()
    spec_samples: tuple = ()

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
    iteration_steps: int = 32,
    seed: int = 0,
    batch_size: int = 1,
    c: float | None = None,
    t_target: dict | None = None,
    t_draft: float | None = None,
    make_decoder=None,
    tokens_model: str = "iid",
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
      iteration_steps: loop iterations per timed loop in `iteration_cost`.
      seed: PRNG seed (the same key for every decoder).
      c: measured draft/target step-cost ratio, for the paper's formula (None: skip).
      t_target: {k: seconds} verification cost curve, for the measured-cost model (None: skip).
      t_draft: seconds per draft step, for the measured-cost model.
      make_decoder: gamma -> the speculative decoder to time (any decoder of the loop driver
        taking (target_params, draft_params), e.g. another drafter or acceptance rule); None:
        `SpeculativeDecoder(target, draft, gamma, warper, cache_len=cache_len)`.
      tokens_model: the loop model's tokens per iteration, from this row's acceptance:
        "iid" (the paper's (1 − α^{γ+1})/(1 − α) at the row's α) or "positional"
        (`theory.positional_tokens_per_iteration` at the row's `survival_by_position`, for
        drafts whose acceptance varies along the draft, like prompt lookup, or that draft
        fewer than γ tokens on some iterations).
      log: progress printer.

    Returns:
      One WalltimeRow per γ.
    """
    if tokens_model not in ("iid", "positional"):
        raise ValueError(f"tokens_model must be 'iid' or 'positional', got {tokens_model!r}")
    # Before any timing: an empty gammas returned [] after timing AR; empty prompts or a
    # batch_size < 1 failed with an IndexError.
    gammas = list(gammas)
    if not gammas:
        raise ValueError("gammas must hold at least one γ; got none")
    for i, gamma in enumerate(gammas):
        checks.check_count(f"gammas[{i}]", gamma)
    if len(prompts) == 0:
        raise ValueError("prompts must hold at least one prompt; got none")
    for name, value in (
        ("batch_size", batch_size),
        ("max_new_tokens", max_new_tokens),
        ("repeats", repeats),
        ("iteration_steps", iteration_steps),
    ):
        checks.check_count(name, value)
    key = jax.random.PRNGKey(seed)
    batches = [prompts[i : i + batch_size] for i in range(0, len(prompts), batch_size)]
    ar = AutoregressiveDecoder(target, warper, cache_len=cache_len)
    rows = []
    if make_decoder is None:

        def make_decoder(gamma):
            return SpeculativeDecoder(target, draft, gamma, warper, cache_len=cache_len)

    pair = (target_params, draft_params)

    def run(decoder, params, batch, budget):
        return decoding_loop.generate(decoder, params, batch, key, budget)

    ar_iter = iteration_cost(ar, (target_params,), batches[0], steps=iteration_steps).median
    for gamma in gammas:
        spec = make_decoder(gamma)
        calls = {
            "ar": lambda: [run(ar, (target_params,), b, max_new_tokens) for b in batches],
            "spec": lambda spec=spec: [run(spec, pair, b, max_new_tokens) for b in batches],
        }
        fixed = {  # each call's fixed cost: a 1-token generate, timed in the same rounds
            "ar_fixed": lambda: [run(ar, (target_params,), b, 1).tokens for b in batches],
            "spec_fixed": lambda spec=spec: [run(spec, pair, b, 1).tokens for b in batches],
        }
        v = versus_autoregressive(calls, repeats=repeats, extra=fixed)
        timings = v.timings
        spec_iter = iteration_cost(spec, pair, batches[0], steps=iteration_steps).median
        summary = summarize_stats([r.stats for r in timings["spec"].output])
        ar_ms, spec_ms = v.ms_per_token("ar"), v.ms_per_token("spec")
        alpha = min(summary["alpha_empirical"], 1.0)
        paper = None if c is None else float(theory.walltime_improvement(alpha, gamma, c))
        measured = None
        if t_target is not None and t_draft is not None and gamma + 1 in t_target:
            measured = float(theory.measured_speedup(alpha, gamma, t_target, t_draft))
        if tokens_model == "positional":
            expected = theory.positional_tokens_per_iteration(
                summary["survival_by_position"], gamma
            )
        else:
            expected = float(theory.expected_tokens_per_iteration(alpha, gamma))
        interval = v.interval("spec")
        ar_fixed = timings["ar_fixed"].median / len(batches)
        spec_fixed = timings["spec_fixed"].median / len(batches)
        loop = (ar_fixed + (max_new_tokens - 1) * ar_iter) / (
            spec_fixed + (max_new_tokens / expected - 1) * spec_iter
        )
        row = WalltimeRow(
            gamma=gamma,
            ar_ms_per_token=ar_ms,
            spec_ms_per_token=spec_ms,
            speedup=v.speedup("spec"),
            tokens_per_iteration=summary["sampler_tokens_per_iteration"],
            alpha_empirical=alpha,
            acceptance_by_position=tuple(summary["acceptance_by_position"]),
            survival_by_position=tuple(summary["survival_by_position"]),
            predicted_tokens_per_iteration=expected,
            predicted_speedup_paper=paper,
            predicted_speedup_measured=measured,
            ar_iteration_ms=ar_iter * 1e3,
            spec_iteration_ms=spec_iter * 1e3,
            ar_fixed_ms=ar_fixed * 1e3,
            spec_fixed_ms=spec_fixed * 1e3,
            predicted_speedup_loop=float(loop),
            speedup_low=None if interval is None else interval[0],
            speedup_high=None if interval is None else interval[1],
            ar_cv=coefficient_of_variation(timings["ar"].samples),
            ar_samples=tuple(timings["ar"].samples),
            spec_samples=tuple(timings["spec"].samples),
        )
        log(
            f"  gamma={gamma}: AR {ar_ms:.3f} ms/tok, spec {spec_ms:.3f} ms/tok, "
            f"speedup {row.speedup:.2f}x (95 % CI {_interval(interval)} over {repeats} paired "
            f"rounds; AR CV {row.ar_cv:.1%}) (loop model {loop:.2f}x, paper {_fmt(paper)}, "
            f"model calls {_fmt(measured)}); iteration {spec_iter * 1e3:.3f} ms; "
            f"tokens/iter {row.tokens_per_iteration:.3f} "
            f"(predicted {row.predicted_tokens_per_iteration:.3f}); alpha {alpha:.3f}"
        )
        rows.append(row)
    return rows


def _interval(interval) -> str:
    return "n/a" if interval is None else f"{interval[0]:.2f}-{interval[1]:.2f}"


def _fmt(x):
    return "n/a" if x is None else f"{x:.2f}x"
