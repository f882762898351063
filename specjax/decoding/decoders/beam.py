"""Beam search over the target, on the shared loop driver.

Each batch row keeps `num_beams` live hypotheses (beams). A step scores every beam's children
(sum of log-probabilities so far + log_softmax of the next token), keeps the best 2B of the
B·V candidates (ties: lower beam, then lower token id, first), and then, in rank order:
  * a candidate ending in EOS among the first B ranks becomes a finished hypothesis;
  * the best B candidates that do not end in EOS are the next live beams.
A finished hypothesis of n generated tokens (its EOS included) with log-probability s scores
s / n ** length_penalty (Hugging Face's convention: > 0 favours longer outputs). Each row keeps
its best B finished hypotheses (on a tie the earlier one stays ahead). When a row has generated
`max_new_tokens` tokens, its live beams are finished as they are (in that order, after the
step's EOS candidates).

Early stopping (Hugging Face's `early_stopping="never"`): a row stops once it holds B finished
hypotheses and no live beam can still beat the worst of them. Log-probabilities never rise, so
a live beam's best reachable score is s / L ** length_penalty with L = max_new_tokens when the
penalty is > 0 and L = n + 1 (its shortest ending) otherwise; the row stops when that bound of
its best beam is below its worst kept score. The result is therefore the same as running every
row to `max_new_tokens` (tests/test_beam.py checks it against a reference without early
stopping).

Layout: the B beams of batch row b are rows b·B .. b·B + B - 1 of the loop's `Sequences` and of
every model state; choosing a beam's parent gathers those rows (`gather_rows`). The loop state
is `loop.LoopState` with a `BeamState` in `extra`; `loop.running` stops the loop, and
`generate_beams` turns the final state into a `BeamResult`. `BeamSteps.select` is the pure
selection step that `speculative_beam.py` replays along drafted paths.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from specjax import runtime
from specjax.decoding import arguments, loop
from specjax.decoding.argmax import top_k
from specjax.decoding.loop import LoopState
from specjax.decoding.prefill import prefill
from specjax.decoding.state import DecodeStats, Sequences, last_tokens, nan_flags, nan_message
from specjax.models.kv_cache import write_rows


@struct.dataclass
class BeamState:
    """Per-row beam bookkeeping beside the loop's `Sequences` (which hold the live beams).

    Attributes:
      scores: float32 [batch, beams] live beams' summed log-probabilities (-inf: no beam).
      fin_tokens: int32 [batch, beams, cache_len] finished hypotheses, prompt included.
      fin_lengths: int32 [batch, beams] their total lengths (0: empty slot).
      fin_scores: float32 [batch, beams] their length-penalised scores, best first (-inf: empty).
      done: bool [batch] the row has stopped (early stopping or max_new_tokens).
    """

    scores: jax.Array
    fin_tokens: jax.Array
    fin_lengths: jax.Array
    fin_scores: jax.Array
    done: jax.Array


@struct.dataclass
class BeamResult:
    """What beam search returns.

    Attributes:
      tokens: int32 [batch, beams, cache_len] the finished hypotheses (prompt + generated),
        best first; valid up to `lengths`.
      lengths: int32 [batch, beams] total lengths (0: fewer than `beams` hypotheses exist).
      prompt_lengths: int32 [batch].
      scores: float32 [batch, beams] sum log-probability / generated_length ** length_penalty.
      stats: DecodeStats over the batch·beams rows (`target_calls`: forward calls after prefill).
    """

    tokens: jax.Array
    lengths: jax.Array
    prompt_lengths: jax.Array
    scores: jax.Array
    stats: DecodeStats

    def new_tokens(self) -> list[list[np.ndarray]]:
        """Generated tokens of each row's hypotheses, best first, as host arrays."""
        tokens, lengths, starts = jax.device_get((self.tokens, self.lengths, self.prompt_lengths))
        return [
            [tokens[b, k, starts[b] : lengths[b, k]] for k in range(tokens.shape[1])]
            for b in range(tokens.shape[0])
        ]


def check_beam_args(num_beams, length_penalty, vocab_size) -> None:
    """Raises ValueError naming the argument for a bad beam width or length penalty."""
    if isinstance(num_beams, bool) or not isinstance(num_beams, (int, np.integer)):
        raise ValueError(f"num_beams must be an integer >= 1; got {num_beams!r}")
    if num_beams < 1:
        raise ValueError(f"num_beams must be >= 1; got {num_beams}")
    if isinstance(length_penalty, bool) or not isinstance(length_penalty, (int, float)):
        raise ValueError(f"length_penalty must be a finite number; got {length_penalty!r}")
    if not math.isfinite(length_penalty):
        raise ValueError(f"length_penalty must be finite; got {length_penalty}")
    if vocab_size < 2:
        raise ValueError(f"beam search needs a vocabulary of >= 2 tokens; got {vocab_size}")


def gather_rows(tree, index: jax.Array):
    """Takes rows `index` [rows] (axis 0) of every leaf of a per-row pytree (a model state)."""
    return jax.tree.map(lambda x: jnp.take(x, index, axis=0), tree)


def flat_index(parent: jax.Array) -> jax.Array:
    """int32 [batch·beams]: the flat row of each beam's parent (parent: int32 [batch, beams])."""
    batch, beams = parent.shape
    return (jnp.arange(batch)[:, None] * beams + parent).reshape(-1)


def _rows(x: jax.Array, beams: int) -> jax.Array:
    """A per-row flag [batch] spread to the batch·beams flat rows."""
    return jnp.repeat(x, beams, axis=0)


class BeamSteps:
    """Beam search's init and selection, shared by plain and speculative beam search.

    A subclass has the fields `target`, `num_beams`, `length_penalty`, `cache_len`.
    """

    @property
    def vocab_size(self) -> int:
        return self.target.vocab_size

    def check_beam_fields(self) -> None:
        """Validates the beam fields (ValueError naming them); length_penalty becomes a float."""
        check_beam_args(self.num_beams, self.length_penalty, self.target.vocab_size)
        object.__setattr__(self, "length_penalty", float(self.length_penalty))

    def prefill(self, model, params, prompts, prompt_lengths):
        """The model's state for every prompt token but the last, repeated for every beam."""
        state = model.init_state(prompts.shape[0], self.cache_len)
        state = prefill(model, params, state, prompts, prompt_lengths)
        return jax.tree.map(lambda x: jnp.repeat(x, self.num_beams, axis=0), state)

    def new_beam_state(self, prompts, prompt_lengths, key, max_new_tokens, eos_id, states, gamma):
        """A LoopState over batch·beams rows whose first beam per row is live (score 0)."""
        batch, beams = prompts.shape[0], self.num_beams
        s = loop.new_state(
            jnp.repeat(prompts, beams, axis=0),
            jnp.repeat(prompt_lengths, beams, axis=0),
            key,
            max_new_tokens,
            eos_id,
            self.cache_len,
            gamma,
            states,
        )
        scores = jnp.full((batch, beams), -jnp.inf, jnp.float32).at[:, 0].set(0.0)
        extra = BeamState(
            scores=scores,
            fin_tokens=jnp.zeros((batch, beams, self.cache_len), jnp.int32),
            fin_lengths=jnp.zeros((batch, beams), jnp.int32),
            fin_scores=jnp.full((batch, beams), -jnp.inf, jnp.float32),
            done=jnp.zeros((batch,), bool),
        )
        return s.replace(extra=extra)

    def select(self, s: LoopState, logp: jax.Array, going: jax.Array):
        """One beam-search step from the live beams' next-token log-probabilities.

        Args:
          s: the loop state (live beams in `s.seq`, bookkeeping in `s.extra`).
          logp: float32 [batch, beams, vocab] log-probabilities after each live beam.
          going: bool [batch] rows that take this step (others are left as they are).

        Returns:
          (new state, parent int32 [batch, beams], token int32 [batch, beams]): live beam j
          is now live beam parent[j] followed by token[j] (identity for rows not going).
        """
        b_state: BeamState = s.extra
        batch, beams, vocab = logp.shape
        going = going & ~b_state.done
        n = s.seq.num_generated.reshape(batch, beams)[:, 0] + 1  # [batch] length after the step
        cand = (b_state.scores[:, :, None] + logp).reshape(batch, beams * vocab)
        top, index = top_k(cand, 2 * beams)  # [batch, 2B] best first
        parent, token = index // vocab, index % vocab  # [batch, 2B]
        rank = jnp.arange(2 * beams)[None, :]
        is_eos = (token == s.eos_id) & (s.eos_id >= 0)  # [batch, 2B]
        # The first B candidates that do not end in EOS become the live beams, in rank order.
        live = jax.lax.top_k(-jnp.where(is_eos, rank + 2 * beams, rank), beams)[1]  # [batch, B]
        new_parent = jnp.take_along_axis(parent, live, axis=1)  # [batch, B]
        new_token = jnp.take_along_axis(token, live, axis=1)
        new_scores = jnp.take_along_axis(top, live, axis=1)

        # Candidate finished hypotheses: EOS among the first B ranks, then (at the budget) the
        # live beams; merged with the kept ones, earlier first on ties (top_k is stable).
        penalty = jnp.power(n.astype(jnp.float32), self.length_penalty)[:, None]  # [batch, 1]
        rows = jnp.arange(batch)[:, None] * beams
        eos_seq = jnp.take(s.seq.tokens, (rows + parent).reshape(-1), axis=0)
        eos_seq = write_rows(
            eos_seq,
            jnp.full((batch * 2 * beams, 1), s.eos_id),
            _rows(s.seq.lengths[::beams], 2 * beams),
        ).reshape(batch, 2 * beams, -1)
        eos_score = jnp.where(is_eos & (rank < beams), top / penalty, -jnp.inf)  # [batch, 2B]
        seq = self.extend(s.seq, new_parent, new_token)
        at_budget = n >= s.max_new_tokens  # [batch]
        live_score = jnp.where(at_budget[:, None], new_scores / penalty, -jnp.inf)  # [batch, B]
        length = s.seq.lengths.reshape(batch, beams)[:, :1] + 1  # [batch, 1]
        fin_scores, pick = top_k(
            jnp.concatenate([b_state.fin_scores, eos_score, live_score], axis=1), beams
        )  # [batch, B]
        all_tokens = jnp.concatenate(
            [b_state.fin_tokens, eos_seq, seq.tokens.reshape(batch, beams, -1)], axis=1
        )  # [batch, 4B, cache_len]
        fin_tokens = jnp.take_along_axis(all_tokens, pick[:, :, None], axis=1)
        all_lengths = jnp.concatenate(
            [b_state.fin_lengths, jnp.broadcast_to(length, (batch, 3 * beams))], axis=1
        )
        fin_lengths = jnp.where(
            jnp.isfinite(fin_scores), jnp.take_along_axis(all_lengths, pick, axis=1), 0
        )

        # Early stopping: no live beam can reach the worst kept score (module docstring).
        best_len = jnp.where(self.length_penalty > 0, s.max_new_tokens, n + 1)
        bound = new_scores[:, 0] / jnp.power(best_len.astype(jnp.float32), self.length_penalty)
        worst = fin_scores[:, -1]
        done = at_budget | (jnp.isfinite(worst) & (bound < worst))

        new = BeamState(new_scores, fin_tokens, fin_lengths, fin_scores, done)
        keep = lambda old, upd: jnp.where(  # noqa: E731  rows not going keep their old values
            going.reshape((batch,) + (1,) * (upd.ndim - 1)), upd, old
        )
        b_state = jax.tree.map(keep, b_state, new)
        flat_going = _rows(going, beams)
        seq = jax.tree.map(
            lambda old, upd: jnp.where(flat_going.reshape((-1,) + (1,) * (upd.ndim - 1)), upd, old),
            s.seq,
            seq,
        )
        seq = seq.replace(done=_rows(b_state.done, beams))
        identity = jnp.broadcast_to(jnp.arange(beams)[None, :], (batch, beams))
        new_parent = jnp.where(going[:, None], new_parent, identity)
        return s.replace(seq=seq, extra=b_state), new_parent, new_token

    @staticmethod
    def extend(seq: Sequences, parent: jax.Array, token: jax.Array) -> Sequences:
        """The live beams' sequences after `select`: parents' rows, each plus its token."""
        rows = gather_rows(seq, flat_index(parent))
        tokens = write_rows(rows.tokens, token.reshape(-1, 1), rows.lengths)
        return rows.replace(
            tokens=tokens, lengths=rows.lengths + 1, num_generated=rows.num_generated + 1
        )

    @staticmethod
    def result(s: LoopState) -> BeamResult:
        """The finished hypotheses of the final loop state."""
        b_state: BeamState = s.extra
        beams = b_state.scores.shape[1]
        return BeamResult(
            tokens=b_state.fin_tokens,
            lengths=b_state.fin_lengths,
            prompt_lengths=s.prompt_lengths[::beams],
            scores=b_state.fin_scores,
            stats=s.stats,
        )


@dataclasses.dataclass(frozen=True)
class BeamSearchDecoder(BeamSteps):
    """Beam search over `target` (module docstring), one target call per step.

    Attributes:
      target: any specjax model (models/interface.py).
      num_beams: beam width B >= 1 (static).
      length_penalty: finished score = log-probability / generated_length ** length_penalty.
      cache_len: positions per row (None: the model's position limit, else 512).
      min_bucket: smallest padded prompt width.
    """

    target: Any
    num_beams: int = 4
    length_penalty: float = 1.0
    cache_len: int | None = None
    min_bucket: int = 16

    def __post_init__(self):
        self.check_beam_fields()
        arguments.resolve_cache_len(self)

    @property
    def models(self) -> tuple:
        return (self.target,)

    lookahead = 0
    tokens_per_step = 1

    def init(self, params, prompts, prompt_lengths, key, max_new_tokens, eos_id) -> LoopState:
        """Prefills the prompts (all but their last token) once per beam (jittable)."""
        (target_params,) = params
        state = self.prefill(self.target, target_params, prompts, prompt_lengths)
        return self.new_beam_state(
            prompts, prompt_lengths, key, max_new_tokens, eos_id, (state,), 0
        )

    def step(self, params, s: LoopState) -> LoopState:
        """Feeds every live beam's last token and selects the next beams (jittable)."""
        (target_params,) = params
        (t_state,) = s.model_states
        beams = self.num_beams
        going = ~s.extra.done  # [batch]
        logits, t_state = self.target.apply(
            target_params, t_state, last_tokens(s.seq, 1), _rows(going, beams).astype(jnp.int32)
        )  # [batch·B, 1, vocab]
        logp = jax.nn.log_softmax(logits[:, 0].astype(jnp.float32), axis=-1)
        s, parent, _ = self.select(s, logp.reshape(going.shape[0], beams, -1), going)
        t_state = gather_rows(t_state, flat_index(parent))
        stats = count_step(s.stats, going, beams, jnp.ones_like(going, jnp.int32), logits)
        return s.replace(step=s.step + 1, model_states=(t_state,), stats=stats)

    def generate(self, params, prompts, key=None, max_new_tokens: int = 16, eos_id=None):
        """Beam search for every prompt in one jitted call; returns a BeamResult.

        Args:
          params: the target's params.
          prompts: list of 1-D token sequences (ragged), or int [batch, P].
          key: unused (beam search is deterministic); accepted for the common signature.
          max_new_tokens: >= 1; traced, so new values do not recompile.
          eos_id: a row's hypothesis ends at this token (None: never).
        """
        return generate_beams(self, (params,), prompts, max_new_tokens, eos_id, key)


def count_step(stats: DecodeStats, going, beams, steps, logits, draft_nan=None) -> DecodeStats:
    """Counters after one beam iteration: one target call; `steps` [batch] beam steps taken;
    `draft_nan` [batch·beams] or None: beams whose draft went NaN (speculative beam search)."""
    flat = _rows(going, beams)
    nan = jnp.isnan(logits).any(axis=tuple(range(1, logits.ndim)))
    return stats.replace(
        target_calls=stats.target_calls + 1,
        emitted=stats.emitted + _rows(steps * going, beams),
        iterations=stats.iterations + flat.astype(jnp.int32),
        nan_rows=stats.nan_rows
        | nan_flags(flat & nan, None if draft_nan is None else flat & draft_nan),
    )


@functools.partial(jax.jit, static_argnums=0)
def beam_jit(decoder, params, tokens, lengths, key, max_new_tokens, eos_id) -> BeamResult:
    """Prefill, the `lax.while_loop` over beam steps, and the result, as one program."""
    s = decoder.init(params, tokens, lengths, key, max_new_tokens, eos_id)
    s = jax.lax.while_loop(loop.running, lambda s: decoder.step(params, s), s)
    return decoder.result(s)


def generate_beams(decoder, params: tuple, prompts, max_new_tokens, eos_id, key=None):
    """Host side of a beam decoder's `generate`: checks, bucketing, the jitted loop.

    The loop driver's own `generate` returns a `GenerationResult` of single sequences; beam
    decoders share its checks and its `LoopState` and return their finished hypotheses.
    """
    runtime.check_process_settings()
    tokens, lengths = arguments.prepare(decoder, prompts, max_new_tokens)
    params = arguments.check_decoder_params(decoder, params)
    eos = arguments.eos_value(eos_id, decoder.vocab_size)
    key = jax.random.PRNGKey(0) if key is None else arguments.canonical_key(key)
    result = beam_jit(decoder, params, tokens, lengths, key, max_new_tokens, eos)
    message = nan_message(result.stats.nan_rows)
    if message is not None:
        raise ValueError(message)
    return result
