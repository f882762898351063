"""Adaptive γ from a cost model: the policies that price drafting against measured costs.

`TheoryGamma` picks γ_t maximising the measured-cost speedup at an online estimate of α from
past iterations (one i.i.d. α̂ per row); `PositionalGamma` estimates acceptance per draft
position instead, for drafts whose acceptances are correlated along a proposal. Both decide
from the past only, so every lossless rule stays exact (the law and the other policies:
`gamma_policy.py`; the policies by config name: `gamma_parse.py`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specjax import theory
from specjax.decoding.drafters.gamma_policy import _PastOnly


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
