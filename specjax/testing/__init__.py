"""Is my acceptance rule lossless? A calibrated statistical test kit (issue #18).

    from specjax import testing
    report = testing.check_acceptance_rule(my_accept, vocab=5, gammas=(1, 4), draws=2**20)
    print(report)   # per case: statistic, dof, p-value, threshold, verdict; false-failure rate

A whole decoder (any loop-protocol decoder, tiny-vocabulary models, the target's law enumerated
by its own forward pass; `decoder`):

    target, tp, draft, dp = testing.tiny_bigram_pair(vocab=5, seed=0)
    report = testing.check_decoder(SpeculativeDecoder(target, draft, 4, make_warper(1.0)), tp, dp)

`testing.calibrate()` runs the kit on the library's rules (must pass) and on bundled biased
rules (must fail) and prints the table. Modules: `kit` (the checks and reports), `decoder`
(`check_decoder`, `tiny_bigram_pair`, `tiny_llama`), `law` (exact laws of chained calls by
enumeration on tiny vocabularies), `sampler` (JAX sampler of chained calls, chi-square checks),
`stats` (pooled Pearson chi-square, p-values without scipy), `biased` (the biased rules),
`audit` (`check_decoder` on random configurations of every decoder kind, drawn by
`audit_families`: `audit.run(runs=40)`, `scripts/audit_decoders.py`). Needs no scipy.
"""

from specjax.testing import audit, biased, law, sampler, stats
from specjax.testing.decoder import check_decoder, tiny_bigram_pair, tiny_llama
from specjax.testing.kit import (
    KINDS,
    Calibration,
    CheckResult,
    Report,
    calibrate,
    check_acceptance_rule,
)
from specjax.testing.stats import PVALUE_THRESHOLD, Chi2, chi2_sf, pooled_chi2

__all__ = [
    "KINDS",
    "PVALUE_THRESHOLD",
    "Calibration",
    "CheckResult",
    "Chi2",
    "Report",
    "audit",
    "biased",
    "calibrate",
    "check_acceptance_rule",
    "check_decoder",
    "chi2_sf",
    "law",
    "pooled_chi2",
    "sampler",
    "stats",
    "tiny_bigram_pair",
    "tiny_llama",
]
