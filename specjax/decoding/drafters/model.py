"""`ModelDrafter`: drafts with any specjax model, one token per forward call (the draft loop).

The proposer seam it implements is `base.py`'s `Drafter`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from specjax.decoding.argmax import has_nan
from specjax.decoding.arguments import check_flag
from specjax.decoding.drafters.base import Proposal, Verdict
from specjax.decoding.prefill import prefill
from specjax.decoding.sampling import Warper, check_warper
from specjax.decoding.state import Sequences, last_tokens
from specjax.models.kv_cache import rollback


def default_unroll(unroll: bool | None, state) -> bool:
    """Whether a drafter unrolls its draft steps: `unroll` if given, else the measured default.

    On CPU the steps stay a loop: with the scatter cache write (`kv_cache.write_rows`) XLA:CPU
    updates a cache carried through a loop in place (tests/test_cache_copies.py). On
    SmolLM2-135M (2-core CPU, 2026-12-06, interleaved, the same tokens) the loop ran in 0.94-1.00x
    the unrolled time (medians) for its first-4-layers draft at gamma 4, t 0, and its first 2 at
    gamma 8, t 1, in 0.93-0.97x for an EAGLE head at gamma 6, and in 0.98-0.99x for the adaptive
    drafter at gamma_max 8 (intervals covering 1). It compiled in 0.75x the time for the EAGLE
    head at gamma 6 and 0.86x for the adaptive drafter at gamma_max 8 (medians of four
    alternating rounds); at gamma 4, 0.89-1.09x over runs at batch 1 and 2, within the noise
    (`scripts/bench_real.py --parts=unroll`, which measures this on any device). On an
    accelerator (not measured; a GPU loop reads its predicate back to the host every step) a
    draft carrying a KV cache (`state` with a leaf of rank >= 3) stays unrolled.
    """
    if unroll is not None:
        return bool(unroll)
    if jax.default_backend() == "cpu":
        return False
    return any(getattr(leaf, "ndim", 0) >= 3 for leaf in jax.tree.leaves(state))


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
      unroll: unroll the gamma-step `lax.scan` (True), keep it a loop (False), or None:
        `default_unroll` (a loop on CPU; unrolled on an accelerator when the draft carries a
        KV cache).
    """

    model: Any
    warper: Warper
    unroll: bool | None = None

    def __post_init__(self):
        check_warper(self.warper)
        check_flag(self.unroll, "unroll", none=True)

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    def init(self, params, prompts, prompt_lengths, cache_len: int):
        """Prefills the model with every prompt token but the last."""
        state = self.model.init_state(prompts.shape[0], cache_len)
        return prefill(self.model, params, state, prompts, prompt_lengths)

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
        x0, q0 = self.warper.draw(jax.random.fold_in(key, 0), logits0)  # [batch], [batch, vocab]
        return state, x0, q0, logits0

    def propose(self, params, state, seq: Sequences, key, gamma: int) -> Proposal:
        """Feeds the pending tokens, then samples gamma tokens (key i for the i-th draw)."""
        active = (~seq.done).astype(jnp.int32)  # [batch]
        state, x0, q0, logits0 = self.first_draft(params, state, seq, key)

        def one_step(carry, i):
            state, token, nan = carry
            logits, state = self.model.apply(params, state, token[:, None], active)
            nxt, q = self.warper.draw(jax.random.fold_in(key, i), logits[:, 0])  # [b], [b, vocab]
            return (state, nxt, nan | has_nan(logits[:, 0])), (nxt, q)

        (state, _, nan), (xs, qs) = jax.lax.scan(
            one_step,
            (state, x0, has_nan(logits0)),
            jnp.arange(1, gamma),
            unroll=default_unroll(self.unroll, state),
        )  # xs [gamma - 1, batch], qs [gamma - 1, batch, vocab]
        tokens = jnp.concatenate([x0[:, None], xs.T], axis=1)  # [batch, gamma]
        probs = jnp.concatenate([q0[:, None], jnp.swapaxes(qs, 0, 1)], axis=1)
        if self.warper.ends_greedy:
            # q is the point mass on each drafted token: say so (probs None), and XLA drops the
            # one-hot rows (a rule builds them if it needs them). NaN logits are flagged from
            # the logits' max instead (`draft_nan`), the one the argmax takes.
            return Proposal(tokens, None, None, state, calls=gamma, draft_nan=nan)
        return Proposal(tokens, probs, None, state, calls=gamma)

    def commit(self, state, verdict: Verdict):
        """Keeps the prefix the model saw that is still in the sequence: min(L + n, seen)."""
        kept = jnp.minimum(verdict.lengths_before + verdict.num_accepted, state.lengths)
        return rollback(state, jnp.where(verdict.active, kept, state.lengths))
