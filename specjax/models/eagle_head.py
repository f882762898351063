"""`EagleHead`: an EAGLE feature head, a one-block transformer drafting from the target's features.

EAGLE (Li et al. 2024) drafts at the feature level. At position t the head reads the target's
final hidden state f_t and the embedding of the next token x_{t+1} (the target's own table),
fuses them, fc(concat(embed(x_{t+1}), f_t)) (2H -> H, with bias), runs one decoder block of the
target's family over its own KV cache, and outputs a predicted f_{t+1}. The target's frozen
output layer turns that into q(x_{t+2}). Drafting continues on the head's own predictions:
(f^_{t+1}, x_{t+2}) -> f^_{t+2} -> ...

EAGLE-3 form (Li et al. 2025), `EagleHead(target, feature_layers=(i, j, k), draft_ids=...)`: the
head reads the residual stream after three target blocks (low, middle, high) instead of the final
hidden state, fused by a matrix g_t = concat(l_t, m_t, h_t) @ fuse (3H -> H, param "fuse"), and
drafts with its own output layer over a reduced vocabulary. Its outputs are no longer asked to
equal a target feature: while drafting it feeds its own output a_{t+1} where g_{t+1} would be,
and training-time test trains it that way (`training/eagle3.py`). So true features enter
through `fuse_features` (identity for EAGLE-1) and predicted ones go in as they are.

Layouts: a head trains in the "xla" layout (flax's Dense, XLA's dots). For decoding on the CPU,
`head.with_matmul(params, "packed")` gives the same head in the packed layout of specjax's kernels
(`models/packed.py`): its block, fc, fuse and own output layer stream their weights as the
target's do: on SmolLM2 and a 2-core CPU an EAGLE-3 chain iteration (3 drafts, 1 verification)
costs 8.6 % less, a dynamic tree's 12-14 % (experiments/real/RESULTS.md, "EAGLE heads in the
packed layout").

The head is a model in the `models/interface.py` sense only partly: it is fed (features, token
embeddings) rather than tokens, so it has `forward_features` instead of `apply`. Its drafter is
`decoding/drafters/eagle.py`'s `EagleDrafter`; its training is `training/eagle.py`.
"""

from __future__ import annotations

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from specjax import checks, kernels
from specjax.models.config import MATMULS, TransformerConfig
from specjax.models.draft_vocab import check_draft_ids, column_subset, full_rows, target_columns
from specjax.models.interface import causal_mask, chain_positions, init_params
from specjax.models.kv_cache import KVCache, init_kv_cache
from specjax.models.packed import PackedBlock, PackedWeights, packed_block_params, xla_block_params
from specjax.models.transformer import Block


class EagleHeadModule(nn.Module):
    """fc(concat(embed, feature)) -> one decoder block -> predicted next feature."""

    config: TransformerConfig  # the head's: the target's block shape, one layer

    @nn.compact
    def __call__(self, features, embeds, num_new, cache: KVCache, positions=None, mask=None):
        """Feeds T (feature, next-token embedding) pairs per row.

        Args:
          features: [batch, T, embed] the target's (or the head's predicted) features f_t.
          embeds: [batch, T, embed] embeddings of the tokens x_{t+1}.
          num_new: int32 [batch] real pairs per row (the rest padding).
          cache: the head's KVCache (one layer); pairs are written from cache.lengths on.
          positions: int32 [batch, T]; None: a chain's.
          mask: bool [batch, T, max_len]; None: causal.

        Returns:
          (predicted features f^_{t+1} [batch, T, embed], advanced cache).
        """
        cfg = self.config
        starts = cache.lengths
        if positions is None:
            positions = chain_positions(starts, features.shape[1])
        if mask is None:
            mask = causal_mask(positions, cache.max_len)
        x = jnp.concatenate([embeds, features], axis=-1).astype(cfg.compute_dtype)
        if cfg.matmul == "packed":
            kernel, bias = PackedWeights(cfg, 2 * cfg.embed_dim, cfg.embed_dim, True, name="fc")()
            x = kernels.fused_matmul(x, kernel, cfg.embed_dim, bias=bias).astype(x.dtype)
        else:
            x = nn.Dense(
                cfg.embed_dim,
                use_bias=True,
                dtype=cfg.compute_dtype,
                param_dtype=cfg.weights_dtype,
                kernel_init=nn.initializers.normal(0.02),
                name="fc",
            )(x)  # [batch, T, embed]
        if cfg.positions == "learned":
            table = self.param(
                "pos_embed", nn.initializers.normal(0.01), (cfg.max_len, cfg.embed_dim),
                cfg.weights_dtype,
            )  # fmt: skip
            x = x + jnp.take(table, jnp.minimum(positions, cfg.max_len - 1), axis=0).astype(x.dtype)
        block = PackedBlock if cfg.matmul == "packed" else Block
        x, k, v = block(cfg, name="block_0")(
            x, positions, mask, cache.keys[0], cache.values[0], starts
        )
        new_cache = KVCache((k,), (v,), starts + num_new.astype(jnp.int32))
        return x, new_cache


@dataclasses.dataclass(frozen=True)
class EagleHead:
    """An EAGLE-1 head for `target` (hashable: a static jit argument).

    Attributes:
      target: the target model (a `TransformerLM`: its `embed`/`unembed` are shared, frozen).
      feature_layers: () (EAGLE-1): the head reads the target's final hidden state. Else the
        target blocks (0-based) whose output residual streams it reads and fuses (EAGLE-3:
        low, middle, high; `eagle3_layers(num_layers)`), param "fuse" [len * embed, embed].
      config: the head's config; None (the default): the target's block shape with one layer,
        in the "xla" layout (trainable). `with_matmul` gives the packed layout, for decoding
        with specjax's CPU kernels (params "fuse" and "lm_head" are then packed too).
      draft_ids: None: q over the full vocabulary through the target's output layer (EAGLE-1).
        Else a reduced draft vocabulary (EAGLE-3's): sorted distinct token ids, and the head
        has its own output layer over them, param "lm_head" [embed, N] (start it from the
        target's columns: `with_target_columns`). q is 0 outside these ids, which every lossless
        rule allows (those tokens are never drafted and stay reachable through the residual);
        on SmolLM2 the full-vocabulary product is about a fifth of a target step.
    """

    target: object
    config: TransformerConfig | None = None
    draft_ids: tuple | None = None
    feature_layers: tuple = ()

    def __post_init__(self):
        tcfg = getattr(self.target, "config", None)
        if tcfg is None or not hasattr(self.target, "unembed"):
            raise TypeError(
                f"target must be a specjax transformer (TransformerLM, with embed/unembed); got "
                f"{self.target!r}"
            )
        if self.config is None:
            object.__setattr__(self, "config", tcfg.replace(num_layers=1, matmul="xla"))
        if self.draft_ids is not None:
            ids = check_draft_ids(self.draft_ids, tcfg.vocab_size)
            object.__setattr__(self, "draft_ids", ids)
        if not all(checks.is_integer(i) for i in self.feature_layers):  # 1.5 read block 1
            raise TypeError(f"feature_layers must hold block numbers; got {self.feature_layers!r}")
        layers = tuple(int(i) for i in self.feature_layers)
        if len(set(layers)) != len(layers) or any(not 0 <= i < tcfg.num_layers for i in layers):
            raise ValueError(
                f"feature_layers must be distinct blocks of the target (0..{tcfg.num_layers - 1})"
                f", got {self.feature_layers!r}"
            )
        object.__setattr__(self, "feature_layers", layers)
        if self.config.embed_dim != tcfg.embed_dim:
            raise ValueError(
                f"config.embed_dim={self.config.embed_dim} must equal the target's embed_dim="
                f"{tcfg.embed_dim} (the head predicts the target's features)"
            )

    @property
    def vocab_size(self) -> int:
        return self.target.vocab_size

    @property
    def embed_dim(self) -> int:
        return self.config.embed_dim

    @property
    def feature_dim(self) -> int:
        """Width of the true features the head reads: embed, or len(feature_layers) * embed."""
        return self.embed_dim * max(len(self.feature_layers), 1)

    @property
    def module(self) -> EagleHeadModule:
        return EagleHeadModule(self.config)

    def init_state(self, batch: int, max_len: int) -> KVCache:
        """An empty one-layer KV cache of `max_len` pairs per row."""
        cfg = self.config
        return init_kv_cache(1, batch, max_len, cfg.num_kv_heads, cfg.head_dim, cfg.compute_dtype)

    def init_params(self, key: jax.Array) -> dict:
        """Random head parameters (fc, block_0; the target's embedding and head are not here)."""
        if checks.is_concrete(key):  # eager: one jitted program, not op by op
            return init_params(self, key)
        h = self.embed_dim
        feats = jnp.zeros((1, 1, h), self.config.compute_dtype)
        variables = self.module.init(
            key, feats, feats, jnp.ones((1,), jnp.int32), self.init_state(1, 8)
        )
        params = dict(nn.meta.unbox(variables["params"]))
        if self.feature_layers:  # variance-preserving for a sum of len(layers) * embed inputs
            shape = (self.feature_dim, h)
            fuse = jax.random.normal(jax.random.fold_in(key, 2), shape) / self.feature_dim**0.5
            params["fuse"] = self._lay_out(fuse.astype(self.config.weights_dtype))
        if self.draft_ids is not None:
            shape = (h, len(self.draft_ids))
            lm_head = 0.02 * jax.random.normal(jax.random.fold_in(key, 1), shape)
            params["lm_head"] = self._lay_out(lm_head)
        return params

    @property
    def packed(self) -> bool:
        """Whether the head is in the packed layout (`with_matmul`)."""
        return self.config.matmul == "packed"

    def _lay_out(self, kernel):
        """A [in, out] matrix in this head's layout (packed: [ceil(out / 8), in, 8])."""
        return kernels.pack(kernel, jnp) if self.packed else kernel

    def _matmul(self, x, kernel, n: int) -> jax.Array:
        """float32 x @ kernel ([in, n], or packed) in this head's layout."""
        x = x.astype(jnp.float32)
        if self.packed:
            return kernels.packed_matmul(x, kernel.astype(jnp.float32), n)
        return x @ kernel.astype(jnp.float32)

    def with_matmul(self, params, matmul: str) -> tuple:
        """(head, params) in the weight layout `matmul` ("xla" or "packed"): the same function,
        its matrices re-laid out (block_0, fc, fuse, lm_head; the norms and biases as they are).

        Train in "xla" and decode in "packed" on the CPU, where specjax's kernels stream the
        weights (`models/packed.py`); off the CPU the packed layout runs its XLA reference.
        Returns (self, params) when the head already has that layout."""
        if matmul not in MATMULS:
            raise ValueError(f"matmul must be one of {MATMULS}, got {matmul!r}")
        if matmul == self.config.matmul:
            return self, params
        head = dataclasses.replace(self, config=self.config.replace(matmul=matmul))
        xp = np if all(isinstance(x, np.ndarray) for x in jax.tree.leaves(params)) else jnp
        widths = {"fc": self.embed_dim, "fuse": self.embed_dim}  # output columns of each matrix
        widths["lm_head"] = len(self.draft_ids or ())

        def relay(name, kernel):
            if matmul == "packed":
                return kernels.pack(kernel, xp)
            return kernels.unpack(kernel, widths[name], xp)

        to_layout = packed_block_params if matmul == "packed" else xla_block_params
        out = dict(params, block_0=to_layout(head.config, params["block_0"], xp))
        out["fc"] = dict(params["fc"], kernel=relay("fc", params["fc"]["kernel"]))
        for name in ("fuse", "lm_head"):
            if name in params:
                out[name] = relay(name, params[name])
        return head, out

    def with_target_columns(self, params, target_params) -> dict:
        """`params` with "lm_head" set to the target's output layer at `draft_ids` (a start)."""
        if self.draft_ids is None:
            return params
        columns = target_columns(self.target, target_params, self.draft_ids)
        return dict(params, lm_head=self._lay_out(columns))

    def restricted(self, params, ids) -> tuple:
        """(head, params) drafting over `ids` only, a subset of `draft_ids`: the same trained
        head with its output layer cut to those columns (q renormalized over them, 0 elsewhere).

        For sweeping the draft vocabulary of one trained head (e.g. its N' most frequent of N
        tokens). ValueError unless the head has `draft_ids` and `ids` are among them."""
        if self.draft_ids is None:
            raise ValueError("restricted: this head drafts over the full vocabulary (no draft_ids)")
        head = dataclasses.replace(self, draft_ids=ids)  # checked as any draft_ids are
        cols = column_subset(self.draft_ids, head.draft_ids)
        lm_head = jnp.asarray(params["lm_head"])
        if self.packed:
            lm_head = kernels.unpack(lm_head, len(self.draft_ids), jnp)
        return head, dict(params, lm_head=head._lay_out(lm_head[:, cols]))

    def fuse_features(self, params, features) -> jax.Array:
        """The head's input from true target features: [..., feature_dim] -> [..., embed]
        (EAGLE-3: the fused layers; EAGLE-1: the final hidden state as it is)."""
        if not self.feature_layers:
            return features
        if self.packed:
            fused = self._matmul(features, params["fuse"], self.embed_dim)  # float32
            return fused.astype(params["fuse"].dtype)  # the xla layout's dtype
        return features.astype(params["fuse"].dtype) @ params["fuse"]

    def forward_features(
        self, params, state, features, embeds, num_new, *, positions=None, mask=None
    ):
        """(predicted features [batch, T, embed], new state); see `EagleHeadModule`.

        `features` [batch, T, embed] are the head's inputs: `fuse_features` of true target
        features, or its own predictions."""
        block = {k: v for k, v in params.items() if k not in ("lm_head", "fuse")}
        return _features_jit(self, block, state, features, embeds, num_new, positions, mask)

    def logits(self, target_params, head_params, features) -> jax.Array:
        """float32 [..., vocab] draft logits on (predicted) features: the target's output layer,
        or with `draft_ids` the head's own over them and -inf elsewhere (q = 0 there)."""
        if self.draft_ids is None:
            return self.target.unembed(target_params, features)
        return full_rows(self.draft_logits(head_params, features), self.draft_ids, self.vocab_size)

    def draft_logits(self, head_params, features) -> jax.Array:
        """float32 [..., N] logits over the N `draft_ids` alone (a head with a draft vocabulary):
        column j is token draft_ids[j]."""
        if self.draft_ids is None:
            raise ValueError("draft_logits: this head drafts over the full vocabulary")
        return self._matmul(features, head_params["lm_head"], len(self.draft_ids))


def eagle3_layers(num_layers: int) -> tuple:
    """EAGLE-3's low, middle and high blocks (0-based) of a `num_layers` target: the outputs its
    code reads as hidden_states[2], [n // 2] and [n - 3] (index 0 being the embeddings).

    Those are three distinct, increasing blocks only from 7 layers on (at 4-6 two of them
    coincide); a shallower target gets a ValueError naming `num_layers`: pass the head's
    `feature_layers` yourself."""
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 7:
        raise ValueError(
            f"num_layers must be an integer >= 7 for EAGLE-3's three distinct blocks "
            f"(1, n // 2 - 1, n - 4), got {num_layers!r}; pass EagleHead(feature_layers=...)"
        )
    return (1, num_layers // 2 - 1, num_layers - 4)


# One jitted program per (head, shapes), eagerly and inside traces alike: traced once, not once
# per decoder program (see transformer._forward_jit).
@functools.partial(jax.jit, static_argnums=0)
def _features_jit(head, block, state, features, embeds, num_new, positions, mask):
    return head.module.apply({"params": block}, features, embeds, num_new, state, positions, mask)
