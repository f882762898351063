"""A model drafter whose per-row γ is chosen by a policy, drafting in a loop that stops early.

`AdaptiveDrafter` is `ModelDrafter` with a `GammaPolicy` (`decoding/drafters/gamma_policy.py`, which
also says why every policy keeps the output exact). Per iteration and per row:
  1. the policy's `budget` (from its per-row state: past iterations) caps the row's γ_t;
  2. x_1 is drawn as `ModelDrafter` draws it (feeding the pending tokens), then a loop over
     draft steps k = 2..gamma_max feeds x_{k-1} and draws x_k for the rows still drafting; a
     row stops at its budget or when `keep_drafting` says so after its last drawn token (which
     it keeps); the loop ends as soon as every row has stopped, so a short γ_t saves draft
     calls (counted in `Proposal.num_calls`). The loop is a `lax.while_loop`, or (`unroll`, the
     default for a cached draft on an accelerator) the same steps unrolled as `lax.cond`s
     skipped once every row has stopped. Stopped rows feed
     nothing (their caches do not advance) and their later positions are zero padding;
  3. the proposal carries `num_drafted` [batch], so the acceptance rule verifies each row only
     up to its own γ_t and draws its extra token at γ_t + 1;
  4. `commit` rolls the model back as `ModelDrafter` does (a row that drafted d tokens has fed
     d - 1 of them, the same invariant at its own γ) and updates the policy with the verdict.
The keys are `ModelDrafter`'s (fold_in(key, k - 1) for x_k), so with a budget of gamma_max and
no stop rule the tokens are the fixed-γ drafter's.

State: `AdaptiveState` (the model's state, the policy's per-row state, and the last proposal's
num_drafted, which `commit` needs to tell a full acceptance from a rejection).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from specjax.decoding.arguments import check_flag
from specjax.decoding.drafters.base import Proposal, Verdict
from specjax.decoding.drafters.gamma_policy import GammaPolicy, check_gamma_max
from specjax.decoding.drafters.model import ModelDrafter, default_unroll
from specjax.decoding.sampling import Warper, check_warper
from specjax.decoding.state import Sequences
from specjax.models.interface import per_row_axes, state_logical_axes


@struct.dataclass
class AdaptiveState:
    """The adaptive drafter's state.

    Attributes:
      model: the draft model's decoding state (its KV cache).
      policy: the policy's per-row state (a pytree of [batch, ...] arrays, possibly empty).
      num_drafted: int32 [batch] tokens each row drafted in the last proposal.
    """

    model: Any
    policy: Any
    num_drafted: jax.Array

    def logical_axes(self) -> AdaptiveState:
        return AdaptiveState(
            model=state_logical_axes(self.model),
            policy=jax.tree.map(lambda x: per_row_axes(x.ndim), self.policy),
            num_drafted=per_row_axes(1),
        )


def token_confidence(warper: Warper, logits: jax.Array, q: jax.Array, token: jax.Array):
    """float32 [batch] the draft's own probability of the token it drew.

    q(x) under the warper; for a greedy warper (q a point mass) softmax(logits)(x) instead.
    """
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1) if warper.is_greedy else q
    return jnp.take_along_axis(probs, token[:, None], axis=1)[:, 0]


def check_policy(policy, gamma_max: int, name: str = "gamma_policy") -> None:
    """Raises (naming the argument `name`) unless `policy` is a GammaPolicy usable up to
    gamma_max."""
    check_gamma_max(gamma_max)
    for method in ("init", "budget", "keep_drafting", "update"):
        if not callable(getattr(policy, method, None)):
            raise TypeError(f"{name} must be a GammaPolicy (no `{method}`): {policy!r}")
    with jax.ensure_compile_time_eval():
        policy.budget(policy.init(1, gamma_max), gamma_max)  # e.g. a gamma above gamma_max


@dataclasses.dataclass(frozen=True)
class AdaptiveDrafter:
    """Drafts up to gamma_max tokens per row with a model, as many as `policy` decides.

    Attributes:
      model: the draft model.
      warper: the sampling warper (the decoder's).
      policy: a γ policy (`decoding/drafters/gamma_policy.py`).
      gamma_max: the most tokens a row drafts (the decoder's `gamma`, a static shape).
      unroll: draft steps as gamma_max - 1 unrolled `lax.cond`s, each skipped once every row
        has stopped (True), or a `lax.while_loop` (False); None: `model.default_unroll` (a
        loop on CPU). Either way a step costs nothing once every row has stopped.
    """

    model: Any
    warper: Warper
    policy: GammaPolicy
    gamma_max: int
    unroll: bool | None = None

    def __post_init__(self):
        check_warper(self.warper)
        check_policy(self.policy, self.gamma_max, "policy")  # None failed inside generate
        check_flag(self.unroll, "unroll", none=True)

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    def unrolled(self, model_state) -> bool:
        """Whether the draft steps are unrolled for this model state (see `unroll`)."""
        return default_unroll(self.unroll, model_state)

    @property
    def base(self) -> ModelDrafter:
        return ModelDrafter(self.model, self.warper)

    def init(self, params, prompts, prompt_lengths, cache_len: int) -> AdaptiveState:
        batch = prompts.shape[0]
        return AdaptiveState(
            model=self.base.init(params, prompts, prompt_lengths, cache_len),
            policy=self.policy.init(batch, self.gamma_max),
            num_drafted=jnp.zeros((batch,), jnp.int32),
        )

    def _keep(self, confidence_of, drafting, count, budget):
        """Rows that draw another token: still drafting, under budget, and confident."""
        keep = drafting & (count < budget)
        if getattr(self.policy, "uses_confidence", False):
            keep = keep & self.policy.keep_drafting(confidence_of())
        return keep

    def check_gamma(self, gamma: int) -> None:
        """Raises ValueError unless gamma is the gamma_max this drafter was built for."""
        if gamma != self.gamma_max:
            raise ValueError(f"AdaptiveDrafter built for gamma_max={self.gamma_max}, got {gamma}")

    def propose(self, params, state: AdaptiveState, seq: Sequences, key, gamma: int) -> Proposal:
        """Drafts 1..budget tokens per row; stops the draft loop once every row has stopped."""
        self.check_gamma(gamma)
        budget = jnp.broadcast_to(self.policy.budget(state.policy, gamma), seq.lengths.shape)
        m_state, x0, q0, logits0 = self.base.first_draft(params, state.model, seq, key)
        batch, vocab = q0.shape
        tokens = jnp.zeros((batch, gamma), jnp.int32).at[:, 0].set(x0)  # [batch, gamma]
        probs = jnp.zeros((batch, gamma, vocab), jnp.float32).at[:, 0].set(q0)
        count = jnp.ones((batch,), jnp.int32)  # [batch] tokens drawn
        drafting = self._keep(
            lambda: token_confidence(self.warper, logits0, q0, x0), ~seq.done, count, budget
        )

        def cond(carry):
            k, _, _, _, _, _, drafting = carry
            return (k < gamma) & jnp.any(drafting)

        def body(carry):
            k, m_state, token, tokens, probs, count, drafting = carry
            logits, m_state = self.model.apply(
                params, m_state, token[:, None], drafting.astype(jnp.int32)
            )
            nxt, q = self.warper.draw(jax.random.fold_in(key, k), logits[:, 0])  # [b], [b, vocab]
            tokens = tokens.at[:, k].set(jnp.where(drafting, nxt, 0))
            probs = probs.at[:, k].set(jnp.where(drafting[:, None], q, 0.0))
            count = count + drafting.astype(jnp.int32)
            drafting = self._keep(
                lambda: token_confidence(self.warper, logits[:, 0], q, nxt), drafting, count, budget
            )
            return k + 1, m_state, nxt, tokens, probs, count, drafting

        carry = (jnp.ones((), jnp.int32), m_state, x0, tokens, probs, count, drafting)
        if self.unrolled(m_state):
            # The same loop unrolled: one `lax.cond` per step, each skipped once all stopped.
            for _ in range(1, gamma):
                carry = jax.lax.cond(jnp.any(carry[-1]), body, lambda c: c, carry)
        else:
            carry = jax.lax.while_loop(cond, body, carry)
        calls, m_state, _, tokens, probs, count, _ = carry
        state = state.replace(model=m_state, num_drafted=count)
        return Proposal(tokens, probs, count, state, calls=gamma, num_calls=calls)

    def commit(self, state: AdaptiveState, verdict: Verdict) -> AdaptiveState:
        """Rolls the model back (as `ModelDrafter`) and lets the policy see the verdict."""
        policy = self.policy.update(
            state.policy, state.num_drafted, verdict.num_accepted, verdict.active, self.gamma_max
        )
        return state.replace(model=self.base.commit(state.model, verdict), policy=policy)
