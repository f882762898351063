"""`DistilledDraft`: a small transformer in the target's vocabulary, distilled from the target.

The SpS baseline (Chen et al. 2023; Leviathan et al. 2023): an independent small language model
that drafts autoregressively, trained to match the target's distribution. A target this small
(SmolLM2-135M) has no smaller sibling here, so the draft is built from the target itself: its
embedding, final norm and output layer (shared and frozen, as Medusa and EAGLE share them) and
`num_layers` blocks of its own, started from the target's first blocks and then distilled
(`specjax.training.distilled`: KL or TV to the target's p on the target's own replies).
Untrained, it is the target's first K layers (α ≈ 0.05 on SmolLM2); what distillation adds is
measured against that.

At decoding time it is a plain `TransformerLM` draft (`decode_model`), so every decoder takes
it: chains, static trees, block verification.
"""

from __future__ import annotations

import dataclasses

import jax

from specjax.models.layout import with_matmul
from specjax.models.reduced_vocab import reduce_vocab
from specjax.models.transformer import TransformerLM


def _blocks(num_layers: int) -> tuple[str, ...]:
    return tuple(f"block_{i}" for i in range(num_layers))


@dataclasses.dataclass(frozen=True)
class DistilledDraft:
    """A `num_layers`-block draft sharing the target's embedding, final norm and output layer.

    Attributes:
      target: the target `TransformerLM` (any weight layout).
      num_layers: the draft's own blocks (1 <= num_layers < the target's).

    Its params are only its blocks ({"block_0": ..., ...}, "xla" layout); `full_params` adds the
    target's shared arrays.
    """

    target: TransformerLM
    num_layers: int = 2
    draft_ids = None  # the target's full vocabulary

    def __post_init__(self):
        if not isinstance(self.target, TransformerLM):
            raise TypeError(f"target must be a TransformerLM; got {self.target!r}")
        total = self.target.config.num_layers
        if isinstance(self.num_layers, bool) or not 1 <= int(self.num_layers) < total:
            raise ValueError(f"num_layers must lie in [1, {total}); got {self.num_layers!r}")

    @property
    def model(self) -> TransformerLM:
        """The draft as a model, "xla" layout (training)."""
        cfg = dataclasses.replace(self.target.config, num_layers=self.num_layers, matmul="xla")
        return TransformerLM(cfg)

    @property
    def vocab_size(self) -> int:
        return self.target.vocab_size

    def _target_xla(self, target_params):
        if self.target.config.matmul == "xla":
            return target_params
        return with_matmul(self.target, target_params, "xla")[1]

    def init_params(self, key) -> dict:
        """Random blocks (shapes for restoring; a run starts from `with_target_columns`)."""
        params = self.model.init_params(key)
        return {name: params[name] for name in _blocks(self.num_layers)}

    def with_target_columns(self, params, target_params) -> dict:
        """The start of training: the target's first `num_layers` blocks (`params` only gives
        the structure, as for the other heads)."""
        del params
        source = self._target_xla(target_params)
        return {name: source[name] for name in _blocks(self.num_layers)}

    def full_params(self, params, target_params_xla) -> dict:
        """`model`'s params: the draft's blocks and the target's shared arrays ("xla" layout)."""
        shared = {k: v for k, v in target_params_xla.items() if not k.startswith("block_")}
        return {**shared, **params}

    def decode_model(self, params, target_params, draft_ids=None):
        """(model, params) to decode with, in the target's weight layout: the TransformerLM, or
        with `draft_ids` (sorted token ids) a `ReducedVocabLM` drafting over those ids only
        (its output layer at N columns; q = 0 elsewhere)."""
        model, full = self.model, self.full_params(params, self._target_xla(target_params))
        if self.target.config.matmul != "xla":
            model, full = with_matmul(model, full, self.target.config.matmul)
        full = jax.tree.map(lambda x: x, full)
        if draft_ids is None:
            return model, full
        return reduce_vocab(model, full, draft_ids)
