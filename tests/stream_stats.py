"""The kit's sampler of chained verification calls and its chi-square checks, re-exported for the
tests (one implementation: `specjax.testing.sampler`; module doc there).

Thresholds follow tests/stats_util.py: a check fails below PVALUE_THRESHOLD = 1e-6, and each
test file states its number of checks and the resulting Bonferroni false-failure bound.
"""

from specjax.testing.sampler import (  # noqa: F401
    CHUNK,
    NUM_SAMPLES,
    StreamSamples,
    first_n_chi2,
    joint_chi2,
    marginal_chi2,
    noncentrality,
    sample_stream,
    stream_checks,
)
