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
  * `TheoryGamma` (`gamma_theory.py`): γ_t maximises the measured-cost speedup of
    `specjax.theory` at an online estimate of α from past iterations only (the
    censored-geometric MLE α̂ = A / (A + R), A the accepted drafts and R the iterations that
    ended in a rejection, shrunk towards a prior).
  * `PositionalGamma` (`gamma_theory.py`): the same, with acceptance estimated per draft
    position (survival rates), for drafts whose acceptances are correlated along a proposal
    (prompt lookup).
  * `ConfidenceGamma` (HF's `assistant_confidence_threshold`): after drawing x_k, stop when the
    draft's own probability of x_k is below the threshold. x_k is KEPT and verified: the
    decision concerns x_{k+1} only. Dropping x_k instead (because of its own value) would leave
    the verified tokens distributed as q conditioned on being kept, not q: biased
    (tests/test_adaptive_gamma_sampling.py has that mistake as a negative control).
Every row drafts at least one token.

A row that drafts d < gamma_max tokens is verified only up to d: positions past d are never
accepted and its extra token is the bonus drawn from p_{d+1} (`speculative_accept`'s
`num_drafted`), so the static-shape padding never enters a residual.

This file holds the protocol and the schedule policies; `gamma_theory.py` the cost-model ones;
`gamma_parse.py` reads a policy from its config name.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np


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
