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

Contracts every drafter keeps (they used to live in comments where each drafter relied on them):
  * The emitted token. An iteration emits the n accepted drafts and then one token the drafter
    did not propose: the correction drawn from the residual, or the bonus token after a full
    acceptance. `Verdict.num_accepted` is n and `Verdict.next_token` is that token, so a drafter
    knows exactly what it has not seen (n + 1 new tokens, the last of them `next_token`), rather
    than rediscovering "one or two pending tokens" from lengths.
  * Key reservation. `propose(..., key, gamma)` may use `fold_in(key, i)` for 0 <= i < gamma
    (a tree drafter: i < its lookahead); the verifier takes `fold_in(key, lookahead)`, so the
    draft's draws and the verifier's are independent.

Drafters that read the target's features (EAGLE-style heads) opt in with a class attribute
`reads_features = True` (`reads_features(drafter)`), the way `variable_length` declares ragged
proposals. For such a drafter the decoder
  * scores the target through `forward`, so it has the hidden states, and passes them on:
    `Verdict.features` [batch, lookahead + 1, embed] holds the target's hidden state after each
    scored token along the accepted path (the pending token, then the accepted drafts: entry j is
    valid for j <= num_accepted; for trees, gathered along `Verdict.path`); the correction/bonus
    token (`next_token`) has no hidden state yet;
  * calls `init(params, prompts, prompt_lengths, cache_len, features)` with the prompt's hidden
    states, features [batch, P, embed] (valid for the first prompt_lengths - 1 positions: the
    tokens the target's prefill fed);
  * passes `params = (target_params, draft_params)` to `init` and `propose`, since a head reuses
    the target's embedding and output layer. The draft slot of `generate` still takes only the
    drafter's own params, and `model` describes only those.
A drafter may also declare `feature_layers = (i, j, k)` (`feature_layers(drafter)`; EAGLE-3's
low, middle and high blocks): its features are then the residual streams after those target
blocks, concatenated, [..., len * embed] (`forward(..., return_layers=...)`), instead of the
final hidden state.
Drafters that do not opt in compile exactly as before (the target is scored through `apply`).

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

Drafters of this room: `ModelDrafter` (model.py: any specjax model, one token per call in a
scan) and `LookupDrafter` (lookup.py: copies the continuation of an earlier match of the
sequence's suffix, up to gamma tokens at once, and drafts fewer, or none, when the match has no
more: the `num_drafted` path of the acceptance rule). `AdaptiveDrafter` (adaptive.py) is a
`ModelDrafter` whose per-row γ a policy chooses (gamma_policy.py); `SpeculativeDrafter`
(hierarchical.py) drafts with a whole speculative decoder. Token-tree drafters are in
`specjax/decoding/trees/`.
"""

from __future__ import annotations

from typing import Any, Protocol

import jax
from flax import struct

from specjax.decoding.argmax import has_nan
from specjax.decoding.state import Sequences


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
      parents: int32 [batch, N] a dynamic tree's per-row topology (node 0 the root, parent -1;
        a `TracedTree`'s parents), or None: the decoder's static tree.
      draft_nan: bool [batch] rows whose draft logits held NaN, set by a model drafter whose
        probs do not show it (None: greedy chains and top-k trees), or None: read probs. The
        decoders flag such rows (`DecodeStats.nan_rows`) and refuse them on the host.
    """

    tokens: jax.Array
    probs: jax.Array | None
    num_drafted: jax.Array | None
    state: Any
    calls: int = struct.field(pytree_node=False, default=0)
    valid: jax.Array | None = None
    num_calls: jax.Array | None = None
    parents: jax.Array | None = None
    draft_nan: jax.Array | None = None


@struct.dataclass
class Verdict:
    """What the verifier decided, for `Drafter.commit`.

    Attributes:
      lengths_before: int32 [batch] sequence lengths when the proposal was made.
      num_accepted: int32 [batch] proposed tokens kept (the sequence grew by num_accepted + 1).
      active: bool [batch] rows that were decoding (others must not change).
      path: int32 [batch, depth + 1] accepted tree nodes (node 0 the root), or None for chains.
      next_token: int32 [batch] the emitted token the drafter did not propose (the correction or
        the bonus token, at index num_accepted of what the step emitted), or None where a decoder
        does not say.
      features: [batch, depth + 1, embed] the target's hidden state after the pending token and
        after each accepted draft (entry j valid for j <= num_accepted), for drafters that read
        the target's features; None otherwise.
    """

    lengths_before: jax.Array
    num_accepted: jax.Array
    active: jax.Array
    path: jax.Array | None = None
    next_token: jax.Array | None = None
    features: jax.Array | None = None


class Drafter(Protocol):
    """Structural type of a proposer (see the module docstring)."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def model(self) -> Any: ...

    def init(self, params, prompts, prompt_lengths, cache_len: int) -> Any: ...

    def propose(self, params, state, seq: Sequences, key, gamma: int) -> Proposal: ...

    def commit(self, state, verdict: Verdict) -> Any: ...


def proposal_nan(proposal: Proposal) -> jax.Array | None:
    """bool [batch] rows whose draft numbers went NaN: `draft_nan`, or NaN in `probs` (a NaN
    logit makes softmax's, and Greedy's, row NaN throughout); None when neither is known."""
    nan = proposal.draft_nan
    if proposal.probs is not None:
        in_q = has_nan(proposal.probs).any(axis=1)  # [batch]
        nan = in_q if nan is None else nan | in_q
    return nan


def check_gamma(drafter, gamma: int) -> None:
    """Lets a drafter refuse a decoder's gamma when the decoder is built, through its optional
    `check_gamma(gamma)` (raising ValueError): Medusa's heads bound it, an adaptive or truncated
    drafter is built for one. Its `propose` checks again, for direct callers."""
    check = getattr(drafter, "check_gamma", None)
    if check is not None:
        check(gamma)


def reads_features(drafter) -> bool:
    """True for drafters that opted in to the target's features (`reads_features = True`)."""
    return bool(getattr(drafter, "reads_features", False))


def feature_layers(drafter) -> tuple:
    """The target blocks whose outputs a feature-reading drafter reads (`feature_layers`), or ()
    for the final hidden state."""
    return tuple(getattr(drafter, "feature_layers", ()))


def is_drafter(obj) -> bool:
    """True for objects that offer the Drafter methods (models offer `apply` instead)."""
    return all(hasattr(obj, name) for name in ("propose", "commit", "init"))


@struct.dataclass
class NoState:
    """The state of a drafter that reads everything it needs from the sequence."""

    def logical_axes(self) -> NoState:
        return self
