"""A randomized losslessness audit: `check_decoder` on decoder configurations drawn at random.

    from specjax.testing import audit
    result = audit.run(runs=40, seed=0)          # 40 random configurations, 2^16 rows each
    print(result); assert result.passed
    audit.replay(result.failures[0].spec, seed=result.failures[0].seed)  # one run, exactly

    python scripts/audit_decoders.py --runs=40 --seed=0 --out=/tmp/audit.jsonl

The suite checks each decoder on a few hand-picked configurations. A bug that shows only at
some γ, tree shape, warper, EOS or ragged batch passes those. The audit draws configurations
the suite does not pin down, each from one *family* (a kind of decoder):

  * `chain`: `SpeculativeDecoder`, token-wise or block rule, γ 1-5.
  * `adaptive`: the same under a γ policy (heuristic, confidence, theory, positional), static
    or "auto" verification widths.
  * `tree`: `TreeSpeculativeDecoder` on a random breadth-first topology (depth <= 4, <= 9
    nodes), siblings with or without replacement, children sampled or top-k.
  * `lookup`: prompt lookup as the draft (alone or under a γ policy); `lookup_tree`: a
    `LookupTreeDrafter` tree.
  * `hierarchy`: a speculative decoder as the draft of another, each level its own rule.
  * `eagle`: an untrained EAGLE-1 or EAGLE-3 head on a tiny Llama target: chain (optionally
    under a γ policy), static tree, or EAGLE-2 dynamic tree; optionally a reduced draft vocabulary.
  * `medusa`: Medusa heads on the same target, chain or tree, optionally a reduced vocabulary.
  * `sharded`: any of the above run by `ShardedDecoder`, its rows split over 1, 2 or 4 devices
    (as many as the process has: `scripts/audit_decoders.py` asks XLA:CPU for 4).
  * `beam`: speculative beam search (a chain or a random top-k tree below every beam) must
    return plain beam search's hypotheses (`audit_beam`: an equality check, not a law).

Every configuration also draws its tiny models (vocab 4-7; bigram tables of random
concentration and draft-target mix, or a random tiny Llama), its warper (temperature 0.5-1.3,
sometimes top-k or top-p), an EOS token in about a third of runs, and one to three ragged
prompts, side by side in every call (`mixed`) in about half of the runs with several.

A configuration is a `Spec`: a family name and plain JSON knobs. `sample(family, rng)` draws
one and `build(spec)` turns it into a decoder and params, so a failure in a report can be
rebuilt, and `replay` rechecked exactly, from its JSON (`AuditRun.to_record`). New decoder kinds
join through `registry=`: a copy of `FAMILIES` with a `Family(sample, build)` added.

Statistics: each run is `check_decoder` at the threshold 1e-6 per check, with k = prompts x
(L + 1) + 1 checks (L = max(3, tokens per step)). A run of `runs` lossless configurations fails
with probability <= sum of k x 1e-6 (Bonferroni): `AuditResult.false_failure_rate`, 7.4e-4 for
the 80 runs of seed 2026 (the beam family's equality checks count 1e-6 each too, though they
are deterministic). Runs whose target law is nearly deterministic (top-k = 1, a narrow top-p)
carry little statistical signal; their greedy and zero-probability checks still count.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence

import jax
import numpy as np

from specjax.testing.audit_beam import BEAM
from specjax.testing.audit_families import (
    LAW_FAMILIES,
    POLICIES,
    SHARDED_INNER,
    Case,
    Family,
    Spec,
)
from specjax.testing.decoder import DEFAULT_DRAWS, check_decoder
from specjax.testing.kit import Report

__all__ = [
    "FAMILIES", "LAW_FAMILIES", "POLICIES", "SHARDED_INNER", "AuditResult", "AuditRun",
    "Case", "Family", "Spec", "build", "replay", "run", "sample", "specs",
]  # fmt: skip

# Every decoder kind the audit draws: the law families, then beam search (an equality check).
FAMILIES: dict[str, Family] = {**LAW_FAMILIES, "beam": BEAM}

HEADER = f"{'#':>3s} {'family':12s} {'min p':>9s} {'checks':>6s} {'s':>6s}  knobs"


@dataclasses.dataclass(frozen=True)
class AuditRun:
    """One configuration's spec and its `check_decoder` report."""

    spec: Spec
    report: Report
    seed: int  # check_decoder's seed: `replay(spec, seed=seed)` repeats the run exactly

    def to_record(self) -> dict:
        """The run as plain JSON: spec, check seed, draws, min p-value, checks and verdict."""
        rep = self.report
        return {
            "family": self.spec.family, "knobs": self.spec.knobs, "seed": self.seed,
            "draws": rep.draws, "min_pvalue": rep.min_pvalue, "checks": rep.num_checks,
            "passed": rep.passed,
        }  # fmt: skip

    def row(self, index: int) -> str:
        """One line of the audit's table (`HEADER`'s columns)."""
        rep = self.report
        verdict = "" if rep.passed else "  FAILED " + ", ".join(rep.failed_cases())
        knobs = json.dumps(self.spec.knobs, sort_keys=True)
        return (
            f"{index:3d} {self.spec.family:12s} {rep.min_pvalue:9.2e} {rep.num_checks:6d} "
            f"{rep.seconds:6.1f}  {knobs}{verdict}"
        )


@dataclasses.dataclass(frozen=True)
class AuditResult:
    """Every run's spec and report. `print(result)` shows one row per run."""

    runs: tuple[AuditRun, ...]

    @property
    def passed(self) -> bool:
        return all(r.report.passed for r in self.runs)

    @property
    def failures(self) -> list[AuditRun]:
        return [r for r in self.runs if not r.report.passed]

    @property
    def false_failure_rate(self) -> float:
        """Bonferroni bound on the chance that a lossless audit reports a failure."""
        return float(sum(r.report.false_failure_rate for r in self.runs))

    def __str__(self) -> str:
        lines = [HEADER] + [r.row(i) for i, r in enumerate(self.runs)]
        lines.append(
            f"{len(self.runs)} runs, {len(self.failures)} failed; a lossless audit fails with "
            f"probability <= {self.false_failure_rate:.1e}"
        )
        return "\n".join(lines)


def _family(name: str, families: dict) -> Family:
    if name not in families:
        raise ValueError(f"family: unknown {name!r}; one of {sorted(families)}")
    return families[name]


def sample(family: str, rng: np.random.Generator, families: dict | None = None) -> Spec:
    """A random configuration of `family` (knobs only: nothing is built or compiled)."""
    return Spec(family, _family(family, families or FAMILIES).sample(rng))


def build(spec: Spec, families: dict | None = None) -> Case:
    """The decoder and params of `spec` (e.g. a failure's, read back with `Spec.from_json`)."""
    return _family(spec.family, families or FAMILIES).build(dict(spec.knobs))


def specs(runs: int, seed: int = 0, families: Sequence[str] | None = None, registry=None):
    """`runs` configurations, round-robin over `families` (default: all), from one seed."""
    registry = registry or FAMILIES
    names = list(families) if families else list(registry)
    if runs < 1:
        raise ValueError(f"runs must be >= 1; got {runs}")
    rng = np.random.default_rng(seed)
    return [sample(names[i % len(names)], rng, registry) for i in range(runs)]


def run(
    runs: int = 40,
    *,
    seed: int = 0,
    draws: int = DEFAULT_DRAWS // 4,
    families: Sequence[str] | None = None,
    registry: dict | None = None,
    batch: int = 4096,
    greedy: bool = True,
    log: Callable[[str], None] | None = None,
) -> AuditResult:
    """Draws `runs` configurations (`specs`) and checks each with `check_decoder`.

    Args:
      runs: configurations checked.
      seed: the seed of the configurations (and of every check: run i uses seed * 1000 + i).
      draws: rows per prompt (2^16 by default: a bias of a few per cent in one cell shows).
      families: names in `registry` to draw from (default: all of them, round-robin).
      registry: {name: Family}; default `FAMILIES` (add your own decoder kinds to a copy).
      batch: rows per `generate` call.
      greedy: also check each decoder at temperature 0 against autoregressive decoding.
      log: called with one line per finished run (e.g. `print`).

    Returns:
      `AuditResult`; `.passed` is the verdict, `.failures` the failing specs and reports.
    """
    out = []
    for i, spec in enumerate(specs(runs, seed, families, registry)):
        out.append(_check(spec, seed * 1000 + i, draws, batch, greedy, registry))
        if log is not None:
            log(out[-1].row(i))
        # Every run compiles its own programs (its own models and shapes), and XLA:CPU keeps
        # each one's code in memory mappings: kept, a 100-run audit passes Linux's default
        # vm.max_map_count and LLVM fails to allocate, then segfaults (measured: the 91st run
        # of --runs=100 --seed=11). So each run's programs are dropped after it.
        jax.clear_caches()
    return AuditResult(tuple(out))


def replay(
    spec: Spec, *, seed: int = 0, draws: int = DEFAULT_DRAWS // 4, batch: int = 4096,
    greedy: bool = True, registry: dict | None = None,
) -> AuditResult:  # fmt: skip
    """One configuration checked again: with a run's `seed` and `draws`, that run exactly."""
    return AuditResult((_check(spec, seed, draws, batch, greedy, registry),))


def _check(spec, seed, draws, batch, greedy, registry) -> AuditRun:
    case = build(spec, registry)
    if case.verify is not None:  # a family with a check of its own (beam search: equality)
        start = time.perf_counter()
        report = case.verify(case, seed=seed, draws=draws, batch=batch, greedy=greedy)
        report = dataclasses.replace(report, seconds=time.perf_counter() - start)
    else:
        report = check_decoder(
            case.decoder, *case.params, draws=draws, batch=batch, seed=seed, greedy=greedy,
            name=spec.family, **case.check,
        )  # fmt: skip
    return AuditRun(spec, report, seed)
