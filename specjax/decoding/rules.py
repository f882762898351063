"""Acceptance rules by name, for configs and command lines: `accept_rule("block")`.

A rule is a function with `speculative_accept`'s signature and return, which a decoder takes as
its static `accept` field. A name is "NAME" or "NAME:ARGS", ARGS separated by "," or "/" (the
slash fits inside a comma-separated config string, `--config=...:accept=typical:0.09/0.3`). The
registry is a dict of small factories, so a new rule (the issue's lenient and typical rules) is
one entry; an unknown name or a wrong argument count raises a ValueError that lists the names.
"""

from __future__ import annotations

from collections.abc import Callable

from specjax.decoding.acceptance import speculative_accept
from specjax.decoding.block import block_accept


def _no_args(rule: Callable) -> Callable[..., Callable]:
    def factory(*args: float) -> Callable:
        if args:
            raise ValueError(f"takes no arguments; got {list(args)}")
        return rule

    return factory


# name -> factory(*float args) -> the rule. Factories raise ValueError on bad arguments.
RULES: dict[str, Callable[..., Callable]] = {
    # Leviathan et al. 2023, Algorithm 1: accept in order until the first rejection.
    "tokenwise": _no_args(speculative_accept),
    # Sun et al. 2024 (block verification): lossless, never fewer accepted drafts in expectation.
    "block": _no_args(block_accept),
}


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
