"""Shared set-up of tests/test_check_decoder*.py: the tiny bigram pair and the kit's call.

`tiny_bigram_pair(5, seed=0)`: bigram target and draft tables over 5 tokens (fixed Dirichlet
seeds); every check draws 2^14 rows per prompt, by default on one, (1, 2).
"""

from __future__ import annotations

from specjax import testing
from specjax.decoding import make_warper

DRAWS = 1 << 14
PROMPTS = ((1, 2),)
PAIR = testing.tiny_bigram_pair(5, seed=0)
T1 = make_warper(1.0)


def check(decoder, prompts=PROMPTS, **kwargs) -> testing.Report:
    """`testing.check_decoder` on PAIR's params, DRAWS rows, `prompts`; prints the report."""
    _, tp, _, dp = PAIR
    report = testing.check_decoder(decoder, tp, dp, draws=DRAWS, prompts=prompts, **kwargs)
    print(report)
    return report
