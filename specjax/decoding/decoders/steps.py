"""The speculative iteration: propose -> score -> verify -> emit -> commit, for every decoder.

`SpeculativeSteps` is what a chain (`speculative.py`) and a token tree (`tree.py`) share; each
part is a method a decoder may replace. `StepRecord` is what one step saw, for a hierarchical
drafter (`drafters/hierarchical.py`). The bookkeeping invariant is `speculative.py`'s: the
target cache holds a row's first L - 1 tokens at the start of an iteration.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from specjax.decoding import arguments, loop
from specjax.decoding.argmax import has_nan
from specjax.decoding.drafters.base import Verdict, feature_layers, proposal_nan, reads_features
from specjax.decoding.loop import LoopState
from specjax.decoding.prefill import prefill, prefill_features
from specjax.decoding.state import GenerationResult, emit, nan_flags


@struct.dataclass
class StepRecord:
    """What one speculative step saw, for a hierarchical drafter (`drafters/hierarchical.py`).

    Attributes:
      p: float32 [batch, width, vocab] the target's warped distribution at each scored position:
        p[:, j] is the law of the step's j-th emitted token given everything before it.
      proposal: the drafter's Proposal.
      num_accepted: int32 [batch] drafts kept (the step emitted num_accepted + 1 tokens).
    """

    p: jax.Array
    proposal: Any
    num_accepted: jax.Array


class SpeculativeSteps:
    """The speculative iteration, shared by every decoder that proposes, scores and verifies.

    One step is propose -> score -> verify -> emit -> commit, each part a method a decoder may
    replace: a chain (`SpeculativeDecoder`) and a token tree (`TreeSpeculativeDecoder`) differ
    only in how the target scores the proposal (`score`), which rule judges it (`verify`; a
    greedy chain reads its verdict off the target's argmax, `verify_point_mass`) and how the
    target's cache keeps what survived (`commit_target`). A subclass provides the
    fields `target`, `warper`, `cache_len`, `min_bucket` and the properties `drafter`,
    `lookahead` (draft positions a step writes: its proposal's width) and `depth` (positions
    counted in the statistics), plus `branch` (None for chains).
    """

    branch = None
    gamma_policy = None  # an adaptive-γ policy (SpeculativeDecoder's field): γ histogram counted

    # -- the loop driver's protocol --------------------------------------------------------

    @property
    def models(self) -> tuple:
        """(target, draft model): one entry per params argument."""
        return (self.target, self.drafter.model)

    @property
    def vocab_size(self) -> int:
        return self.target.vocab_size

    @property
    def tokens_per_step(self) -> int:
        return self.depth + 1

    def init(self, params, prompts, prompt_lengths, key, max_new_tokens, eos_id) -> LoopState:
        """Prefills the target and the drafter with every prompt token but the last."""
        target_params, draft_params = params
        t_state = self.target.init_state(prompts.shape[0], self.cache_len)
        if reads_features(self.drafter):
            t_state, hidden = prefill_features(
                self.target, target_params, t_state, prompts, prompt_lengths,
                feature_layers(self.drafter),
            )  # fmt: skip
            d_state = self.drafter.init(params, prompts, prompt_lengths, self.cache_len, hidden)
        else:
            t_state = prefill(self.target, target_params, t_state, prompts, prompt_lengths)
            d_state = self.drafter.init(draft_params, prompts, prompt_lengths, self.cache_len)
        s = loop.new_state(
            prompts,
            prompt_lengths,
            key,
            max_new_tokens,
            eos_id,
            self.cache_len,
            self.depth,
            (t_state, d_state),
            branch=self.branch,
        )
        if self.gamma_policy is not None:
            hist = jnp.zeros((self.depth + 1,), jnp.int32)  # [gamma + 1]
            s = s.replace(stats=s.stats.replace(drafted_hist=hist))
        return s

    def verify_point_mass(self, proposal, logits):
        """A verdict read off the target's logits without p, or None: `verify` decides (the
        default; `SpeculativeDecoder` reads a greedy target's argmax tokens)."""
        del proposal, logits
        return None

    def step(self, params, s: LoopState) -> LoopState:
        """One propose-score-verify-emit-commit iteration for every row."""
        return self.recorded_step(params, s)[0]

    def recorded_step(self, params, s: LoopState) -> tuple[LoopState, StepRecord]:
        """`step`, also returning what it saw (a decoder that drafts with this one needs p)."""
        target_params, draft_params = params
        t_state, d_state = s.model_states
        active = ~s.seq.done  # [batch]
        key = jax.random.fold_in(s.key, s.step)
        features = reads_features(self.drafter)
        proposal = self.drafter.propose(
            params if features else draft_params, d_state, s.seq, key, self.lookahead
        )
        scored = self.score(target_params, t_state, s.seq, proposal, active, features=features)
        logits, t_state = scored[:2]  # logits [batch, width, vocab]
        p = self.warper.probs(logits)  # [batch, width, vocab] (XLA drops it where unused)
        verdict = self.verify_point_mass(proposal, logits)
        if verdict is None:
            verdict = self.verify(jax.random.fold_in(key, self.lookahead), proposal, p)
        out, n, path = verdict

        old_len = s.seq.lengths
        seq, count = emit(s.seq, out, n + 1, s.eos_id, s.max_new_tokens)
        t_state = self.commit_target(t_state, old_len, n, path, active)
        next_token = jnp.take_along_axis(out, n[:, None], axis=1)[:, 0]  # [batch]
        hidden = self.accepted_features(scored[2], path) if features else None
        verdict = Verdict(old_len, n, active, path, next_token, hidden)
        d_state = self.drafter.commit(proposal.state, verdict)
        s = s.replace(
            step=s.step + 1,
            seq=seq,
            model_states=(t_state, d_state),
            stats=self._count(s.stats, proposal, logits, n, path, count, active),
        )
        return s, StepRecord(p, proposal, n)

    def _count(self, stats, proposal, logits, n, path, count, active):
        """The iteration's counters: calls, tokens, acceptance by position (depth), NaN rows."""
        accepted, tested, rank = self.acceptance_events(proposal, n, path, active)
        nan = has_nan(logits).any(axis=1)  # [batch]; the row max a greedy verify takes anyway
        nan_q = proposal_nan(proposal)  # [batch] or None
        nan_q = None if nan_q is None else active & nan_q
        calls = proposal.calls if proposal.num_calls is None else proposal.num_calls
        stats = stats.replace(
            target_calls=stats.target_calls + 1,
            draft_calls=stats.draft_calls + calls,
            emitted=stats.emitted + count,
            iterations=stats.iterations + active.astype(jnp.int32),
            accepted_at=stats.accepted_at + accepted.sum(0).astype(jnp.int32),
            nan_rows=stats.nan_rows | nan_flags(active & nan, nan_q),
            tested_at=stats.tested_at + tested.sum(0).astype(jnp.int32),
        )
        if rank is not None:
            stats = stats.replace(accepted_rank=stats.accepted_rank + rank.sum(0))
        if stats.drafted_hist is not None:
            size = stats.drafted_hist.shape[0]
            drafted = jax.nn.one_hot(proposal.num_drafted, size, dtype=jnp.int32)  # [batch, g+1]
            hist = (drafted * active[:, None]).sum(0).astype(jnp.int32)
            stats = stats.replace(drafted_hist=stats.drafted_hist + hist)
        return stats

    @staticmethod
    def running(s: LoopState) -> jax.Array:
        """Loop condition: some row still active."""
        return loop.running(s)

    # -- host-facing API -------------------------------------------------------------------

    def prepare(self, prompts, max_new_tokens):
        """Host-side validation and bucketing of prompts."""
        return arguments.prepare(self, prompts, max_new_tokens)

    def generate(
        self,
        target_params,
        draft_params,
        prompts,
        key,
        max_new_tokens: int,
        eos_id: int | None = None,
    ) -> GenerationResult:
        """Generates up to `max_new_tokens` per prompt in one jitted call.

        Every decoder is called alike: its models' params first (target, then draft), then
        keywords: `generate(target_params, draft_params, prompts=..., key=...,
        max_new_tokens=...)` (see `decoding/loop.py`); the positional form is the same.

        Args:
          target_params: target parameters.
          draft_params: draft parameters ({} for parameter-free drafts).
          prompts: list of 1-D token sequences (ragged), or int [batch, P].
          key: PRNG key.
          max_new_tokens: >= 1; traced, so new values do not recompile.
          eos_id: stop a row after this token (None: never).

        Returns:
          GenerationResult with per-call statistics (`.summary()` for α, tokens/iteration).
        """
        params = (target_params, draft_params)
        return loop.generate(self, params, prompts, key, max_new_tokens, eos_id)

    def stream(
        self,
        target_params,
        draft_params,
        prompts,
        key,
        max_new_tokens: int,
        eos_id: int | None = None,
    ):
        """Python-loop twin of `generate`: yields (tokens [batch, depth + 1], counts [batch]).

        Row b emitted tokens[b, :counts[b]] this iteration. Same step and keys as `generate`, so
        the output is identical; the generator's return value is the GenerationResult.
        """
        params = (target_params, draft_params)
        return (yield from loop.stream(self, params, prompts, key, max_new_tokens, eos_id))
