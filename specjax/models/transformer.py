"""A linen decoder-only transformer (GPT-2 or Llama family) over an explicit KV cache.

One forward call serves prefill, one-token decode and (γ+1)-token verification alike: row b's
tokens[b, :num_new[b]] are written at positions cache.lengths[b] onward and its length advances by
num_new[b]; tokens past num_new[b] are padding whose logits are ignored. Positions and the
attention mask default to a chain's (see `models/interface.py`); a token tree passes its own.
"""

from __future__ import annotations

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from specjax import checks, kernels
from specjax.models.attention import Attention
from specjax.models.config import TransformerConfig
from specjax.models.interface import (
    ApplyFromForward,
    ModelOutput,
    causal_mask,
    chain_positions,
    init_params,
)
from specjax.models.kv_cache import KVCache, init_kv_cache
from specjax.models.layers import Mlp, Norm
from specjax.models.linear import dense, partitioned
from specjax.models.packed import PackedBlock, PackedEmbed, PackedWeights

__all__ = ["Block", "ModelOutput", "Transformer", "TransformerLM"]


class Block(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)); x + mlp(norm(x))."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, x, positions, mask, cache_k, cache_v, starts):
        attn, cache_k, cache_v = Attention(self.config, name="attn")(
            Norm(self.config, name="attn_norm")(x), positions, mask, cache_k, cache_v, starts
        )
        x = x + attn
        x = x + Mlp(self.config, name="mlp")(Norm(self.config, name="mlp_norm")(x))
        return x, cache_k, cache_v


class Transformer(nn.Module):
    """Decoder-only transformer; `__call__(tokens, num_new, cache) -> ModelOutput`."""

    config: TransformerConfig

    @nn.compact
    def __call__(
        self,
        tokens: jax.Array,
        num_new: jax.Array,
        cache: KVCache,
        positions: jax.Array | None = None,
        mask: jax.Array | None = None,
        return_layers: tuple = (),
    ) -> ModelOutput:
        """Runs T new tokens per row through the model, writing them into the cache.

        Args:
          tokens: int32 [batch, T].
          num_new: int32 [batch], how many of each row's T tokens are real (the rest padding).
          cache: KVCache with per-row lengths (where the new tokens are written).
          positions: int32 [batch, T] positions of the new tokens; None: a chain's.
          mask: bool [batch, T, max_len] cache slots each new token sees; None: causal.
          return_layers: blocks (0-based) whose output residual stream to return as `layers`.

        Returns:
          ModelOutput with logits [batch, T, vocab] (float32), the advanced cache, the final
          hidden states [batch, T, embed] and, if asked, layers [batch, T, len, embed].
        """
        for i in return_layers:
            if not 0 <= i < self.config.num_layers:
                raise ValueError(
                    f"return_layers: block {i} does not exist (the model has "
                    f"{self.config.num_layers} blocks, 0-based)"
                )
        cfg = self.config
        starts = cache.lengths  # [batch]
        if positions is None:
            positions = chain_positions(starts, tokens.shape[1])  # [batch, T]
        if mask is None:
            mask = causal_mask(positions, cache.max_len)  # [batch, T, max_len]
        if cfg.matmul == "packed" and cfg.tie_embeddings:
            embed = PackedEmbed(cfg, name="embed")
        else:
            embed = nn.Embed(
                cfg.vocab_size,
                cfg.embed_dim,
                dtype=cfg.compute_dtype,
                param_dtype=cfg.weights_dtype,
                embedding_init=partitioned(nn.initializers.normal(0.02), ("vocab", "embed")),
                name="embed",
            )
        x = embed(tokens)  # [batch, T, embed]
        if cfg.positions == "learned":
            pos_table = self.param(
                "pos_embed",
                partitioned(nn.initializers.normal(0.01), (None, "embed")),
                (cfg.max_len, cfg.embed_dim),
                cfg.weights_dtype,
            )
            x = x + jnp.take(pos_table, jnp.minimum(positions, cfg.max_len - 1), axis=0).astype(
                x.dtype
            )
        keys, values, picked = [], [], {}
        block = PackedBlock if cfg.matmul == "packed" else Block
        for i in range(cfg.num_layers):
            x, k, v = block(cfg, name=f"block_{i}")(
                x, positions, mask, cache.keys[i], cache.values[i], starts
            )
            keys.append(k)
            values.append(v)
            if i in return_layers:
                picked[i] = x
        x = Norm(cfg, name="final_norm")(x)
        if cfg.tie_embeddings:
            logits = embed.attend(x)  # [batch, T, vocab]
        elif cfg.matmul == "packed":
            kernel, _ = PackedWeights(cfg, cfg.embed_dim, cfg.vocab_size, name="head")()
            logits = kernels.packed_matmul(x, kernel, cfg.vocab_size)
        else:
            logits = dense(cfg, cfg.vocab_size, ("embed", "vocab"), name="head")(x)
        new_cache = KVCache(tuple(keys), tuple(values), starts + num_new.astype(jnp.int32))
        layers = jnp.stack([picked[i] for i in return_layers], axis=2) if return_layers else None
        return ModelOutput(logits.astype(jnp.float32), new_cache, x, layers)


@dataclasses.dataclass(frozen=True)
class TransformerLM(ApplyFromForward):
    """The decoding interface around `Transformer` (hashable: usable as a static jit argument).

    Every specjax model (transformer, n-gram, prompt lookup, uniform) offers the same three
    methods, so decoding loops take any target and any draft.
    """

    config: TransformerConfig

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def module(self) -> Transformer:
        return Transformer(self.config)

    def init_params(self, key: jax.Array) -> dict:
        """Random parameters (plain arrays; logical axes via `logical_axes`).

        Called eagerly, it runs as one jitted program (`interface.init_params`), not op by op."""
        if checks.is_concrete(key):
            return init_params(self, key)
        cache = self.init_state(1, min(8, self.config.max_len))  # any cache: shapes only
        variables = self.module.init(
            key, jnp.zeros((1, 1), jnp.int32), jnp.ones((1,), jnp.int32), cache
        )
        return nn.meta.unbox(variables["params"])

    def logical_axes(self) -> dict:
        """A pytree like the params holding each parameter's logical axis names (PartitionSpec)."""
        cache = self.init_state(1, min(8, self.config.max_len))  # any cache: shapes only
        abstract = jax.eval_shape(
            lambda: self.module.init(
                jax.random.PRNGKey(0),
                jnp.zeros((1, 1), jnp.int32),
                jnp.ones((1,), jnp.int32),
                cache,
            )
        )
        return nn.get_partition_spec(abstract)["params"]

    @property
    def max_positions(self) -> int | None:
        """Most positions the model can read: its learned position table's size (GPT-2 style),
        or None for RoPE (no table; `TransformerConfig.max_len` is then advisory)."""
        return self.config.max_len if self.config.positions == "learned" else None

    @property
    def trained_context(self) -> int | None:
        """Longest context the model was trained for, where nothing enforces it: RoPE models
        read any position, but were trained up to `TransformerConfig.max_len` (a converted
        checkpoint's `max_position_embeddings` or GGUF `context_length`). None for learned
        positions, whose table is a hard limit (`max_positions`)."""
        return self.config.max_len if self.config.positions == "rope" else None

    def init_state(self, batch: int, max_len: int) -> KVCache:
        """An empty KV cache holding up to `max_len` positions per row."""
        cfg = self.config
        if max_len > cfg.max_len and cfg.positions == "learned":
            raise ValueError(
                f"max_len={max_len} exceeds the model's learned position table "
                f"(TransformerConfig.max_len={cfg.max_len})"
            )
        return init_kv_cache(
            cfg.num_layers, batch, max_len, cfg.num_kv_heads, cfg.head_dim, cfg.compute_dtype
        )

    def embed(self, params, tokens: jax.Array) -> jax.Array:
        """The token embedding alone: int32 [batch, T] -> [batch, T, embed] (no positions).

        What a feature head (EAGLE) reads for the next token, sharing the target's table.
        """
        cfg = self.config
        if cfg.matmul == "packed" and cfg.tie_embeddings:
            return PackedEmbed(cfg).apply({"params": params["embed"]}, tokens)
        table = params["embed"]["embedding"]  # [vocab, embed]
        return jnp.take(table, tokens, axis=0).astype(cfg.compute_dtype)

    def unembed(self, params, hidden: jax.Array) -> jax.Array:
        """The output layer alone: final hidden states [..., embed] -> float32 logits [..., vocab].

        `unembed(params, forward(...).hidden)` is `forward(...).logits`: a feature head turns the
        features it predicts into a distribution with the target's own head.
        """
        cfg = self.config
        hidden = hidden.astype(cfg.compute_dtype)
        if cfg.tie_embeddings:
            if cfg.matmul == "packed":
                embed = PackedEmbed(cfg)
                logits = embed.apply({"params": params["embed"]}, hidden, method=embed.attend)
            else:
                table = params["embed"]["embedding"].astype(cfg.compute_dtype)
                logits = hidden @ table.T
        elif cfg.matmul == "packed":
            logits = kernels.packed_matmul(hidden, params["head"]["kernel"], cfg.vocab_size)
        else:
            logits = hidden @ params["head"]["kernel"].astype(cfg.compute_dtype)
        return logits.astype(jnp.float32)

    def forward(
        self,
        params,
        state: KVCache,
        tokens: jax.Array,
        num_new: jax.Array,
        *,
        positions=None,
        mask=None,
        return_layers: tuple = (),
    ) -> ModelOutput:
        """Forward pass (see models/interface.py); returns ModelOutput(logits, state, hidden,
        layers): `layers` holds the output of each block in `return_layers` (0-based)."""
        checks.check_rank("tokens", tokens, 2, "[batch, T]")
        batch, t = tokens.shape
        if positions is not None:
            checks.check_shape("positions", positions, (batch, t), "[batch, T]")
        if mask is not None:
            checks.check_shape("mask", mask, (batch, t, state.max_len), "[batch, T, max_len]")
        return _forward_jit(self, tuple(return_layers), params, state, tokens, num_new,
                            positions, mask)  # fmt: skip


# The module runs inside one `jax.jit` keyed by (model, return_layers, shapes), called eagerly
# and inside traces alike:
# - an eager call (a test's reference pass, a notebook cell) is one compiled program, not the
#   flax module op by op (XLA compiles every op for every new shape: dozens of tiny programs);
# - inside a trace it is a nested jit, whose jaxpr jax caches: the decoders' programs call the
#   same model at the same shapes (a prefill, a draft step) and trace it once, not once per
#   program. XLA inlines the call, so the compiled programs compute what they did before (the
#   decoding fixture is bit-identical); seven decoders on one pair traced in 3.0 s, not 5.8 s.
@functools.partial(jax.jit, static_argnums=(0, 1))
def _forward_jit(model, return_layers, params, state, tokens, num_new, positions, mask):
    return model.module.apply(
        {"params": params}, tokens, num_new, state, positions, mask, return_layers
    )
