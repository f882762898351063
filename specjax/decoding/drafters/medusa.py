"""`MedusaDrafter`: γ tokens from K Medusa heads in one call on the target's last true feature.

It reads the target's features (`reads_features = True`, `base.py`). With L a row's length
when `propose` is called, the newest feature the target has produced is f_{L-2}: the hidden
state after the last accepted token, whose own next token (the correction or bonus token,
x_{L-1}) the target has already emitted. Head i's q_i is a proposal for the token at L - 2 + 1
+ i, so heads 1..γ propose x_L .. x_{L+γ-1}, each drawn from its own q_i with key
fold_in(key, i - 1). Every q_i is the law its token was drawn from, so every lossless rule
applies; deterministic top-1 drafts (point masses) are the t = 0 limit of the same code, since
the warper is greedy there.

The state is that one feature per row: `init` takes f_{P-2} from the prompt's features (zeros
for a one-token prompt), `commit` takes `Verdict.features[n]` (n = drafts accepted).
Medusa's own typical acceptance at t > 0 is lossy: it is offered only through the lossy rules
(`rules/lossy.py`), never by default.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from specjax.decoding.drafters.base import Proposal, Verdict
from specjax.decoding.sampling import Warper, check_warper, sample_from_probs
from specjax.decoding.state import Sequences
from specjax.models.draft_vocab import full_rows


@struct.dataclass
class MedusaState:
    """last: [batch, embed] the target's hidden state after the last accepted token."""

    last: jax.Array


@dataclasses.dataclass(frozen=True)
class MedusaDrafter:
    """Chain drafter over `MedusaHeads` (models/medusa_heads.py).

    Attributes:
      heads: the MedusaHeads (its `target` must be the decoder's target).
      warper: the decoder's warper.
    """

    heads: object
    warper: Warper
    reads_features = True

    def __post_init__(self):
        check_warper(self.warper)

    @property
    def vocab_size(self) -> int:
        return self.heads.vocab_size

    @property
    def model(self):
        return self.heads

    @property
    def target(self):
        return self.heads.target

    def init(self, params, prompts, prompt_lengths, cache_len: int, features):
        """The prompt's last fed feature, f_{P-2} (zeros for a one-token prompt)."""
        del params, prompts, cache_len
        index = jnp.maximum(prompt_lengths - 2, 0)[:, None, None]  # [batch, 1, 1]
        last = jnp.take_along_axis(features, index, axis=1)[:, 0]  # [batch, embed]
        return MedusaState(jnp.where((prompt_lengths >= 2)[:, None], last, 0.0))

    def check_gamma(self, gamma: int) -> None:
        """Raises ValueError when gamma exceeds the heads: each drafted position needs one."""
        if gamma > self.heads.num_heads:
            raise ValueError(
                f"gamma={gamma} exceeds the {self.heads.num_heads} Medusa heads: each drafted "
                "position needs its own head"
            )

    def propose(self, params, state: MedusaState, seq: Sequences, key, gamma: int) -> Proposal:
        """gamma tokens, token i from head i's q (key fold_in(key, i - 1)), in one call."""
        self.check_gamma(gamma)
        del seq
        target_params, head_params = params
        ids = self.heads.draft_ids
        if ids is None:
            logits = self.heads.logits(target_params, head_params, state.last)[:, :gamma]
        else:  # draws over the N draft ids alone (q is 0 off them): the same law, cheaper
            logits = self.heads.draft_logits(head_params, state.last)[:, :gamma]
        if self.warper.ends_greedy:  # the argmax each one-hot q puts its mass on
            tokens, q = self.warper.draw(key, logits)  # [batch, gamma], [batch, gamma, V]
        else:
            q = self.warper.probs(logits)  # [batch, gamma, V]: V = vocab, or N draft ids
            tokens = jnp.stack(
                [sample_from_probs(jax.random.fold_in(key, i), q[:, i]) for i in range(gamma)],
                axis=1,
            )  # [batch, gamma]
        if ids is not None:  # back to token ids and full rows for the rule
            tokens = jnp.asarray(ids, jnp.int32)[tokens]
            q = full_rows(q, ids, self.vocab_size, fill=0.0)
        return Proposal(tokens, q, None, state, calls=1)

    def commit(self, state: MedusaState, verdict: Verdict) -> MedusaState:
        """The feature after the last accepted token: Verdict.features[:, n]."""
        index = verdict.num_accepted[:, None, None]  # [batch, 1, 1]
        last = jnp.take_along_axis(verdict.features, index, axis=1)[:, 0]
        return MedusaState(jnp.where(verdict.active[:, None], last, state.last))
