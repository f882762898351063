"""Is my acceptance rule lossless? `check_acceptance_rule` and `calibrate`.

    from specjax import testing
    report = testing.check_acceptance_rule(my_accept, vocab=5, gammas=(1, 4), draws=2**20)
    print(report); assert report.passed

A rule is any function with `speculative_accept`'s signature and return. For each γ the kit builds
tiny-vocabulary cases (`law.make_case`, fixed seeds) whose p and q depend on the whole prefix, runs
`draws` independent decoders of chained calls (one row each, as a decoder makes them: every call
drafts γ tokens from the draft given the stream so far) and compares the first L = max(3, γ + 1)
emitted tokens with the target's exact law (enumerated):

  * the joint of the L tokens (vocab^L cells): at least three, since a rule can be exact for two
    tokens and wrong from the third (block verification without its b_τ weight is);
  * the marginal of each of the L positions.

Each check is a Pearson chi-square with sparse bins pooled (`stats.pooled_chi2`) and fails below
`threshold` = 1e-6; a token sequence of target probability 0 emitted once fails outright. The run
has k = (cases) x (L + 1) checks, so a lossless rule fails it with probability <= k x 1e-6 (about
1e-4 for the default run; Bonferroni, any dependence): the report states it. Seeds are fixed, so
a run is deterministic.

Cases (kinds of `law.make_case`): "prefix" (Dirichlet(1) p, q per prefix), "position" (p, q depend
on the position only), "flat", "peaked", "sparse" (p and q each on 2 tokens per context: disjoint
or partly overlapping supports), "one_hot_p", "p_equals_q", "deterministic" (drafts are the
argmax of a draft table, `draft_probs=None`), "bf16" (bfloat16 rows that do not sum to 1), and
with `num_drafted=True` "ragged" (num_drafted varies with the context, 0..γ).

`calibrate()` runs the kit on the library's `speculative_accept` and `block_accept` (must pass)
and on the bundled biased rules of `specjax.testing.biased` (must fail) and prints the table.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import jax.numpy as jnp

from specjax import checks
from specjax.testing import law, sampler
from specjax.testing.stats import PVALUE_THRESHOLD, Chi2, check_threshold

KINDS = (
    "prefix",
    "position",
    "flat",
    "peaked",
    "sparse",
    "one_hot_p",
    "p_equals_q",
    "deterministic",
    "bf16",
)


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One chi-square check: `case` (e.g. "sparse_g4"), `check` ("joint" or "tokenK")."""

    case: str
    check: str
    chi2: Chi2
    threshold: float

    @property
    def passed(self) -> bool:
        return self.chi2.pvalue > self.threshold


@dataclasses.dataclass(frozen=True)
class Report:
    """What `check_acceptance_rule` found. `print(report)` shows, per case, the check with the
    smallest p-value (statistic, dof, p-value, threshold, verdict) and the run's false-failure
    bound; `results` holds every check."""

    rule: str
    draws: int
    threshold: float
    results: tuple[CheckResult, ...]
    seconds: float

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)  # no check: no pass

    @property
    def num_checks(self) -> int:
        return len(self.results)

    @property
    def false_failure_rate(self) -> float:
        """Bound on P(a lossless rule fails this run): checks x threshold (Bonferroni)."""
        return self.num_checks * self.threshold

    @property
    def cases(self) -> list[str]:
        return list(dict.fromkeys(r.case for r in self.results))

    def worst(self, case: str) -> CheckResult:
        """The check of `case` with the smallest p-value."""
        return min((r for r in self.results if r.case == case), key=lambda r: r.chi2.pvalue)

    def failed_cases(self) -> list[str]:
        return [c for c in self.cases if not self.worst(c).passed]

    @property
    def min_pvalue(self) -> float:
        return min(r.chi2.pvalue for r in self.results)

    def __str__(self) -> str:
        lines = [
            f"check({self.rule}): {self.draws:,} streams of chained calls per case, "
            f"{self.seconds:.1f} s",
            f"{'case':<18} {'worst check':<11} {'statistic':>11} {'dof':>5} {'p-value':>10} "
            f"{'threshold':>9}  verdict",
        ]
        for case in self.cases:
            r = self.worst(case)
            c = r.chi2
            note = f" ({c.impossible} impossible)" if c.impossible else ""
            lines.append(
                f"{case:<18} {r.check:<11} {c.statistic:>11.1f} {c.dof:>5} {c.pvalue:>10.3g} "
                f"{r.threshold:>9.0e}  {'pass' if r.passed else 'FAIL'}{note}"
            )
        verdict = "LOSSLESS (no check failed)" if self.passed else "NOT LOSSLESS"
        lines.append(
            f"{verdict}: {len(self.failed_cases())}/{len(self.cases)} cases failed; "
            f"{self.num_checks} checks at p < {self.threshold:g}, so a lossless rule fails this "
            f"run with probability <= {self.false_failure_rate:.1e}"
        )
        return "\n".join(lines)


def check_acceptance_rule(
    rule: Callable,
    *,
    vocab: int = 5,
    gammas: Sequence[int] = (1, 4),
    draws: int = sampler.NUM_SAMPLES,
    seed: int = 0,
    kinds: Sequence[str] = KINDS,
    num_drafted: bool = False,
    threshold: float = PVALUE_THRESHOLD,
    params: tuple = (),
    name: str | None = None,
) -> Report:
    """Tests that `rule` emits the target's law over chained calls (see module doc).

    Args:
      rule: `speculative_accept`'s signature: rule(key, draft_tokens [1, γ], draft_probs
        [1, γ, vocab] | None, target_probs [1, γ + 1, vocab], *params[, num_drafted=[1]]) ->
        (tokens int [1, γ + 1], num_accepted int [1]); tokens[0, :n + 1] are emitted.
      vocab: tokens of the toy vocabulary (the joint has vocab^max(3, γ + 1) cells).
      gammas: drafted tokens per call; each γ is its own set of cases.
      draws: independent streams per case (2^20 by default; a power of two >= 2^16, or any
        count below 2^16).
      seed: fixed seed; case i of the run uses seed * 1000 + i.
      kinds: the cases per γ (KINDS, a subset of `law.make_case`'s kinds).
      num_drafted: pass `num_drafted` on every call and add the "ragged" case.
      threshold: a check fails below this p-value.
      params: extra positional (traced) arguments of the rule.
      name: the rule's name in the report.

    Returns:
      `Report`; `report.passed` is the verdict.
    """
    check_threshold(threshold)
    checks.check_count("vocab", vocab, 2)
    checks.check_count("draws", draws)
    if not gammas or not kinds:  # no case: a report of no checks would say "passed"
        raise ValueError(f"gammas and kinds must each name at least one; got {gammas}, {kinds}")
    for gamma in gammas:
        checks.check_count("gammas[...]", gamma)
    kinds = list(kinds) + (["ragged"] if num_drafted and "ragged" not in kinds else [])
    start = time.perf_counter()
    results = []
    index = 0
    for gamma in gammas:
        for kind in kinds:
            case = law.make_case(kind, gamma, vocab=vocab)
            samples = sampler.sample_stream(
                case,
                rule,
                seed=seed * 1000 + index,
                params=params,
                pass_drafted=num_drafted,
                num_samples=draws,
            )
            index += 1
            for check, chi2 in sampler.stream_checks(case, samples).items():
                results.append(CheckResult(case.name, check, chi2, threshold))
    if name is None:
        name = getattr(rule, "__name__", repr(rule))
        if params:
            name += "(" + ", ".join(str(jnp.asarray(p)) for p in params) + ")"
    return Report(name, draws, threshold, tuple(results), time.perf_counter() - start)


@dataclasses.dataclass(frozen=True)
class Calibration:
    """`calibrate`'s result: rows of (rule, must_pass, report)."""

    rows: tuple[tuple[str, bool, Report], ...]

    @property
    def ok(self) -> bool:
        """Every library rule passed and every biased rule failed."""
        return all(report.passed == must_pass for _, must_pass, report in self.rows)

    def __str__(self) -> str:
        lines = [
            f"{'rule':<20} {'expected':<9} {'failed cases':>12} {'min p-value':>11}  verdict",
        ]
        for name, must_pass, report in self.rows:
            failed = f"{len(report.failed_cases())}/{len(report.cases)}"
            verdict = "pass" if report.passed else "FAIL"
            right = "as expected" if report.passed == must_pass else "WRONG"
            lines.append(
                f"{name:<20} {'pass' if must_pass else 'fail':<9} {failed:>12} "
                f"{report.min_pvalue:>11.3g}  {verdict} ({right})"
            )
        checks = sum(r.num_checks for _, ok, r in self.rows if ok)
        threshold = self.rows[0][2].threshold
        lines.append(
            f"{self.rows[0][2].draws:,} streams per case; the library rules' {checks} checks "
            f"fail a lossless rule with probability <= {checks * threshold:.1e}"
        )
        return "\n".join(lines)


def calibrate(
    *,
    vocab: int = 5,
    gammas: Sequence[int] = (1, 4),
    draws: int = sampler.NUM_SAMPLES,
    seed: int = 0,
    kinds: Sequence[str] = KINDS,
    verbose: bool = True,
) -> Calibration:
    """Runs the kit on the library's rules (must pass) and the bundled biased rules (must fail).

    Args are those of `check_acceptance_rule`; every rule is checked with `num_drafted=True`.

    Returns:
      `Calibration`; printed when `verbose`.
    """
    from specjax.decoding import block_accept, speculative_accept
    from specjax.testing.biased import BIASED, biased_accept

    common = dict(vocab=vocab, gammas=gammas, draws=draws, seed=seed, kinds=kinds)
    rows = []
    for name, rule in (("speculative_accept", speculative_accept), ("block_accept", block_accept)):
        rows.append((name, True, check_acceptance_rule(rule, num_drafted=True, **common)))
    for name, variant in BIASED.items():
        report = check_acceptance_rule(
            biased_accept, num_drafted=True, params=(jnp.int32(variant),), name=name, **common
        )
        rows.append((name, False, report))
    calibration = Calibration(tuple(rows))
    if verbose:
        print(calibration)
    return calibration
