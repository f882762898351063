"""Exact shift from p of the lossy rules on the kit's tiny prefix-dependent pairs (issue #18 §3).

    python scripts/lossy_shift.py [--vocab 4] [--gamma 2]

For each setting: E[accepted drafts] of the first call, and the total-variation distance from
the target of the first emitted token and of the joint of the first max(3, γ + 1) tokens of
chained calls, all by enumeration (`specjax.testing.law.stream_law` with the rules' exact
one-call laws of `specjax.decoding.rules.lossy`); lenient:1 is the lossless token-wise rule.
"""

from __future__ import annotations

import argparse
import functools

from specjax.decoding.rules import lossy
from specjax.testing import law

SETTINGS = {
    **{
        f"lenient:{v:g}": functools.partial(lossy.lenient_call_law, lenience=v)
        for v in (1.0, 0.5, 0.3, 0.1)
    },
    "typical:0.09,0.3": lossy.typical_call_law,
    "typical:0.3,0.09 (swapped)": functools.partial(
        lossy.typical_call_law, epsilon=0.3, delta=0.09
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=4)
    parser.add_argument("--gamma", type=int, default=2)
    args = parser.parse_args()
    for kind in ("prefix", "peaked", "deterministic"):
        case = law.make_case(kind, args.gamma, vocab=args.vocab)
        target = law.target_law(case)
        print(f"\n{case.name} (vocab {args.vocab}): E[n] | TV token 1 | TV first {case.length}")
        for name, rule in SETTINGS.items():
            stream = law.stream_law(case, rule)
            tv1 = lossy.total_variation(law.marginal(stream, 0), law.marginal(target, 0))
            tv = lossy.total_variation(stream.ravel(), target.ravel())
            n = law.expected_accepted(case, rule)
            print(f"  {name:<28} {n:.4f}  {tv1:.4f}  {tv:.4f}")


if __name__ == "__main__":
    main()
