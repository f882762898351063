"""`EagleDrafter`: drafts with an EAGLE feature head that reads the target's features.

It opts in to the target's features (`reads_features = True`, see `base.py`), so the decoder
hands it the prompt's hidden states at `init`, the hidden states along the accepted path at every
`commit`, and the target's params beside the head's at `init` and `propose`.

Bookkeeping (L = a row's sequence length when `propose` is called; f_t is the target's hidden
state after token t, pair t is (f_t, x_{t+1}) and the head's cache holds pairs 0..h-1):
  * `feats` [batch, cache_len, embed] keeps every true feature the target has produced: the
    prompt's from prefill, then each verdict's f_{L-1}..f_{L-1+n}.
  * `propose` feeds the k = L - 1 - h pairs the head has not seen (h..L-2: true features, so the
    head's drafts of the previous iteration, made on its own predicted features, are replaced),
    reads its prediction f^_{L-1} from the last of them, and samples x_L from
    q = warper(unembed(f^_{L-1})). Then it drafts on its own features: pair (f^_{L-1+i}, d_i)
    gives f^_{L+i} and q of d_{i+1}.
  * `commit` stores the verdict's features and rolls the head back to L_before - 1 pairs, the
    true ones. After a step k = n + 1; after prefill (pairs 0..P-3 fed) k = 1.
  * An EAGLE-3 head (`head.feature_layers`) reads the concatenated outputs of three target
    blocks instead of the final hidden state: `feats` holds those [.., 3 * embed], and every
    true feature goes through `head.fuse_features` before it is fed; predicted ones are fed as
    they are.
  * A one-token prompt has no feature at all (k = 0): the head is fed one placeholder pair (a
    zero feature and x_0) so that it still proposes; `commit` drops it. Any q is lossless.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from specjax.decoding.arguments import check_flag
from specjax.decoding.drafters.base import Proposal, Verdict
from specjax.decoding.drafters.model import default_unroll
from specjax.decoding.sampling import Warper, check_warper
from specjax.decoding.state import Sequences
from specjax.models.draft_vocab import full_rows
from specjax.models.kv_cache import KVCache, rollback, write_rows


@struct.dataclass
class EagleState:
    """The head's cache and the target's features.

    Attributes:
      cache: the head's KVCache; cache.lengths = pairs fed (true ones after `commit`).
      feats: [batch, cache_len, F] the target's features after each committed token (valid
        below the sequence length minus one): F = embed, or 3 * embed for EAGLE-3.
    """

    cache: KVCache
    feats: jax.Array


@dataclasses.dataclass(frozen=True)
class EagleDrafter:
    """Chain drafter over an `EagleHead` (models/eagle_head.py).

    Attributes:
      head: the EagleHead (its `target` must be the decoder's target).
      warper: the decoder's warper (one warper for both laws keeps sampling exact).
      unroll: unroll the gamma-step `lax.scan` (True), keep it a loop (False), or None:
        `model.default_unroll` (a loop on CPU, unrolled on an accelerator).
    """

    head: object
    warper: Warper
    unroll: bool | None = dataclasses.field(default=None, kw_only=True)  # after subclasses' fields
    reads_features = True

    def __post_init__(self):
        check_warper(self.warper)
        check_flag(self.unroll, "unroll", none=True)

    @property
    def vocab_size(self) -> int:
        return self.head.vocab_size

    @property
    def feature_layers(self) -> tuple:
        """The target blocks whose outputs the head reads (() : the final hidden state)."""
        return self.head.feature_layers

    @property
    def model(self):
        """What the draft params slot holds: the head's own params."""
        return self.head

    @property
    def target(self):
        """The model whose features the head reads (a decoder's target must be this one)."""
        return self.head.target

    def init(self, params, prompts, prompt_lengths, cache_len: int, features):
        """Feeds pairs 0..P-3 of each prompt (P its length); keeps the prompt's features.

        Args:
          params: (target_params, head_params).
          prompts: int32 [batch, P_pad].
          prompt_lengths: int32 [batch].
          cache_len: positions per row.
          features: [batch, P_pad, F] the target's features after each prompt token.
        """
        target_params, head_params = params
        batch, width = prompts.shape
        fed = jnp.arange(width)[None, :] < (prompt_lengths - 1)[:, None]  # [batch, P_pad]
        features = jnp.where(fed[:, :, None], features, 0)  # only the prefill's are features
        feats = jnp.zeros((batch, cache_len, features.shape[-1]), features.dtype)
        feats = feats.at[:, :width].set(features)
        cache = self.head.init_state(batch, cache_len)
        if width > 1:
            embeds = self.head.target.embed(target_params, prompts[:, 1:])  # x_1..x_{P-1}
            num = jnp.maximum(prompt_lengths - 2, 0).astype(jnp.int32)
            inputs = self.head.fuse_features(head_params, features[:, :-1])
            _, cache = self.head.forward_features(head_params, cache, inputs, embeds, num)
        return EagleState(cache, feats)

    def _draw(self, params, feature, key):
        """(token [batch], q [batch, vocab]) from the head's predicted feature [batch, embed].

        With a draft vocabulary the draw runs over its N ids alone: q is 0 at every other
        token, so this is the law over the full row at N / vocab of the cost (warper, softmax
        and draw), and the rule gets that q scattered back to full rows. `draft_ids` are
        sorted, so ties fall to the same token as over the full row."""
        ids = self.head.draft_ids
        if ids is None:
            return self.warper.draw(key, self.head.logits(*params, feature))
        index, q = self.warper.draw(key, self.head.draft_logits(params[1], feature))
        token = jnp.asarray(ids, jnp.int32)[index]
        return token, full_rows(q, ids, self.vocab_size, fill=0.0)

    def catch_up(self, params, state: EagleState, seq: Sequences, width: int):
        """Feeds the true pairs the head has not seen (at most `width`, static).

        Returns:
          (cache, f^ [batch, embed] the head's predicted feature after the last token, the slot
          of the last pair fed [batch]: L - 2, or 0 for the one-token prompt's placeholder).
        """
        target_params, head_params = params
        active = ~seq.done  # [batch]
        h = state.cache.lengths  # [batch]
        last = seq.lengths - 1  # [batch] index of the last token
        k = jnp.maximum(last - h, 1)  # [batch] pairs to feed (1 placeholder when none)
        t = h[:, None] + jnp.arange(width)[None, :]  # [batch, width] pair positions
        cap = state.feats.shape[1] - 1
        feats_in = jnp.take_along_axis(state.feats, jnp.minimum(t, cap)[:, :, None], axis=1)
        feats_in = self.head.fuse_features(head_params, feats_in)  # [batch, width, embed]
        toks_in = jnp.take_along_axis(seq.tokens, jnp.minimum(t + 1, last[:, None]), axis=1)
        embeds = self.head.target.embed(target_params, toks_in)  # [batch, width, embed]
        num = jnp.where(active, k, 0).astype(jnp.int32)
        pred, cache = self.head.forward_features(head_params, state.cache, feats_in, embeds, num)
        f0 = jnp.take_along_axis(pred, (k - 1)[:, None, None], axis=1)[:, 0]  # [batch, embed]
        return cache, f0, h + k - 1

    def propose(self, params, state: EagleState, seq: Sequences, key, gamma: int) -> Proposal:
        """Catches up on the true pairs, then drafts gamma tokens (key fold_in(key, i))."""
        target_params, head_params = params
        active = ~seq.done  # [batch]
        cache, f0, _ = self.catch_up(params, state, seq, gamma + 1)  # k <= gamma + 1
        x0, q0 = self._draw(params, f0, jax.random.fold_in(key, 0))

        def one_step(carry, i):
            cache, feature, token = carry
            embed = self.head.target.embed(target_params, token[:, None])  # [batch, 1, embed]
            pred, cache = self.head.forward_features(
                head_params, cache, feature[:, None], embed, active.astype(jnp.int32)
            )
            nxt, q = self._draw(params, pred[:, 0], jax.random.fold_in(key, i))
            return (cache, pred[:, 0], nxt), (nxt, q)

        (cache, _, _), (xs, qs) = jax.lax.scan(
            one_step,
            (cache, f0, x0),
            jnp.arange(1, gamma),
            unroll=default_unroll(self.unroll, cache),
        )  # xs [gamma - 1, batch], qs [gamma - 1, batch, vocab]
        tokens = jnp.concatenate([x0[:, None], xs.T], axis=1)  # [batch, gamma]
        probs = jnp.concatenate([q0[:, None], jnp.swapaxes(qs, 0, 1)], axis=1)
        return Proposal(tokens, probs, None, EagleState(cache, state.feats), calls=gamma)

    def commit(self, state: EagleState, verdict: Verdict) -> EagleState:
        """Stores the verdict's features at L-1..; keeps the head's L - 1 true pairs."""
        start = verdict.lengths_before - 1  # [batch] slot of f_{L-1}
        beyond = state.feats.shape[1]  # an inactive row writes past the end: dropped
        feats = write_rows(state.feats, verdict.features, jnp.where(verdict.active, start, beyond))
        kept = jnp.where(verdict.active, start, state.cache.lengths)
        return EagleState(rollback(state.cache, kept), feats)
