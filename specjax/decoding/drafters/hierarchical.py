"""Hierarchical speculation: a speculative decoder used as the draft of another.

    middle_level = SpeculativeDecoder(middle, small, gamma=2, warper=warper)
    decoder = SpeculativeDecoder(target, SpeculativeDrafter(middle_level), gamma=4, warper=warper)
    result = decoder.generate(
        target_params, (middle_params, small_params), prompts=prompts, key=key, max_new_tokens=64
    )

The draft params of the outer decoder are the inner decoder's params as a tuple (its target's,
then its draft's); a deeper hierarchy nests them: target <- a <- b <- c takes
`generate(target_params, (a_params, (b_params, c_params)), ...)` with
`SpeculativeDrafter(SpeculativeDecoder(a, SpeculativeDrafter(SpeculativeDecoder(b, c, ...)), ...))`.

Why it is exact. The inner decoder's output is distributed exactly as its target M (the middle
model, under the inner decoder's warper): that is speculative sampling's guarantee, whatever
the inner draft. So its first γ tokens are a draft drawn from M, token by token, and q = M(·|prefix)
at each of them is the right denominator of the outer acceptance ratio. The inner verify call has
computed M's warped p at every position it emitted (`SpeculativeSteps.recorded_step` returns it),
so q costs nothing extra. The trap: a token the inner level emitted from its residual
norm(max(0, M - q_small)) is still, marginally, a sample of M given the prefix (as is a bonus
token, drawn from M itself); the residual is the law of that token *given that the small draft
was rejected*, an event the outer ratio must not condition on. Using the residual as q there
is biased (the negative control in tests/test_hierarchical_sampling.py overrides `draft_law` to
do exactly that).

One `propose`, per row, at outer length L:
  1. the inner loop state's sequences become a copy of the outer ones (same tokens and lengths;
     no EOS and no budget: the outer level stops rows, the inner level only drafts);
  2. inner speculative steps run in a `lax.while_loop` until every active row has emitted at
     least γ + 1 tokens; a row that has stops (its inner `done` flag), so it overshoots by at most
     one inner step (< γ + inner γ + 2 tokens in all, static shapes throughout). Each step writes
     its p at the emitted positions into a [batch, γ, vocab] buffer (by position, past γ dropped);
  3. the proposal is the first γ emitted tokens, cut by count only (never by value), with that
     buffer as q.
Why γ + 1 and not γ: the middle model has then seen all γ drafted tokens (its cache holds L' - 1
tokens for an inner length L' >= L + γ + 1), so after the outer verdict it can roll back to exactly
L + n and feed the outer correction or bonus token at the next inner step as its "last" token,
like the target of any speculative step: no catch-up call, and the same invariant holds at every
depth. `commit` rolls the middle model back with the inner decoder's `commit_target` and tells
the inner drafter the outer verdict through its own `commit` (a `ModelDrafter` then keeps
min(L + n, what it saw), so it has at most 2 tokens pending at its next proposal).

Costs: an outer iteration's draft costs the inner steps it ran (middle calls, counted as the
proposal's `num_calls`, so the outer statistics' `draft_calls` are middle-model calls); the inner
counters accumulate in the drafter state's `stats` (the inner `LoopState`'s).

Limits: the inner decoder must be a chain (`SpeculativeDecoder`), not a token tree. With an
adaptive-γ inner decoder, its policy also sees the outer verdicts through `commit` (exactness is
unaffected: the policy only ever sets how many tokens the small model drafts). `ShardedDecoder`
does not place the nested params (they are a tuple, not one model's).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from specjax.decoding.drafters.base import Proposal, Verdict
from specjax.decoding.loop import LoopState
from specjax.decoding.state import Sequences
from specjax.models.interface import expected_params, params_mismatch, position_limit
from specjax.models.kv_cache import write_rows


@dataclasses.dataclass(frozen=True)
class InnerModels:
    """The models of an inner decoder, as the one "model" of the outer decoder's draft slot.

    What the loop driver asks of a draft model: `vocab_size`, the params it expects (a tuple, one
    pytree per inner model, nested for deeper hierarchies) and the tightest position limit.
    """

    models: tuple

    @property
    def vocab_size(self) -> int:
        return self.models[0].vocab_size

    @property
    def max_positions(self) -> int | None:
        limits = [x for x in map(position_limit, self.models) if x is not None]
        return min(limits) if limits else None

    def abstract_params(self):
        return tuple(expected_params(m) for m in self.models)

    def params_mismatch(self, params) -> str | None:
        """Why `params` (one pytree per inner model) do not fit, model by model, or None.

        Each inner model is checked on its own, so a parameter-free one (prompt lookup, whose
        params are unknown) takes `{}` or None, as it does outside a hierarchy.
        """
        n = len(self.models)
        if not isinstance(params, tuple | list):
            return (
                f"are a {type(params).__name__}, not a tuple of {n} params pytrees (one per "
                "inner model, middle first)"
            )
        if len(params) != n:
            return f"are {len(params)} pytrees, not {n} (one per inner model, middle first)"
        for i, (model, tree) in enumerate(zip(self.models, params, strict=True)):
            why = params_mismatch(model, tree)
            if why is not None:
                return f"at [{i}] (for {type(model).__name__}) {why}"
        return None


@dataclasses.dataclass(frozen=True)
class SpeculativeDrafter:
    """A `Drafter` that drafts with a speculative decoder (see the module docstring).

    Attributes:
      inner: a chain speculative decoder (`SpeculativeDecoder`) whose target is the middle model;
        its draft may be a model, any drafter, or another `SpeculativeDrafter` (any depth). Its
        `gamma` is the inner γ; its `warper` is the law the drafts follow (usually the outer's).
    """

    inner: Any

    def __post_init__(self):
        if not callable(getattr(self.inner, "recorded_step", None)) or not hasattr(
            self.inner, "commit_target"
        ):
            raise TypeError(
                "inner must be a speculative decoder (SpeculativeDecoder(middle, small, ...)); "
                f"got {self.inner!r}"
            )
        if getattr(self.inner, "branch", None) is not None:
            raise ValueError(
                f"inner must be a chain SpeculativeDecoder, not a token tree; got {self.inner!r}"
            )
        if getattr(self.inner, "lossless", True) is False:
            raise ValueError(
                "inner uses a lossy acceptance rule: its output does not follow the middle "
                "model, so the middle model's distribution is not the law of the drafts (q) and "
                "the outer decoder would be biased; build inner with a lossless rule"
            )

    @property
    def vocab_size(self) -> int:
        return self.inner.vocab_size

    @property
    def model(self) -> InnerModels:
        return InnerModels(tuple(self.inner.models))

    def draft_law(self, record) -> jax.Array:
        """q of each emitted token of one inner step: the middle model's full warped p.

        Args:
          record: the inner step's `StepRecord`.

        Returns:
          float32 [batch, inner gamma + 1, vocab].
        """
        return record.p

    def init(self, params, prompts, prompt_lengths, cache_len: int) -> LoopState:
        """Prefills the inner decoder's models (the inner loop state is the drafter's state)."""
        inner = dataclasses.replace(self.inner, cache_len=cache_len)
        key = jax.random.PRNGKey(0)  # replaced by the outer step's key in every `propose`
        return inner.init(params, prompts, prompt_lengths, key, cache_len, -1)

    def propose(self, params, state: LoopState, seq: Sequences, key, gamma: int) -> Proposal:
        """Runs inner steps until every active row has >= gamma + 1 new tokens; drafts gamma."""
        start = seq.lengths  # [batch]
        need = gamma + 1
        batch = start.shape[0]
        inner_seq = Sequences(seq.tokens, seq.lengths, jnp.zeros_like(seq.num_generated), seq.done)
        # fold_in(key, 0): never the outer verification's fold_in(key, gamma).
        s = state.replace(
            seq=inner_seq, step=jnp.zeros((), jnp.int32), key=jax.random.fold_in(key, 0)
        )
        q = jnp.zeros((batch, gamma, self.vocab_size), jnp.float32)  # [batch, gamma, vocab]

        def stop_full_rows(s):
            full = s.seq.lengths - start >= need  # [batch]
            return s.replace(seq=s.seq.replace(done=seq.done | full))

        def body(carry):
            s, q = carry
            before = s.seq.lengths  # [batch]
            s, record = self.inner.recorded_step(params, s)
            q = write_rows(q, self.draft_law(record), before - start)  # past gamma: dropped
            return stop_full_rows(s), q

        s, q = jax.lax.while_loop(lambda c: ~jnp.all(c[0].seq.done), body, (stop_full_rows(s), q))
        index = jnp.minimum(start[:, None] + jnp.arange(gamma)[None, :], seq.tokens.shape[1] - 1)
        tokens = jnp.take_along_axis(s.seq.tokens, index, axis=1)  # [batch, gamma]
        state = s.replace(key=state.key, seq=seq)
        # The inner models' NaN (the middle's logits, the small draft's q), which a greedy q's
        # one-hot rows cannot show: the inner loop's own flags.
        nan = s.stats.nan_rows != 0  # [batch]
        return Proposal(tokens, q, None, state, calls=gamma, num_calls=s.step, draft_nan=nan)

    def commit(self, state: LoopState, verdict: Verdict) -> LoopState:
        """Rolls the inner models back to the accepted prefix (lengths_before + num_accepted)."""
        t_state, d_state = state.model_states
        t_state = self.inner.commit_target(
            t_state, verdict.lengths_before, verdict.num_accepted, None, verdict.active
        )
        d_state = self.inner.drafter.commit(d_state, verdict)
        return state.replace(model_states=(t_state, d_state))
