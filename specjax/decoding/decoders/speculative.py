"""Speculative decoding: draft γ tokens, verify them with one target call, accept losslessly.

Each iteration, for every row independently:
  1. propose: the drafter proposes up to γ tokens d_1..d_γ and the q they were drawn from
     (`decoding/drafters/base.py`; a plain model becomes a `ModelDrafter`);
  2. score: the target scores [last, d_1..d_γ] in one call, giving p at γ+1 positions;
  3. verify: the acceptance rule (`accept`, default `speculative_accept`) keeps n drafts and adds
     one resampled or bonus token;
  4. emit, then commit: each row advances by its own n + 1, the target cache rolls back by
     setting its length, and the drafter is told what survived.
No row waits for the slowest: acceptance is per row, and so are the caches' lengths.

Bookkeeping invariant (L = a row's sequence length at the start of an iteration): the target
cache holds the first L - 1 tokens (the last token is fed with the drafts). The drafter keeps
its own invariant (see `ModelDrafter`).

The loop itself (prepare, the jitted `while_loop`, the Python `stream`) is `decoding/loop.py`'s,
shared with every decoder; the step is `SpeculativeSteps` (`steps.py`, shared with the tree
decoder); this file is the chain decoder: its fields, their checks and its drafter.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from specjax.decoding import arguments, rules
from specjax.decoding.decoders.steps import SpeculativeSteps
from specjax.decoding.decoders.verify_width import check_widths, score_to_longest
from specjax.decoding.drafters.adaptive import AdaptiveDrafter, check_policy
from specjax.decoding.drafters.base import (
    Drafter,
    check_gamma,
    feature_layers,
    is_drafter,
)
from specjax.decoding.drafters.feature_heads import check_feature_target, head_drafter
from specjax.decoding.drafters.model import ModelDrafter
from specjax.decoding.drafters.truncated import TruncatedDrafter
from specjax.decoding.prefill import target_features
from specjax.decoding.rules.acceptance import speculative_accept
from specjax.decoding.sampling import Warper, check_warper
from specjax.decoding.state import last_tokens
from specjax.models.interface import check_pair, check_vocab
from specjax.models.kv_cache import rollback


class LossyRuleWarning(UserWarning):
    """A decoder was built with an acceptance rule marked lossy (lenient, typical)."""


@dataclasses.dataclass(frozen=True)
class SpeculativeDecoder(SpeculativeSteps):
    """Lossless speculative sampling from `target` with proposals from `draft`.

    Attributes:
      target: the model whose distribution the output follows exactly.
      draft: any model with the same vocabulary (drafted from by a `ModelDrafter` with this
        decoder's warper), a feature head (`EagleHead`, `MedusaHeads`: drafted from by its
        drafter with this decoder's warper), or a `Drafter` (e.g. `LookupDrafter`, another
        speculative decoder).
      gamma: drafted tokens per iteration (static, >= 1).
      warper: applied to both models' logits (temperature 0 = greedy).
      cache_len: positions per row in caches and the output buffer. None (the default): the
        models' position limit (the smaller learned position table of target and draft), else
        512.
      min_bucket: smallest padded prompt width.
      unroll_draft: for a model draft, unroll its γ-step scan (True), keep it a loop (False),
        or None: a loop on CPU, unrolled on an accelerator (`ModelDrafter.unroll`, and
        `AdaptiveDrafter.unroll` with a gamma_policy).
      accept: the acceptance rule, a function with `speculative_accept`'s signature and return
        (static: a different rule is a different program).
      gamma_policy: an adaptive-γ policy (`decoding/drafters/gamma_policy.py`): each row
        drafts 1..gamma tokens per iteration as it decides, so `gamma` is then gamma_max; a
        model draft stops its draft loop early (`AdaptiveDrafter`), any other drafter or feature
        head has its proposals cut (`TruncatedDrafter`). None: every row drafts gamma.
      verify_widths: the widths the target may verify at (`decoding/decoders/verify_width.py`).
        "static" (the default): one call of width gamma + 1 whatever was drafted. "auto":
        only as wide as the longest drafted row, from every width 1..gamma when proposals vary
        in length (a gamma_policy, or a drafter with `variable_length`, e.g. `LookupDrafter`),
        chosen per iteration by a `lax.switch` of one compiled target call per width; or a
        tuple of widths that includes gamma. The switch is not free (on XLA:CPU, for the mini pair
        whose T(k) is flat up to k = 8, the same work took 0.96-1.22x the time, median
        1.02x): it pays where T(k) grows with k.
    """

    target: Any
    draft: Any
    gamma: int
    warper: Warper
    cache_len: int | None = None
    min_bucket: int = 16
    unroll_draft: bool | None = None
    accept: Callable = speculative_accept
    gamma_policy: Any = None
    verify_widths: Any = "static"

    def __post_init__(self):
        if is_drafter(self.draft) or head_drafter(self.draft, self.warper) is not None:
            check_vocab(self.target, self.draft)
        else:
            check_pair(self.target, self.draft)
        if getattr(self.draft, "tree", None) is not None:
            raise TypeError(
                f"draft {type(self.draft).__name__} drafts a token tree, which a chain decoder "
                "would verify as one chain: use TreeSpeculativeDecoder(target, draft, tree, warper)"
            )
        gamma = self.gamma
        if isinstance(gamma, bool) or not isinstance(gamma, int | np.integer) or gamma < 1:
            what = "gamma" if self.gamma_policy is None else "gamma (gamma_max of gamma_policy)"
            raise ValueError(f"{what} must be an integer >= 1, got {gamma!r}")
        object.__setattr__(self, "gamma", int(gamma))  # a numpy integer becomes a Python one
        arguments.check_flag(self.unroll_draft, "unroll_draft", none=True)
        if self.gamma_policy is not None:
            check_policy(self.gamma_policy, self.gamma)
        check_warper(self.warper)
        if not callable(self.accept):
            raise TypeError(f"accept must be an acceptance rule (a function); got {self.accept!r}")
        if not self.lossless:
            warnings.warn(
                f"accept={getattr(self.accept, '__name__', self.accept)} is a lossy rule: this "
                "decoder's output does not follow the target's distribution (its shift from p is "
                "measured in experiments/lossy)",
                LossyRuleWarning,
                stacklevel=3,
            )
        _ = self.widths  # validates verify_widths
        check_feature_target(self.target, self.drafter)
        check_gamma(self.drafter, self.gamma)
        arguments.resolve_cache_len(self)

    @property
    def lossless(self) -> bool:
        """False when `accept` is marked lossy (`rules.is_lossless`); True otherwise (an unmarked
        user rule is taken at its word: check it with `specjax.testing`)."""
        return rules.is_lossless(self.accept) is not False

    @property
    def point_mass_accept(self):
        """The rule's outcome for a point-mass target, read off tokens (`rules.point_mass_rule`),
        where the warper is greedy, the rule has one and `verify` is this class's (a subclass
        that replaces `verify` keeps it); else None (`verify` runs the rule)."""
        if not self.warper.ends_greedy or type(self).verify is not SpeculativeDecoder.verify:
            return None
        return rules.point_mass_rule(self.accept)

    @property
    def widths(self) -> tuple[int, ...]:
        """The verification widths `verify_widths` resolves to (sorted, ending at gamma)."""
        named = isinstance(self.verify_widths, str)  # `==` on an array would be elementwise
        if named and self.verify_widths == "static":
            return (self.gamma,)
        if named and self.verify_widths == "auto":
            varies = self.gamma_policy is not None or getattr(self.draft, "variable_length", False)
            return tuple(range(1, self.gamma + 1)) if varies else (self.gamma,)
        if isinstance(self.verify_widths, str) or not isinstance(self.verify_widths, tuple):
            raise ValueError(
                f'verify_widths must be "auto", "static" or a tuple of widths, '
                f"got {self.verify_widths!r}"
            )
        return check_widths(self.verify_widths, self.gamma)

    @property
    def drafter(self) -> Drafter:
        """The proposer: `draft` itself if it is a Drafter, else a ModelDrafter around it."""
        if is_drafter(self.draft):
            drafter = self.draft
        else:
            drafter = head_drafter(self.draft, self.warper)  # a feature head: this warper
        if drafter is not None:
            if self.gamma_policy is None:
                return drafter
            return TruncatedDrafter(drafter, self.gamma_policy, self.gamma)
        if self.gamma_policy is not None:
            return AdaptiveDrafter(
                self.draft, self.warper, self.gamma_policy, self.gamma, self.unroll_draft
            )
        return ModelDrafter(self.draft, self.warper, self.unroll_draft)

    @property
    def lookahead(self) -> int:
        return self.gamma

    @property
    def depth(self) -> int:
        return self.gamma

    # -- the step's seams (see SpeculativeSteps) ---------------------------------------------

    def score(self, target_params, t_state, seq, proposal, active, features: bool = False):
        """The target's logits [batch, gamma + 1, vocab] at [last, d_1..d_gamma] and its state;
        with `features`, also the drafter's features there [batch, gamma + 1, F]
        (`prefill.target_features`)."""
        verify_in = jnp.concatenate([last_tokens(seq, 1), proposal.tokens], axis=1)
        if features:
            num_new = jnp.where(active, self.gamma + 1, 0).astype(jnp.int32)
            layers = feature_layers(self.drafter)
            out = self.target.forward(
                target_params, t_state, verify_in, num_new, return_layers=layers
            )
            return out.logits, out.state, target_features(out, layers)
        if len(self.widths) > 1 and proposal.num_drafted is not None:
            return score_to_longest(
                self.target,
                target_params,
                t_state,
                verify_in,
                proposal.num_drafted,
                active,
                self.widths,
            )
        num_new = jnp.where(active, self.gamma + 1, 0).astype(jnp.int32)
        return self.target.apply(target_params, t_state, verify_in, num_new)

    def verify_point_mass(self, proposal, logits):
        """`verify`'s result read off the target's argmax tokens, or None (then `verify` runs).

        With a greedy warper and a rule that carries its point-mass outcome
        (`point_mass_accept`: the lossless chain rules), the rule's decision is a function of
        the drafted and the target's argmax tokens (`Warper.greedy_tokens` of the logits): the
        same tokens and counts as the rule on the one-hot p (`rules/point_mass.py`), without
        the [batch, gamma + 1, vocab] work (about 1 ms per iteration at a 49,152-token
        vocabulary on a 2-core CPU).
        """
        point_mass = self.point_mass_accept
        if point_mass is None:
            return None
        out, n = point_mass(
            proposal.tokens,
            self.warper.greedy_tokens(logits, no_mass=-1),  # -1: p without mass (NaN, all -inf)
            fill_value=0,
            num_drafted=proposal.num_drafted,
        )
        return out, n, None

    def verify(self, key, proposal, p):
        """(tokens [batch, gamma + 1], num_accepted [batch], path None) by `accept`."""
        out, n = self.accept(
            key, proposal.tokens, proposal.probs, p, fill_value=0, num_drafted=proposal.num_drafted
        )
        return out, n, None

    @staticmethod
    def accepted_features(hidden, path):
        """The chain's hidden states [batch, gamma + 1, embed] are already in path order."""
        del path
        return hidden

    @staticmethod
    def commit_target(t_state, old_len, n, path, active):
        """Rolls the target back to [last, d_1..d_n]: the first old_len + n tokens."""
        del path
        return rollback(t_state, jnp.where(active, old_len + n, t_state.lengths))

    def acceptance_events(self, proposal, n, path, active):
        """(accepted [batch, gamma], tested [batch, gamma], None) of this iteration."""
        del path
        position = jnp.arange(self.gamma)[None, :]  # [1, gamma]
        accepted = (position < n[:, None]) & active[:, None]  # [batch, gamma]
        # A row tests its drafts up to its first rejection or its last drafted token.
        drafted = self.gamma if proposal.num_drafted is None else proposal.num_drafted[:, None]
        tested = (position <= n[:, None]) & (position < drafted) & active[:, None]
        return accepted, tested, None
