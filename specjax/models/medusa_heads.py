"""`MedusaHeads`: K residual heads on the target's last feature, head i guessing token t+1+i.

Medusa (Cai et al. 2024): from the target's final hidden state f_t alone, head i (i = 1..K)
applies one residual block, h_i = f_t + SiLU(f_t W_i + b_i), and the target's output layer (or,
with `draft_ids`, a shared output layer of its own over a reduced draft vocabulary, q = 0
elsewhere). Head i's distribution q_i is a proposal for the token at t + 1 + i; it does not see
the tokens in between, which is why it accepts less than a feature head that drafts
autoregressively, but all K drafts cost one small call.

Drafting: `decoding/drafters/medusa.py`'s `MedusaDrafter`; training: `training/medusa.py`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.models.draft_vocab import check_draft_ids, full_rows, target_columns


@dataclasses.dataclass(frozen=True)
class MedusaHeads:
    """K Medusa heads for `target` (hashable: a static jit argument).

    Attributes:
      target: the target model (a `TransformerLM`; its output layer is shared, frozen).
      num_heads: K >= 1, the most tokens one call drafts.
      draft_ids: None, or sorted distinct token ids of a reduced draft vocabulary with a shared
        output layer of the heads' own, param "lm_head" [embed, N] (see `EagleHead.draft_ids`).
    """

    target: object
    num_heads: int = 4
    draft_ids: tuple | None = None

    def __post_init__(self):
        tcfg = getattr(self.target, "config", None)
        if tcfg is None or not hasattr(self.target, "unembed"):
            raise TypeError(
                f"target must be a specjax transformer (TransformerLM, with unembed); got "
                f"{self.target!r}"
            )
        if isinstance(self.num_heads, bool) or not isinstance(self.num_heads, int):
            raise ValueError(f"num_heads must be an integer >= 1, got {self.num_heads!r}")
        if self.num_heads < 1:
            raise ValueError(f"num_heads must be an integer >= 1, got {self.num_heads!r}")
        if self.draft_ids is not None:
            ids = check_draft_ids(self.draft_ids, tcfg.vocab_size)
            object.__setattr__(self, "draft_ids", ids)

    @property
    def vocab_size(self) -> int:
        return self.target.vocab_size

    @property
    def embed_dim(self) -> int:
        return self.target.config.embed_dim

    def init_params(self, key: jax.Array) -> dict:
        """Zero residual weights (each head starts as the target's own next-token guess, as
        Medusa initialises them), plus "lm_head" with `draft_ids` (random; see
        `with_target_columns`)."""
        h, k = self.embed_dim, self.num_heads
        params = {"w": jnp.zeros((k, h, h), jnp.float32), "b": jnp.zeros((k, h), jnp.float32)}
        if self.draft_ids is not None:
            shape = (h, len(self.draft_ids))
            params["lm_head"] = 0.02 * jax.random.normal(key, shape)
        return params

    def with_target_columns(self, params, target_params) -> dict:
        """`params` with "lm_head" set to the target's output layer at `draft_ids`."""
        if self.draft_ids is None:
            return params
        return dict(params, lm_head=target_columns(self.target, target_params, self.draft_ids))

    def features(self, params, feature) -> jax.Array:
        """[..., embed] -> [..., K, embed]: every head's residual block on the feature."""
        f = feature.astype(jnp.float32)[..., None, :]  # [..., 1, embed]
        z = jnp.einsum("...h,khg->...kg", feature.astype(jnp.float32), params["w"]) + params["b"]
        return f + jax.nn.silu(z)

    def logits(self, target_params, params, feature) -> jax.Array:
        """float32 [..., K, vocab]: each head's draft logits (-inf outside `draft_ids`)."""
        h = self.features(params, feature)
        if self.draft_ids is None:
            return self.target.unembed(target_params, h)
        return full_rows(self.draft_logits(params, feature), self.draft_ids, self.vocab_size)

    def draft_logits(self, params, feature) -> jax.Array:
        """float32 [..., K, N] logits over the N `draft_ids` alone: column j is draft_ids[j]."""
        if self.draft_ids is None:
            raise ValueError("draft_logits: these heads draft over the full vocabulary")
        return self.features(params, feature) @ params["lm_head"].astype(jnp.float32)
