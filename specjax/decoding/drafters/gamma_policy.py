"""Adaptive γ: policies that choose, per row and per iteration, how many tokens to draft.

The paper fixes γ; its closing section proposes choosing it adaptively (Leviathan et al. 2023,
§6). A policy here decides two things for every row, inside the jitted loop with static shapes
(the drafter drafts up to the decoder's `gamma`, `gamma_max`, and masks the rest; see
`decoding/drafters/adaptive.py`):
  * `budget(state)`: before drafting, the most tokens this row drafts this iteration, from the
    policy's per-row state (statistics of past iterations);
  * `keep_drafting(confidence)`: after drawing x_k, whether to draw x_{k+1}, from the draft's
    own probability of x_k (a row also stops at its budget);
  * `update(state, num_drafted, num_accepted, active)`: after verification, the new state.
The state is a pytree of per-row arrays carried in the loop (inside the drafter's state).

Why each keeps the output exact. The lossless rule accepts x_k with probability
min(1, p_k(x_k) / q_k(x_k)) and resamples from norm(max(0, p_k - q_k)); it is exact for any q
as long as x_k really is a draw from q_k given everything before it, and the set of positions
verified is a stopping rule in the draft's own history (ALGORITHMS.md §2): whether x_{k+1} is
drawn may depend on the past and on x_1..x_k (and the draft's distributions), never on the
target's verdict on the current drafts, and a token once drawn is always verified.
  * `FixedGamma`: γ is a constant.
  * `HeuristicGamma` (HF transformers' "heuristic" schedule: +2 when every draft was accepted,
    -1 otherwise): γ_t depends only on past iterations' verdicts.
  * `TheoryGamma`: γ_t maximises the measured-cost speedup of `specjax.theory` at an online
    estimate of α from past iterations only (the censored-geometric MLE α̂ = A / (A + R), A the
    accepted drafts and R the iterations that ended in a rejection, shrunk towards a prior).
  * `PositionalGamma`: the same, with acceptance estimated per draft position (survival
    rates), for drafts whose acceptances are correlated along a proposal (prompt lookup).
  * `ConfidenceGamma` (HF's `assistant_confidence_threshold`): after drawing x_k, stop when the
    draft's own probability of x_k is below the threshold. x_k is KEPT and verified: the
    decision concerns x_{k+1} only. Dropping x_k instead (because of its own value) would leave
    the verified tokens distributed as q conditioned on being kept, not q: biased
    (tests/test_adaptive_gamma_sampling.py has that mistake as a negative control).
Every row drafts at least one token.

A row that drafts d < gamma_max tokens is verified only up to d: positions past d are never
accepted and its extra token is the bonus drawn from p_{d+1} (`speculative_accept`'s
`num_drafted`), so the static-shape padding never enters a residual.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from specjax import theory


def _check_int(name: str, value, low: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def check_gamma_max(gamma_max) -> None:
    """Raises ValueError unless gamma_max is an integer >= 1."""
    _check_int("gamma_max", gamma_max)


class GammaPolicy(Protocol):
    """Structural type of a γ policy (see the module docstring)."""

    def init(self, batch: int, gamma_max: int) -> Any: ...

    def budget(self, state, gamma_max: int) -> jax.Array: ...

    def keep_drafting(self, confidence: jax.Array) -> jax.Array | None: ...

    def update(self, state, num_drafted, num_accepted, active, gamma_max: int) -> Any: ...


class _PastOnly:
    """Default hooks: no per-token stop rule, no state."""

    uses_confidence = False

    def init(self, batch: int, gamma_max: int):
        del batch, gamma_max
        return ()

    def keep_drafting(self, confidence: jax.Array) -> jax.Array | None:
        del confidence
        return None

    def update(self, state, num_drafted, num_accepted, active, gamma_max: int):
        del num_drafted, num_accepted, active, gamma_max
        return state


@dataclasses.dataclass(frozen=True)
class FixedGamma(_PastOnly):
    """Drafts `gamma` tokens every iteration (None: gamma_max), through the adaptive drafter.

    Attributes:
      gamma: tokens per iteration, in [1, gamma_max]; None: gamma_max.
    """

    gamma: int | None = None

    def __post_init__(self):
        if self.gamma is not None:
            _check_int("gamma", self.gamma)

    def budget(self, state, gamma_max: int) -> jax.Array:
        del state
        gamma = gamma_max if self.gamma is None else self.gamma
        if gamma > gamma_max:
            raise ValueError(f"FixedGamma.gamma={gamma} exceeds gamma_max={gamma_max}")
        return jnp.asarray(gamma, jnp.int32)


@dataclasses.dataclass(frozen=True)
class HeuristicGamma(_PastOnly):
    """HF's schedule per row: γ + 2 after an iteration that accepted every draft, else γ − 1.

    Clipped to [1, gamma_max]. State: int32 [batch] the row's current γ.

    Attributes:
      initial: γ of the first iteration (None: gamma_max).
      up: added after an all-accepted iteration.
      down: subtracted after a rejection.
    """

    initial: int | None = None
    up: int = 2
    down: int = 1

    def __post_init__(self):
        if self.initial is not None:
            _check_int("initial", self.initial)
        _check_int("up", self.up, 0)
        _check_int("down", self.down, 0)

    def init(self, batch: int, gamma_max: int):
        start = gamma_max if self.initial is None else min(self.initial, gamma_max)
        return jnp.full((batch,), start, jnp.int32)

    def budget(self, state, gamma_max: int) -> jax.Array:
        return jnp.clip(state, 1, gamma_max)

    def update(self, state, num_drafted, num_accepted, active, gamma_max: int):
        step = jnp.where(num_accepted >= num_drafted, self.up, -self.down)
        return jnp.where(active, jnp.clip(state + step, 1, gamma_max), state).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class ConfidenceGamma(_PastOnly):
    """Stops a row after a drawn token whose own draft probability is below `threshold`.

    The token is kept and verified (module docstring). Under a greedy warper the draft's warped
    q is a point mass, so the confidence is the softmax of the raw logits (still a function of
    the draft's own distribution: any per-token confidence is safe for argmax drafts).

    Attributes:
      threshold: in (0, 1).
      gamma: the most tokens per iteration (None: gamma_max).
    """

    threshold: float = 0.4
    gamma: int | None = None

    uses_confidence = True

    def __post_init__(self):
        t = self.threshold
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0.0 < t < 1.0:
            raise ValueError(f"threshold must lie in (0, 1), got {t!r}")
        if self.gamma is not None:
            _check_int("gamma", self.gamma)

    def budget(self, state, gamma_max: int) -> jax.Array:
        del state
        return jnp.asarray(min(gamma_max, self.gamma or gamma_max), jnp.int32)

    def keep_drafting(self, confidence: jax.Array) -> jax.Array:
        return confidence >= self.threshold


@dataclasses.dataclass(frozen=True)
class TheoryGamma(_PastOnly):
    """γ_t = argmax_γ of the measured-cost speedup at a per-row online α̂ (Leviathan Thm 3.8).

    speedup(γ) = (1 − α̂^{γ+1}) / (1 − α̂) · T(1) / (T(v) + γ · c · T(1)), the model of
    `theory.measured_speedup` with T(k) the target's cost of scoring k tokens (relative to
    T(1)), c the draft step's cost relative to T(1), and v the positions the target scores:
    gamma_max + 1 with `static_verify` (the default decoder: its verification has a static
    width, so a short γ saves draft steps only), else γ + 1 (a decoder built with
    `verify_widths="auto"`, which verifies only as wide as the longest drafted row: at batch 1
    the row's own γ). α̂ = (A + a) / (A + R + a + r) is the
    censored-geometric MLE from past iterations (A accepted drafts, R iterations that ended in
    a rejection; an all-accepted iteration is censored and adds no R), with a prior of
    `prior_strength` pseudo-observations at `prior_alpha`; `decay` < 1 forgets old evidence.
    State: (A, R) float32 [batch] each.

    Attributes:
      c: draft step time / target step time (measured: `benchmark.costs`), >= 0.
      target_costs: T(1), T(2), ... (any unit; divided by T(1)), at least gamma_max + 1 of
        them; None: flat (the paper's assumption that scoring γ + 1 tokens costs one step).
      prior_alpha: α the estimate starts from, in (0, 1).
      prior_strength: pseudo-observations behind the prior, > 0.
      decay: per-iteration forgetting factor of A and R, in (0, 1].
      static_verify: the target scores gamma_max + 1 positions whatever γ is (True, the
        default decoder), or γ + 1 (False: `verify_widths="auto"` at batch 1).
      iteration_costs: a whole loop iteration's measured cost at γ = 1, 2, ... (any unit; at
        least gamma_max of them), replacing T(v) + γ c: the loop's own work per draft step and
        per iteration, which the model of bare calls leaves out, is in it
        (`from_iteration_costs`). None: the model of target_costs and c.
    """

    c: float = 0.1
    target_costs: tuple | None = None
    prior_alpha: float = 0.6
    prior_strength: float = 2.0
    decay: float = 1.0
    static_verify: bool = True
    iteration_costs: tuple | None = None

    def __post_init__(self):
        if isinstance(self.c, bool) or not isinstance(self.c, int | float) or self.c < 0:
            raise ValueError(f"c must be a number >= 0, got {self.c!r}")
        if self.target_costs is not None:
            object.__setattr__(self, "target_costs", tuple(float(t) for t in self.target_costs))
            theory.cost_curve(list(self.target_costs))  # positive, finite
        if self.iteration_costs is not None:
            costs = tuple(float(t) for t in self.iteration_costs)
            if not costs or not all(np.isfinite(t) and t > 0 for t in costs):
                raise ValueError(
                    f"iteration_costs must be positive finite numbers, got {self.iteration_costs!r}"
                )
            object.__setattr__(self, "iteration_costs", costs)
        if not 0.0 < self.prior_alpha < 1.0:
            raise ValueError(f"prior_alpha must lie in (0, 1), got {self.prior_alpha!r}")
        if not self.prior_strength > 0:
            raise ValueError(f"prior_strength must be > 0, got {self.prior_strength!r}")
        if not 0.0 < self.decay <= 1.0:
            raise ValueError(f"decay must lie in (0, 1], got {self.decay!r}")

    @classmethod
    def from_costs(cls, t_target, t_draft: float, **kwargs) -> TheoryGamma:
        """From measured costs: t_target as `theory.cost_curve` takes it, t_draft in its unit."""
        curve = theory.cost_curve(t_target)
        relative = tuple((curve / curve[0]).tolist())  # T(1) = 1
        return cls(c=float(t_draft / curve[0]), target_costs=relative, **kwargs)

    @classmethod
    def from_iteration_costs(cls, costs, **kwargs) -> TheoryGamma:
        """From a loop iteration's measured cost at γ = 1..gamma_max (e.g. fixed-γ decoders'
        seconds per iteration on calibration prompts: a cost, not an acceptance, is measured)."""
        return cls(iteration_costs=tuple(costs), **kwargs)

    def _relative_costs(self, gamma_max: int) -> np.ndarray:
        """float64 [gamma_max] iteration cost T(v) / T(1) + γ c for γ = 1..gamma_max."""
        if self.iteration_costs is not None:
            if len(self.iteration_costs) < gamma_max:
                raise ValueError(
                    f"iteration_costs covers γ = 1..{len(self.iteration_costs)}, but "
                    f"gamma_max={gamma_max} needs γ up to {gamma_max}"
                )
            costs = np.asarray(self.iteration_costs[:gamma_max])
            return costs / costs[0]
        gammas = np.arange(1, gamma_max + 1)
        if self.target_costs is None:
            verify = np.ones(gamma_max)
        else:
            curve = np.asarray(self.target_costs)
            if curve.size < gamma_max + 1:
                raise ValueError(
                    f"target_costs covers k = 1..{curve.size}, but gamma_max={gamma_max} needs "
                    f"T({gamma_max + 1})"
                )
            verify = curve[1 : gamma_max + 1] / curve[0]
            if self.static_verify:
                verify = np.full(gamma_max, verify[-1])  # T(gamma_max + 1) every time
        return verify + gammas * self.c

    def init(self, batch: int, gamma_max: int):
        del gamma_max
        zeros = jnp.zeros((batch,), jnp.float32)
        return (zeros, zeros)

    def alpha(self, state) -> jax.Array:
        """float32 [batch] the current estimate α̂."""
        accepted, rejected = state
        a = self.prior_alpha * self.prior_strength
        r = (1.0 - self.prior_alpha) * self.prior_strength
        return (accepted + a) / (accepted + rejected + a + r)

    def budget(self, state, gamma_max: int) -> jax.Array:
        alpha = jnp.minimum(self.alpha(state), 1.0 - 1e-6)[:, None]  # [batch, 1]
        gammas = jnp.arange(1, gamma_max + 1, dtype=jnp.float32)[None, :]  # [1, G]
        tokens = (1.0 - alpha ** (gammas + 1.0)) / (1.0 - alpha)  # [batch, G]
        cost = jnp.asarray(self._relative_costs(gamma_max), jnp.float32)[None, :]  # [1, G]
        return (jnp.argmax(tokens / cost, axis=1) + 1).astype(jnp.int32)

    def update(self, state, num_drafted, num_accepted, active, gamma_max: int):
        del gamma_max
        accepted, rejected = state
        rejected_now = (num_accepted < num_drafted).astype(jnp.float32)
        new_a = self.decay * accepted + num_accepted.astype(jnp.float32)
        new_r = self.decay * rejected + rejected_now
        return (jnp.where(active, new_a, accepted), jnp.where(active, new_r, rejected))


@dataclasses.dataclass(frozen=True)
class PositionalGamma(TheoryGamma):
    """`TheoryGamma` with acceptance estimated per draft position, not as one i.i.d. α.

    The i.i.d. model prices the k-th draft at α̂^k. Drafts whose acceptances are correlated
    along a proposal break it: prompt lookup's first token is often wrong (a stale match), but
    once it is right the copied continuation tends to stay right, so the i.i.d. α̂ (low) can
    price a long proposal's later tokens too low. This policy keeps, per row and draft position
    i, how often position i was reached (drafted, with every draft before it accepted) and
    accepted, estimates the survival s_i = P(draft i accepted | drafts 1..i-1 accepted) from
    them (each with `prior_strength` pseudo-observations at `prior_alpha`; `decay` forgets),
    and picks

        γ_t = argmax_γ (1 + Σ_{k<=γ} Π_{i<=k} s_i) / cost(γ),

    the expected tokens of an iteration under that model (Table 2's positional model,
    `theory.positional_tokens_per_iteration`) over the same relative cost as `TheoryGamma`.
    With equal s_i it is `TheoryGamma`'s choice. γ_t depends on past iterations only, so every
    lossless rule stays exact (module docstring). State: (reached, accepted) float32
    [batch, gamma_max] each.
    """

    def init(self, batch: int, gamma_max: int):
        zeros = jnp.zeros((batch, gamma_max), jnp.float32)
        return (zeros, zeros)

    def survival(self, state) -> jax.Array:
        """float32 [batch, gamma_max] the estimates s_1..s_gamma_max."""
        reached, accepted = state
        a = self.prior_alpha * self.prior_strength
        return (accepted + a) / (reached + self.prior_strength)

    def alpha(self, state) -> jax.Array:
        """float32 [batch] the first position's survival (what an iteration's first draft has)."""
        return self.survival(state)[:, 0]

    def budget(self, state, gamma_max: int) -> jax.Array:
        survival = self.survival(state)[:, :gamma_max]  # [batch, G]
        tokens = 1.0 + jnp.cumsum(jnp.cumprod(survival, axis=1), axis=1)  # [batch, G]: γ = 1..G
        cost = jnp.asarray(self._relative_costs(gamma_max), jnp.float32)[None, :]  # [1, G]
        return (jnp.argmax(tokens / cost, axis=1) + 1).astype(jnp.int32)

    def update(self, state, num_drafted, num_accepted, active, gamma_max: int):
        reached, accepted = state
        position = jnp.arange(1, reached.shape[1] + 1)[None, :]  # [1, G]
        drafted = num_drafted[:, None]  # [batch, 1]
        took = num_accepted[:, None]
        # Position i was reached when it was drafted and drafts 1..i-1 were accepted.
        now_reached = (position <= jnp.minimum(drafted, took + 1)).astype(jnp.float32)
        now_accepted = (position <= jnp.minimum(drafted, took)).astype(jnp.float32)
        live = active[:, None]
        return (
            jnp.where(live, self.decay * reached + now_reached, reached),
            jnp.where(live, self.decay * accepted + now_accepted, accepted),
        )


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
