"""Speculative beam search: the target's beam search replayed along drafted beam paths.

Each iteration, for every batch row:
  1. propose: the drafter extends each of the B live beams by γ tokens (its greedy chain:
     a `ModelDrafter` with the greedy warper, or any `Drafter`), in the same batch·B row layout
     as the beams;
  2. score: the target scores [last, d_1..d_γ] of every beam in one call ([batch·B, γ+1]),
     giving its log-probabilities after each beam followed by d_1..d_k, k = 0..γ;
  3. replay: the ordinary beam-search step (`BeamSteps.select`) runs on those log-probabilities,
     step after step, for as long as every live beam it selects is a drafted prefix, i.e. beam
     j of the new set continues the row of its parent with that row's next drafted token, and
     no two beams share a row. The first step only needs the depth-0 distributions, which
     every row has; the step that leaves the drafted paths is still computed from the target's
     own distributions, so each iteration takes 1..γ+1 exact beam-search steps;
  4. commit: every model state takes the rows its new beams descend from (`gather_rows`) and
     rolls back to what those beams contain (target: length L - 1 + m after m steps; the
     drafter's `commit` with m - 1 accepted tokens).
Every selection is `select` on the target's log-probabilities for the beams as they are, so
the finished hypotheses, their scores and early stopping equal `BeamSearchDecoder`'s. The one
difference is float32 roundoff: the target's logits for a prefix come from a call over γ+1 new
tokens instead of one, so scores agree to ~1e-6 (tests allow 1e-4 absolute), and tokens are
identical unless two candidates tie to within that roundoff (as for greedy speculative
decoding).

Why one greedy chain per beam and not a draft beam search: in the [batch·B, γ+1] layout each
target row is a live beam's own cache row, so it can hold one path. A draft beam search's B
paths may share roots and leave other live beams without a row, whose depth-0 distributions the
first replayed step needs (it would cost a second target call). The greedy chain of every beam
is the path its best child starts, the path the target's beam search keeps when its beams do
not branch. What this cannot accept: a step where the target keeps two children of one beam
(or a child other than the drafted one); that step is still taken, then the iteration ends.
Measured on the mini python pair (experiments/extensions/BEAM.md), that is what limits it: the
target drafting for itself accepts no more than the distilled draft. The next step is a token
tree per beam row (`tree.py`'s positions and mask, rooted at the beam's last token, e.g. two
children at depth 1 then chains): beams of one row would then sit on different nodes, and the
commit would compact each new beam's path with the cache's `select` after gathering its row.

The loop is `loop.py`'s `LoopState` and `beam.py`'s jitted `while_loop`: beam decoders return
their finished hypotheses, not a `GenerationResult`, so they share the driver's pieces
(`prepare`, params checks, `running`) but not its `generate`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from specjax.decoding.beam import (
    BeamSteps,
    count_step,
    flat_index,
    gather_rows,
    generate_beams,
)
from specjax.decoding.drafters import ModelDrafter, Verdict, is_drafter
from specjax.decoding.loop import LoopState, resolve_cache_len
from specjax.decoding.sampling import make_warper
from specjax.decoding.state import last_tokens
from specjax.models.interface import check_vocab
from specjax.models.kv_cache import rollback


@dataclasses.dataclass(frozen=True)
class SpeculativeBeamDecoder(BeamSteps):
    """Beam search over `target`, γ+1 steps per target call at best (module docstring).

    Attributes:
      target: any specjax model.
      draft: a model (drafted greedily: `ModelDrafter` with the greedy warper) or a `Drafter`.
      gamma: drafted tokens per beam and iteration (static, >= 1).
      num_beams: beam width B >= 1 (static).
      length_penalty: as `BeamSearchDecoder`'s.
      cache_len: positions per row (None: the models' position limit, else 512).
      min_bucket: smallest padded prompt width.
    """

    target: Any
    draft: Any
    gamma: int = 4
    num_beams: int = 4
    length_penalty: float = 1.0
    cache_len: int | None = None
    min_bucket: int = 16

    def __post_init__(self):
        self.check_beam_fields()
        if isinstance(self.gamma, bool) or not isinstance(self.gamma, int) or self.gamma < 1:
            raise ValueError(f"gamma must be an integer >= 1; got {self.gamma!r}")
        check_vocab(self.target, self.draft)
        resolve_cache_len(self)

    @property
    def drafter(self):
        """The proposer: the draft itself if it is a `Drafter`, else its greedy chain."""
        return self.draft if is_drafter(self.draft) else ModelDrafter(self.draft, make_warper(0))

    @property
    def models(self) -> tuple:
        return (self.target, self.drafter.model)

    @property
    def lookahead(self) -> int:
        return self.gamma

    @property
    def tokens_per_step(self) -> int:
        return self.gamma + 1

    def init(self, params, prompts, prompt_lengths, key, max_new_tokens, eos_id) -> LoopState:
        """Prefills target and drafter (every prompt token but the last), once per beam."""
        target_params, draft_params = params
        t_state = self.prefill(self.target, target_params, prompts, prompt_lengths)
        d_state = self.drafter.init(draft_params, prompts, prompt_lengths, self.cache_len)
        d_state = jax.tree.map(lambda x: jnp.repeat(x, self.num_beams, axis=0), d_state)
        return self.new_beam_state(
            prompts, prompt_lengths, key, max_new_tokens, eos_id, (t_state, d_state), self.gamma
        )

    def step(self, params, s: LoopState) -> LoopState:
        """Propose, score, replay, commit (module docstring) for every row (jittable)."""
        target_params, draft_params = params
        t_state, d_state = s.model_states
        beams, gamma = self.num_beams, self.gamma
        batch = s.extra.done.shape[0]
        going = ~s.extra.done  # [batch]
        flat_active = jnp.repeat(going, beams)  # [batch·B]
        key = jax.random.fold_in(s.key, s.step)
        proposal = self.drafter.propose(draft_params, d_state, s.seq, key, gamma)
        drafted = proposal.tokens  # [batch·B, gamma]
        if proposal.num_drafted is not None:  # a row drafted fewer: its later slots never match
            drafted = jnp.where(
                jnp.arange(gamma)[None, :] < proposal.num_drafted[:, None], drafted, -1
            )
        fed = jnp.concatenate([last_tokens(s.seq, 1), jnp.maximum(drafted, 0)], axis=1)
        logits, t_state = self.target.apply(
            target_params, t_state, fed, flat_active.astype(jnp.int32) * (gamma + 1)
        )  # [batch·B, gamma + 1, vocab]
        logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        logp = logp.reshape(batch, beams, gamma + 1, -1)  # [batch, B, gamma + 1, vocab]
        drafted = drafted.reshape(batch, beams, gamma)
        lengths_before = s.seq.lengths  # [batch·B]

        def replay(carry):
            k, s, row, go, steps = carry
            # [batch, B, vocab]: the target after each live beam (row[b, j] followed by k drafts)
            here = jnp.take_along_axis(logp[:, :, k], row[:, :, None], axis=1)
            s, parent, token = self.select(s, here, go)
            row = jnp.where(go[:, None], jnp.take_along_axis(row, parent, axis=1), row)
            steps = steps + go.astype(jnp.int32)
            nxt = jnp.take_along_axis(drafted[:, :, jnp.minimum(k, gamma - 1)], row, axis=1)
            on_path = jnp.all(token == nxt, axis=1) & (k < gamma)  # [batch]
            distinct = jnp.all(
                (row[:, :, None] != row[:, None, :]) | jnp.eye(beams, dtype=bool)[None], axis=(1, 2)
            )
            go = go & on_path & distinct & ~s.extra.done
            return k + 1, s, row, go, steps

        # A while loop, not a fixed γ+1 steps: replaying stops once every row left its paths.
        row0 = jnp.broadcast_to(jnp.arange(beams)[None, :], (batch, beams))
        steps0 = jnp.zeros((batch,), jnp.int32)
        carry = (jnp.zeros((), jnp.int32), s, row0, going, steps0)
        _, s, row, _, steps = jax.lax.while_loop(lambda c: jnp.any(c[3]), replay, carry)

        index = flat_index(row)  # [batch·B] each new beam's row before the step
        flat_steps = jnp.repeat(steps, beams)  # [batch·B]
        t_state = rollback(gather_rows(t_state, index), lengths_before - 1 + flat_steps)
        d_state = gather_rows(proposal.state, index)
        verdict = Verdict(lengths_before, jnp.maximum(flat_steps - 1, 0), flat_active)
        d_state = self.drafter.commit(d_state, verdict)
        stats = count_step(s.stats, going, beams, steps, logits)
        stats = stats.replace(draft_calls=stats.draft_calls + proposal.calls)
        return s.replace(step=s.step + 1, model_states=(t_state, d_state), stats=stats)

    def generate(
        self, target_params, draft_params, prompts, key=None, max_new_tokens=16, eos_id=None
    ):
        """Speculative beam search for every prompt in one jitted call; returns a BeamResult.

        Args:
          target_params, draft_params: the two models' params.
          prompts: list of 1-D token sequences (ragged), or int [batch, P].
          key: PRNG key for a sampling drafter (None: a fixed key; greedy drafts ignore it).
          max_new_tokens: >= 1; traced, so new values do not recompile.
          eos_id: a hypothesis ends at this token (None: never).
        """
        return generate_beams(
            self, (target_params, draft_params), prompts, max_new_tokens, eos_id, key
        )
