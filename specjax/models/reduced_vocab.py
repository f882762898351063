"""A model draft over a reduced vocabulary: its output layer at N token ids only.

A transformer draft that shares a large target's vocabulary (SmolLM2: 49152 tokens, 576 wide)
spends most of a draft call in its output layer: 28 M of the distilled 2-layer draft's 35 M
parameters, streamed once per drafted token. `ReducedVocabLM` computes the draft's logits at
`draft_ids` only ([embed, N] columns read off the model's own output layer) and gives every
other token logit -inf, so q is 0 there: every lossless rule allows it (those tokens are never
drafted and stay reachable through the residual), and the rows stay full-vocabulary
[..., vocab], the law the tokens were sampled from (models/draft_vocab.py). The inner model's
full logits are never used, so XLA drops that product from the compiled program.

This is the post-hoc form of EAGLE-3's reduced draft vocabulary: a draft trained over the full
vocabulary (or, like `configs/heads.py:distilled`, over its training data's N most frequent
tokens) decodes over the N ids it knows; `specjax.training.eagle.frequent_tokens` picks them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from specjax.models.draft_vocab import check_draft_ids, full_rows, target_columns
from specjax.models.interface import ModelOutput


@dataclasses.dataclass(frozen=True)
class ReducedVocabLM:
    """`model` with its output layer restricted to `draft_ids` (module docstring).

    Params: {"model": the inner model's params, "columns": float32 [embed, N]} (`reduce_vocab`
    builds them). Follows the model interface (models/interface.py); `forward` returns the inner
    model's hidden states and layers with the reduced logits.
    """

    model: Any
    draft_ids: tuple

    def __post_init__(self):
        if not hasattr(self.model, "forward") or not hasattr(self.model, "unembed"):
            raise TypeError(
                f"model must be a specjax transformer (forward and unembed); got {self.model!r}"
            )
        object.__setattr__(self, "draft_ids", check_draft_ids(self.draft_ids, self.vocab_size))

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    @property
    def config(self):
        return self.model.config

    @property
    def max_positions(self):
        return getattr(self.model, "max_positions", None)

    @property
    def trained_context(self):
        return getattr(self.model, "trained_context", None)

    def init_state(self, batch: int, max_len: int):
        return self.model.init_state(batch, max_len)

    def forward(self, params, state, tokens, num_new, *, positions=None, mask=None,
                return_layers=()) -> ModelOutput:  # fmt: skip
        """The inner forward pass with logits [batch, T, vocab]: -inf outside `draft_ids`."""
        out = self.model.forward(
            params["model"], state, tokens, num_new, positions=positions, mask=mask,
            return_layers=return_layers,
        )  # fmt: skip
        sub = out.hidden.astype(jnp.float32) @ params["columns"]  # [batch, T, N]
        logits = full_rows(sub, self.draft_ids, self.vocab_size)
        return ModelOutput(logits, out.state, out.hidden, out.layers)

    def apply(self, params, state, tokens, num_new, *, positions=None, mask=None):
        out = self.forward(params, state, tokens, num_new, positions=positions, mask=mask)
        return out.logits, out.state


def reduce_vocab(model, params, draft_ids) -> tuple[ReducedVocabLM, dict]:
    """(`ReducedVocabLM`, its params): `model` decoding over `draft_ids` only.

    Args:
      model: a specjax transformer (any weight layout).
      params: its params.
      draft_ids: sorted distinct token ids in [0, vocab) (e.g. `frequent_tokens(data, N)`).
    """
    reduced = ReducedVocabLM(model, draft_ids)  # checked and made a tuple there
    columns = target_columns(model, params, reduced.draft_ids)  # [embed, N]
    return reduced, {"model": params, "columns": columns}
