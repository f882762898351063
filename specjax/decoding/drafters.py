"""The proposer seam: a `Drafter` proposes tokens, the verifier judges them, `commit` rolls back.

A speculative iteration is propose -> score -> verify -> emit -> commit. The decoder owns the
target, the acceptance rule and the bookkeeping; everything about *where proposals come from*
sits behind this protocol:

    vocab_size: int
    model: the object whose params `propose` takes (a model, or a decoder for a nested drafter);
        `ShardedDecoder` asks it for `logical_axes()` to place those params
    init(params, prompts, prompt_lengths, cache_len) -> state        # prefill (jittable)
    propose(params, state, seq, key, gamma) -> Proposal              # jittable, static gamma
    commit(state, verdict) -> state                                  # roll back to what stayed

`seq` is the loop's `Sequences`: every committed token, including the verifier's correction or
bonus token, which the drafter has never seen. A drafter catches up from `seq` at its next
`propose` (that is how the pending-token invariant of `ModelDrafter` works), so `commit` only
has to say how much of what it proposed survived (`Verdict`).

Two future proposers checked against this protocol on paper before it was settled:
  * A speculative decoder as the draft of another (hierarchical speculation): `init` prefills the
    middle and small models into an inner `LoopState`; `propose` copies `seq` into the inner
    state, runs inner steps in a `lax.while_loop` until every row has >= gamma new tokens, and
    returns the first gamma with probs = the middle model's warped p at each of them (its verify
    call computes p at every emitted position; a token drawn from a residual is still an exact
    sample of M, so q = M's p is the right ratio denominator); `commit` sets the inner lengths to
    lengths_before + num_accepted (its caches roll back by length). Params nest as
    (middle_params, small_params) in the draft slot. Fits.
  * A token-tree proposer: a static topology on the drafter (parents, depths); `propose` returns
    tokens [batch, N - 1] and probs [batch, N - 1, vocab] for nodes 1..N-1 (rank order among
    siblings), drafted level by level with the models' `positions`/`mask` arguments; the tree
    verifier returns num_accepted and the accepted `path`, which `Verdict.path` carries to
    `commit`, where the drafter compacts its cache with the state's `select(starts, path)` before
    rolling back. Fits, with `Verdict.path` as the one tree-specific field.
Both are built: `SpeculativeDrafter` (hierarchical.py; it runs the inner steps until every row
has gamma + 1 new tokens, so the middle model never lags the sequence) and `TreeDrafter`.

Drafters here: `ModelDrafter` (any specjax model, one token per call in a scan: today's draft
loop) and `LookupDrafter` (copies the continuation of an earlier match of the sequence's suffix,
up to gamma tokens at once, and drafts fewer, or none, when the match has no more: the
`num_drafted` path of the acceptance rule). `AdaptiveDrafter` (adaptive_drafter.py) is a
`ModelDrafter` whose per-row γ a policy chooses (gamma_policy.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import jax
import jax.numpy as jnp
from flax import struct

from specjax.decoding.sampling import Warper, sample_from_probs
from specjax.decoding.state import Sequences, last_tokens
from specjax.models.kv_cache import rollback
from specjax.models.prompt_lookup import check_ngram_range, latest_suffix_match


@struct.dataclass
class Proposal:
    """What a drafter proposes for one iteration.

    Attributes:
      tokens: int32 [batch, gamma] drafted tokens (entries past num_drafted are padding).
      probs: float32 [batch, gamma, vocab] the distribution each token was drawn from, or None
        for deterministic proposals (point masses).
      num_drafted: int32 [batch] how many tokens each row drafted (<= gamma), or None: gamma.
      state: the drafter's state after proposing.
      calls: draft forward calls the proposal cost (static; for the statistics).
      valid: bool [batch, gamma] for token trees: which nodes were proposed (an invalid node is
        never tried), or None: all.
      num_calls: int32 [] draft forward calls when known only at run time (a draft loop that
        stops early), overriding `calls`; None: `calls`.
    """

    tokens: jax.Array
    probs: jax.Array | None
    num_drafted: jax.Array | None
    state: Any
    calls: int = struct.field(pytree_node=False, default=0)
    valid: jax.Array | None = None
    num_calls: jax.Array | None = None


@struct.dataclass
class Verdict:
    """What the verifier decided, for `Drafter.commit`.

    Attributes:
      lengths_before: int32 [batch] sequence lengths when the proposal was made.
      num_accepted: int32 [batch] proposed tokens kept (the sequence grew by num_accepted + 1).
      active: bool [batch] rows that were decoding (others must not change).
      path: int32 [batch, depth + 1] accepted tree nodes (node 0 the root), or None for chains.
    """

    lengths_before: jax.Array
    num_accepted: jax.Array
    active: jax.Array
    path: jax.Array | None = None


class Drafter(Protocol):
    """Structural type of a proposer (see the module docstring)."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def model(self) -> Any: ...

    def init(self, params, prompts, prompt_lengths, cache_len: int) -> Any: ...

    def propose(self, params, state, seq: Sequences, key, gamma: int) -> Proposal: ...

    def commit(self, state, verdict: Verdict) -> Any: ...


def is_drafter(obj) -> bool:
    """True for objects that offer the Drafter methods (models offer `apply` instead)."""
    return all(hasattr(obj, name) for name in ("propose", "commit", "init"))


@dataclasses.dataclass(frozen=True)
class ModelDrafter:
    """Drafts with any specjax model, one token per forward call, sampling from its warped q.

    Invariant (L = a row's sequence length when `propose` is called): the model's state holds
    the first L - k tokens, where k (1 or 2) is how many it still has to be fed. k is 2 exactly
    when the last iteration accepted every draft: the model never saw the last one. `propose`
    feeds the k pending tokens, samples x_1, then feeds x_1..x_{gamma-1} one call each (so it
    has seen L + gamma - 1 tokens); `commit` keeps min(L + n, that) of them.

    Attributes:
      model: the draft model.
      warper: the sampling warper (the decoder's: one warper for both models keeps it exact).
      unroll: unroll the gamma-step `lax.scan` (True), keep it a loop (False), or None: unroll
        when the draft carries a KV cache. A rolled scan carries the draft cache through a loop,
        and XLA:CPU copies it in every step (2 copies per layer); unrolled, the writes stay in
        place. Costs compile time that grows with gamma.
    """

    model: Any
    warper: Warper
    unroll: bool | None = None

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    def init(self, params, prompts, prompt_lengths, cache_len: int):
        """Prefills the model with every prompt token but the last."""
        state = self.model.init_state(prompts.shape[0], cache_len)
        _, state = self.model.apply(params, state, prompts, prompt_lengths - 1)
        return state

    def first_draft(self, params, state, seq: Sequences, key):
        """Feeds the pending tokens and samples x_1 with key fold_in(key, 0).

        Returns:
          (state, x_1 int32 [batch], q_1 float32 [batch, vocab], logits_1 [batch, vocab]).
        """
        active = (~seq.done).astype(jnp.int32)  # [batch]
        num_pending = (seq.lengths - state.lengths) * active  # [batch] 1 or 2
        pending = last_tokens(seq, 2)  # [batch, 2] oldest first
        # Rows with one pending token feed it at index 0.
        pending = jnp.where((num_pending == 2)[:, None], pending, pending[:, 1:])
        logits, state = self.model.apply(params, state, pending, num_pending)
        last = jnp.maximum(num_pending - 1, 0)[:, None, None]  # [batch, 1, 1]
        logits0 = jnp.take_along_axis(logits, last, axis=1)[:, 0]  # [batch, vocab]
        q0 = self.warper.probs(logits0)  # [batch, vocab]
        x0 = sample_from_probs(jax.random.fold_in(key, 0), q0)  # [batch]
        return state, x0, q0, logits0

    def propose(self, params, state, seq: Sequences, key, gamma: int) -> Proposal:
        """Feeds the pending tokens, then samples gamma tokens (key i for the i-th draw)."""
        active = (~seq.done).astype(jnp.int32)  # [batch]
        state, x0, q0, _ = self.first_draft(params, state, seq, key)

        def one_step(carry, i):
            state, token = carry
            logits, state = self.model.apply(params, state, token[:, None], active)
            q = self.warper.probs(logits[:, 0])  # [batch, vocab]
            nxt = sample_from_probs(jax.random.fold_in(key, i), q)
            return (state, nxt), (nxt, q)

        unroll = self.unroll
        if unroll is None:
            unroll = any(getattr(leaf, "ndim", 0) >= 3 for leaf in jax.tree.leaves(state))
        (state, _), (xs, qs) = jax.lax.scan(
            one_step, (state, x0), jnp.arange(1, gamma), unroll=bool(unroll)
        )  # xs [gamma - 1, batch], qs [gamma - 1, batch, vocab]
        tokens = jnp.concatenate([x0[:, None], xs.T], axis=1)  # [batch, gamma]
        probs = jnp.concatenate([q0[:, None], jnp.swapaxes(qs, 0, 1)], axis=1)
        return Proposal(tokens, probs, None, state, calls=gamma)

    def commit(self, state, verdict: Verdict):
        """Keeps the prefix the model saw that is still in the sequence: min(L + n, seen)."""
        kept = jnp.minimum(verdict.lengths_before + verdict.num_accepted, state.lengths)
        return rollback(state, jnp.where(verdict.active, kept, state.lengths))


@struct.dataclass
class NoState:
    """The state of a drafter that reads everything it needs from the sequence."""

    def logical_axes(self) -> NoState:
        return self


@dataclasses.dataclass(frozen=True)
class LookupDrafter:
    """Prompt lookup in one shot: proposes the continuation of the latest earlier match.

    For n = max_ngram down to min_ngram it looks for the latest earlier occurrence of the row's
    last n tokens; the first n that has one proposes up to gamma tokens that followed it. A
    match near the end of the sequence has fewer than gamma known followers, and a row with no
    match drafts nothing (num_drafted = 0: the iteration is then one target step). Proposals are
    deterministic (probs None), so the rule "accept x with probability p(x)" keeps the output
    exact. Unlike `PromptLookupLM` inside a `ModelDrafter` (gamma calls, each predicting one
    token, repeating the last token on a miss), this needs no calls and no state.

    Attributes:
      vocab_size: the vocabulary (the target's).
      max_ngram: longest suffix to match.
      min_ngram: shortest suffix to match.
    """

    vocab_size: int
    max_ngram: int = 3
    min_ngram: int = 1
    variable_length = True  # a lookup proposes 0..gamma tokens: verify only as wide as needed

    def __post_init__(self):
        check_ngram_range(self.min_ngram, self.max_ngram)

    @property
    def model(self):
        return self  # no params: `ShardedDecoder` replicates the empty params it is given

    def init(self, params, prompts, prompt_lengths, cache_len: int) -> NoState:
        del params, prompts, prompt_lengths, cache_len
        return NoState()

    def _lookup(self, history: jax.Array, length: jax.Array, gamma: int):
        """(tokens int32 [gamma], count int32 []) proposed for one row of `length` tokens."""
        size = history.shape[0]
        start, found = latest_suffix_match(history, length, self.max_ngram, self.min_ngram)
        count = jnp.where(found, jnp.minimum(length - start, gamma), 0)
        offsets = jnp.arange(gamma)
        tokens = jnp.take(history, jnp.clip(start + offsets, 0, size - 1))
        return jnp.where(offsets < count, tokens, 0).astype(jnp.int32), count.astype(jnp.int32)

    def propose(self, params, state, seq: Sequences, key, gamma: int) -> Proposal:
        """Looks up every row's suffix in its own sequence (no randomness, no model call)."""
        del params, key
        tokens, count = jax.vmap(self._lookup, in_axes=(0, 0, None))(
            seq.tokens, seq.lengths, gamma
        )  # [batch, gamma], [batch]
        count = jnp.where(seq.done, 0, count)
        return Proposal(tokens, None, count, state, calls=0)

    def commit(self, state, verdict: Verdict):
        del verdict
        return state
