"""γ policies by config name: "fixed", "heuristic", "confidence[:T]", "theory[:C]", "positional".

One place for the launcher's generate mode, the experiments and `SpeculativeDecoder`'s
callers to turn a config string into a policy (`gamma_policy.py`, `gamma_theory.py`).
"""

from __future__ import annotations

from specjax.decoding.drafters.gamma_policy import ConfidenceGamma, HeuristicGamma
from specjax.decoding.drafters.gamma_theory import PositionalGamma, TheoryGamma

# The policies that model the trade-off from measured costs, by name (`from_costs`,
# `from_iteration_costs`): one place for the parser, generate mode and the experiments.
COST_MODEL_POLICIES = {"theory": TheoryGamma, "positional": PositionalGamma}
POLICY_NAMES = ("fixed", "heuristic", "confidence", *COST_MODEL_POLICIES)


def parse_gamma_policy(spec: str | None, **theory_kwargs):
    """A policy from its config string, or None for the plain fixed-γ decoder.

    Args:
      spec: "fixed" (or None / ""): None, the fixed-γ path; "heuristic"; "confidence" or
        "confidence:THRESHOLD"; "theory" or "theory:C" (C the draft/target step-cost ratio);
        "positional" or "positional:C" (`PositionalGamma`).
      **theory_kwargs: extra `TheoryGamma` / `PositionalGamma` fields (measured
        `target_costs`, `c`).

    Returns:
      a policy, or None.
    """
    if spec is None or spec in ("", "fixed"):
        return None
    if not isinstance(spec, str):
        raise ValueError(f"gamma_policy must be a string, got {spec!r}")
    name, _, arg = spec.partition(":")
    if name not in POLICY_NAMES:
        raise ValueError(f"gamma_policy={spec!r}: unknown policy {name!r}; one of {POLICY_NAMES}")
    try:
        value = float(arg) if arg else None
    except ValueError:
        raise ValueError(f"gamma_policy={spec!r}: {arg!r} is not a number") from None
    if name == "heuristic":
        if arg:
            raise ValueError(f"gamma_policy={spec!r}: 'heuristic' takes no argument")
        return HeuristicGamma()
    if name == "confidence":
        return ConfidenceGamma() if value is None else ConfidenceGamma(threshold=value)
    if name in COST_MODEL_POLICIES:
        if value is not None:
            theory_kwargs["c"] = value
        return COST_MODEL_POLICIES[name](**theory_kwargs)
    if arg:
        raise ValueError(f"gamma_policy={spec!r}: 'fixed' takes no argument")
    return None
