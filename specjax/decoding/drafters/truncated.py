"""A γ policy over any drafter: the drafter proposes up to gamma_max tokens, the policy keeps a
prefix per row.

`AdaptiveDrafter` runs a model's draft loop and stops it early, which saves draft calls. A
drafter that is not a model (prompt lookup, a feature head) proposes all at once, so
`TruncatedDrafter` applies the same policy afterwards, per iteration and per row:
  1. the inner drafter proposes its tokens (num_drafted of them if it says so, else gamma_max);
  2. the row keeps m = min(budget, that count, 1 + the first position whose token the policy's
     `keep_drafting` rejects on the draft's own probability of it), and `Proposal.num_drafted`
     carries m, so the rule verifies the first m tokens and draws its extra token at m + 1;
     positions past m are zeroed;
  3. `commit` passes the verdict to the inner drafter (n <= m accepted, then the next token: what
     any drafter already handles) and lets the policy see (m, n); a row that proposed nothing
     (a lookup miss) tells the policy nothing.
Lossless for the reason every policy is (`gamma_policy.py`): m depends on the past and on the
draft's own tokens and probabilities, never on the target's p or the verifier's draws, and a
rule verifying a prefix of a proposal is exact.

What it saves: verification width (with the decoder's `verify_widths`, the target scores only
the longest kept row), and the acceptance work past m; not the inner drafter's calls. Confidence
is read from the proposal's probs: a deterministic proposal (probs None, lookup) has none, and
under a greedy warper q is a point mass (confidence 1), so there only the budget cuts
(`AdaptiveDrafter` reads a model's raw logits instead).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
from flax import struct

from specjax.decoding.drafters.base import Verdict, check_gamma, feature_layers, reads_features
from specjax.decoding.drafters.gamma_policy import GammaPolicy, check_gamma_max
from specjax.decoding.state import Sequences


@struct.dataclass
class TruncatedState:
    """The inner drafter's state, the policy's per-row state, the last proposal's kept count."""

    inner: Any
    policy: Any
    num_drafted: jnp.ndarray  # int32 [batch]


@dataclasses.dataclass(frozen=True)
class TruncatedDrafter:
    """`inner`'s proposals, cut per row to the length `policy` decides (module docstring).

    Attributes:
      inner: any Drafter proposing up to gamma_max tokens (a feature-reading one too: the
        wrapper declares what it declares).
      policy: a γ policy (`decoding/drafters/gamma_policy.py`).
      gamma_max: the most tokens a row drafts (the decoder's `gamma`).
    """

    inner: Any
    policy: GammaPolicy
    gamma_max: int

    def __post_init__(self):
        check_gamma_max(self.gamma_max)

    @property
    def vocab_size(self) -> int:
        return self.inner.vocab_size

    @property
    def model(self):
        return self.inner.model

    @property
    def reads_features(self) -> bool:
        return reads_features(self.inner)

    @property
    def feature_layers(self) -> tuple:
        return feature_layers(self.inner)

    @property
    def target(self):
        return getattr(self.inner, "target", None)

    variable_length = True  # rows keep 1..gamma_max tokens: verify only as wide as needed

    def init(self, params, prompts, prompt_lengths, cache_len: int, *features) -> TruncatedState:
        """The inner drafter's init (with the prompt's features when it reads them)."""
        batch = prompts.shape[0]
        return TruncatedState(
            inner=self.inner.init(params, prompts, prompt_lengths, cache_len, *features),
            policy=self.policy.init(batch, self.gamma_max),
            num_drafted=jnp.zeros((batch,), jnp.int32),
        )

    def check_gamma(self, gamma: int) -> None:
        """Raises ValueError unless gamma is gamma_max and the inner drafter takes it."""
        if gamma != self.gamma_max:
            raise ValueError(f"TruncatedDrafter built for gamma_max={self.gamma_max}, got {gamma}")
        check_gamma(self.inner, gamma)

    def propose(self, params, state: TruncatedState, seq: Sequences, key, gamma: int):
        """The inner proposal with num_drafted cut to the policy's count."""
        self.check_gamma(gamma)
        p = self.inner.propose(params, state.inner, seq, key, gamma)
        batch = seq.lengths.shape[0]
        count = jnp.full((batch,), gamma, jnp.int32) if p.num_drafted is None else p.num_drafted
        budget = jnp.broadcast_to(self.policy.budget(state.policy, gamma), (batch,))
        keep = jnp.minimum(count, budget).astype(jnp.int32)
        if getattr(self.policy, "uses_confidence", False) and p.probs is not None:
            conf = jnp.take_along_axis(p.probs, p.tokens[:, :, None], axis=2)[:, :, 0]
            stop = ~self.policy.keep_drafting(conf)  # [batch, gamma]: stop after this token
            first = jnp.where(stop.any(axis=1), jnp.argmax(stop, axis=1) + 1, gamma)
            keep = jnp.minimum(keep, first.astype(jnp.int32))
        kept = jnp.arange(gamma)[None, :] < keep[:, None]  # [batch, gamma]
        tokens = jnp.where(kept, p.tokens, 0)
        probs = None if p.probs is None else jnp.where(kept[:, :, None], p.probs, 0.0)
        new = state.replace(inner=p.state, num_drafted=keep)
        return p.replace(tokens=tokens, probs=probs, num_drafted=keep, state=new)

    def commit(self, state: TruncatedState, verdict: Verdict) -> TruncatedState:
        """The inner drafter's commit; the policy sees (kept, accepted) of rows that drafted."""
        informative = verdict.active & (state.num_drafted > 0)
        policy = self.policy.update(
            state.policy, state.num_drafted, verdict.num_accepted, informative, self.gamma_max
        )
        return state.replace(inner=self.inner.commit(state.inner, verdict), policy=policy)
