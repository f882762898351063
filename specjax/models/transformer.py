"""A linen decoder-only transformer (GPT-2 or Llama family) over an explicit KV cache.

One forward call serves prefill, one-token decode and (γ+1)-token verification alike: row b's
tokens[b, :num_new[b]] are written at positions cache.lengths[b] onward and its length advances by
num_new[b]; tokens past num_new[b] are padding whose logits are ignored.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from specjax import checks
from specjax.models.attention import Attention
from specjax.models.config import TransformerConfig
from specjax.models.kv_cache import KVCache, init_kv_cache
from specjax.models.layers import Mlp, Norm, partitioned


@struct.dataclass
class ModelOutput:
    """What a forward pass returns.

    Attributes:
      logits: float32 [batch, T, vocab].
      cache: the updated KVCache.
    """

    logits: jax.Array
    cache: KVCache


class Block(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)); x + mlp(norm(x))."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, x, positions, cache_k, cache_v, starts):
        attn, cache_k, cache_v = Attention(self.config, name="attn")(
            Norm(self.config, name="attn_norm")(x), positions, cache_k, cache_v, starts
        )
        x = x + attn
        x = x + Mlp(self.config, name="mlp")(Norm(self.config, name="mlp_norm")(x))
        return x, cache_k, cache_v


class Transformer(nn.Module):
    """Decoder-only transformer; `__call__(tokens, num_new, cache) -> ModelOutput`."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, tokens: jax.Array, num_new: jax.Array, cache: KVCache) -> ModelOutput:
        """Runs T new tokens per row through the model, writing them into the cache.

        Args:
          tokens: int32 [batch, T].
          num_new: int32 [batch], how many of each row's T tokens are real (the rest padding).
          cache: KVCache with per-row lengths (where the new tokens start).

        Returns:
          ModelOutput with logits [batch, T, vocab] (float32) and the advanced cache.
        """
        cfg = self.config
        starts = cache.lengths  # [batch]
        positions = starts[:, None] + jnp.arange(tokens.shape[1])[None, :]  # [batch, T]
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
        keys, values = [], []
        for i in range(cfg.num_layers):
            x, k, v = Block(cfg, name=f"block_{i}")(
                x, positions, cache.keys[i], cache.values[i], starts
            )
            keys.append(k)
            values.append(v)
        x = Norm(cfg, name="final_norm")(x)
        if cfg.tie_embeddings:
            logits = embed.attend(x)
        else:
            logits = nn.Dense(
                cfg.vocab_size,
                use_bias=False,
                dtype=cfg.compute_dtype,
                param_dtype=cfg.weights_dtype,
                kernel_init=partitioned(nn.initializers.normal(0.02), ("embed", "vocab")),
                name="head",
            )(x)
        new_cache = KVCache(tuple(keys), tuple(values), starts + num_new.astype(jnp.int32))
        return ModelOutput(logits.astype(jnp.float32), new_cache)


@dataclasses.dataclass(frozen=True)
class TransformerLM:
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
        """Random parameters (plain arrays; logical axes via `logical_axes`)."""
        cache = self.init_state(1, 8)
        variables = self.module.init(
            key, jnp.zeros((1, 1), jnp.int32), jnp.ones((1,), jnp.int32), cache
        )
        return nn.meta.unbox(variables["params"])

    def logical_axes(self) -> dict:
        """A pytree like the params holding each parameter's logical axis names (PartitionSpec)."""
        cache = self.init_state(1, 8)
        abstract = jax.eval_shape(
            lambda: self.module.init(
                jax.random.PRNGKey(0),
                jnp.zeros((1, 1), jnp.int32),
                jnp.ones((1,), jnp.int32),
                cache,
            )
        )
        return nn.get_partition_spec(abstract)["params"]

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

    def apply(self, params, state: KVCache, tokens: jax.Array, num_new: jax.Array):
        """Forward pass; returns (logits float32 [batch, T, vocab], new state)."""
        checks.check_rank("tokens", tokens, 2, "[batch, T]")
        out = self.module.apply({"params": params}, tokens, num_new, state)
        return out.logits, out.cache
