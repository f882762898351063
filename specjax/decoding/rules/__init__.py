"""Acceptance rules: the room, and the registry by name for configs and command lines.

The room holds one rule per file, each with `speculative_accept`'s signature and return except
the tree rule: `acceptance.py` (token-wise, Leviathan et al. 2023), `block.py` (block
verification, Sun et al. 2024), `lossy.py` (the lossy contrasts), `tree.py` (`tree_accept`,
SpecInfer's and Sequoia's multi-draft rule), and `_common.py`, the scaffolding they share
(argument checks, float32 laws, residuals, the output layout), and `point_mass.py`, the
outcome of the lossless chain rules and of `tree_accept` for a greedy target, from tokens
alone. A new rule is one new file here and, to be selectable by name, one entry in `RULES`
below.

`accept_rule("block")`: a rule is a function with `speculative_accept`'s signature and return,
which a decoder takes as its static `accept` field. A name is "NAME" or "NAME:ARGS", ARGS
separated by "," or "/" (the slash fits inside a comma-separated config string,
`--config=...:accept=typical:0.09/0.3`). The registry is a dict of small factories, so a new
rule is one entry (the lossy contrasts "lenient:0.5" and "typical:0.09,0.3" of
`specjax.decoding.rules.lossy` are two); an unknown name or a wrong argument count raises a
ValueError that lists the names; a bad value names the argument. Every rule carries a
`lossless` marker (`is_lossless(rule)`: True, False for the lossy ones, None for a user's
unmarked rule), so a caller can say beside its numbers that a run was lossy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from specjax.decoding.rules import lossy
from specjax.decoding.rules._common import check_unit
from specjax.decoding.rules.acceptance import speculative_accept
from specjax.decoding.rules.block import block_accept


def _no_args(rule: Callable) -> Callable[..., Callable]:
    def factory(*args: float) -> Callable:
        if args:
            raise ValueError(f"takes no arguments; got {list(args)}")
        return rule

    return factory


@dataclasses.dataclass(frozen=True)
class BoundRule:
    """A rule with its keyword knobs bound; equal and hashable by value, so a decoder holding it
    as a static field compiles once per setting (a functools.partial would compare by identity)."""

    rule: Callable
    knobs: tuple[tuple[str, float], ...]

    def __call__(self, *args, **kwargs):
        return self.rule(*args, **dict(self.knobs), **kwargs)

    @property
    def lossless(self) -> bool | None:
        """The rule's own marker (None: unknown); lenient_accept with lenience 1 is exact."""
        if self.rule is lossy.lenient_accept and dict(self.knobs).get("lenience") == 1.0:
            return True
        return getattr(self.rule, "lossless", None)

    @property
    def __name__(self) -> str:
        knobs = ", ".join(f"{k}={v:g}" for k, v in self.knobs)
        return f"{self.rule.__name__}({knobs})"


def _lenient(*args: float) -> Callable:
    if len(args) != 1:
        raise ValueError(f"takes one argument, lenience in (0, 1]; got {list(args)}")
    check_unit("lenience", args[0])
    return BoundRule(lossy.lenient_accept, (("lenience", float(args[0])),))


def _typical(*args: float) -> Callable:
    if len(args) not in (0, 2):
        raise ValueError(
            f"takes two arguments, epsilon and delta (e.g. 0.09,0.3); got {list(args)}"
        )
    epsilon, delta = args or (0.09, 0.3)
    check_unit("epsilon", epsilon)
    check_unit("delta", delta)
    return BoundRule(lossy.typical_accept, (("epsilon", float(epsilon)), ("delta", float(delta))))


# name -> factory(*float args) -> the rule. Factories raise ValueError on bad arguments.
RULES: dict[str, Callable[..., Callable]] = {
    # Leviathan et al. 2023, Algorithm 1: accept in order until the first rejection.
    "tokenwise": _no_args(speculative_accept),
    # Sun et al. 2024 (block verification): lossless, never fewer accepted drafts in expectation.
    "block": _no_args(block_accept),
    # LOSSY, for contrast (specjax.decoding.lossy): Leviathan et al. 2023 App. A.5, "lenient:L",
    # and Medusa's typical acceptance, "typical:EPSILON,DELTA" (Medusa runs 0.09,0.3).
    "lenient": _lenient,
    "typical": _typical,
}


def is_lossless(rule: Callable) -> bool | None:
    """True for the library's exact rules, False for the lossy contrasts, None for a rule that
    carries no `lossless` marker (test it: `specjax.testing.check_acceptance_rule`).

    A rule says so with a `lossless` attribute (a function attribute, or a `BoundRule`'s
    property); decoders' callers (experiments/generate/, the leviathan2023 pipeline) record it
    beside every result and warn when it is False.
    """
    return getattr(rule, "lossless", None)


def point_mass_rule(rule: Callable) -> Callable | None:
    """`rule`'s outcome for a point-mass (greedy) target computed from tokens alone
    (`point_mass.point_mass_accept`), or None where the rule does not say it has one (the lossy
    rules, a user's rule): decoders then run `rule` itself on the one-hot p."""
    return getattr(rule, "point_mass", None)


def accept_rule(spec: str) -> Callable:
    """The acceptance rule named by `spec` ("tokenwise", "block", "NAME:ARG,ARG").

    Raises:
      ValueError: an unknown name (the message lists the known ones), or arguments the rule
        does not take.
    """
    name, _, args = str(spec).strip().partition(":")
    factory = RULES.get(name.strip())
    if factory is None:
        raise ValueError(f"unknown acceptance rule {spec!r}; known rules: {sorted(RULES)}")
    try:
        values = [float(a) for a in args.replace("/", ",").split(",") if a.strip()]
        return factory(*values)
    except ValueError as error:
        raise ValueError(f"acceptance rule {spec!r}: {error}") from error
