"""`TransformerConfig`: one frozen record that describes GPT-2 and Llama-family decoders.

Frozen and hashable so it can be a static argument of `jax.jit`; derive variants with
`config.replace(...)` instead of threading keyword arguments.
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import jax.numpy as jnp

NORMS = ("layernorm", "rmsnorm")
POSITIONS = ("learned", "rope")
MLPS = ("gelu", "swiglu")
# Attention implementations (specjax/models/attention_kernels.py); "auto" picks by backend.
ATTENTIONS = ("auto", "xla", "blockwise", "dot_product_attention")
# Weight layouts of the projections (specjax/models/linear.py).
MATMULS = ("xla", "packed")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """Llama 3 style frequency-dependent RoPE scaling (`rope_type: llama3` in HF configs)."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of a decoder-only transformer.

    Attributes:
      vocab_size: number of token ids.
      num_layers: decoder blocks.
      num_heads: query heads.
      num_kv_heads: key/value heads (== num_heads: multi-head; 1: multi-query; else grouped).
      embed_dim: residual width.
      mlp_dim: hidden width of the MLP.
      head_dim: per-head width; None means embed_dim // num_heads.
      max_len: longest sequence (learned position table size; largest cache).
      norm: "layernorm" (GPT-2) or "rmsnorm" (Llama).
      norm_eps: epsilon of the norms.
      positions: "learned" (GPT-2) or "rope" (Llama).
      rope_theta: RoPE base.
      rope_scaling: optional Llama 3 scaling.
      mlp: "gelu" (GPT-2, tanh approximation) or "swiglu" (Llama).
      use_bias: biases on every projection and MLP layer (GPT-2).
      qkv_bias: biases on the q/k/v projections only (Qwen2); implied by use_bias.
      tie_embeddings: the output head is the transposed token embedding.
      dtype: compute dtype name ("float32", "bfloat16").
      param_dtype: parameter dtype name.
      attention: "auto" (by backend), "xla" (scores the whole cache buffer), "blockwise"
        (online softmax over cache blocks up to the longest live row) or
        "dot_product_attention" (`jax.nn.dot_product_attention`, cuDNN on GPU). Changes no
        weight; configs saved without it load as "auto".
      attention_block: cache slots per block of "blockwise".
      matmul: the projections' weight layout and product (`models/linear.py`): "xla"
        (flax's [in..., out...] kernels and XLA's dot) or "packed" (panels of 8 output columns,
        specjax's weight-streaming CPU kernel: a decode step or a verification reads each
        weight once). A different layout is a different params tree:
        `models.layout.convert_params` moves params between them.
    """

    vocab_size: int
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int | None = None
    embed_dim: int = 256
    mlp_dim: int = 1024
    head_dim: int | None = None
    max_len: int = 1024
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    positions: str = "learned"
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    mlp: str = "gelu"
    use_bias: bool = True
    qkv_bias: bool = False
    tie_embeddings: bool = True
    dtype: str = "float32"
    param_dtype: str = "float32"
    attention: str = "auto"
    attention_block: int = 128
    matmul: str = "xla"

    # Fields filled in by __post_init__ when left as None (not compared: same model, same hash).
    _derived: tuple = dataclasses.field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self):
        derived = []
        if self.num_kv_heads is None:
            derived.append("num_kv_heads")
            object.__setattr__(self, "num_kv_heads", self.num_heads)
        for name in (
            "vocab_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "embed_dim",
            "mlp_dim",
            "max_len",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TransformerConfig.{name} must be an integer >= 1, got {value!r}")
        for name in ("norm_eps", "rope_theta"):  # a NaN or negative one gives NaN logits
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, numbers.Real)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ValueError(f"TransformerConfig.{name} must be finite and > 0, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"TransformerConfig.num_heads ({self.num_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        if self.head_dim is None:
            if self.embed_dim % self.num_heads:
                raise ValueError(
                    f"TransformerConfig.embed_dim ({self.embed_dim}) must be divisible by "
                    f"num_heads ({self.num_heads}) unless head_dim is given"
                )
            derived.append("head_dim")
            object.__setattr__(self, "head_dim", self.embed_dim // self.num_heads)
        if (
            isinstance(self.head_dim, bool)
            or not isinstance(self.head_dim, int)
            or self.head_dim < 1
        ):
            raise ValueError(
                "TransformerConfig.head_dim must be an integer >= 1 (or None), "
                f"got {self.head_dim!r}"
            )
        object.__setattr__(self, "_derived", tuple(derived))
        for name, allowed in (
            ("norm", NORMS),
            ("positions", POSITIONS),
            ("mlp", MLPS),
            ("attention", ATTENTIONS),
            ("matmul", MATMULS),
        ):
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(
                    f"TransformerConfig.{name} must be one of {allowed}, got {value!r}"
                )
        if (
            isinstance(self.attention_block, bool)
            or not isinstance(self.attention_block, int)
            or self.attention_block < 1
        ):
            raise ValueError(
                f"TransformerConfig.attention_block must be an integer >= 1, "
                f"got {self.attention_block!r}"
            )
        if self.positions == "rope" and self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head_dim, got {self.head_dim}")
        for name in ("dtype", "param_dtype"):
            jnp.dtype(getattr(self, name))  # raises on unknown names

    def replace(self, **changes) -> TransformerConfig:
        """A copy with `changes`; fields that were derived (num_kv_heads, head_dim left as None)
        are derived again from the new values unless given explicitly.

        `dataclasses.replace` would instead carry the old derived values over, so that e.g.
        changing num_heads silently kept the old num_kv_heads (a different attention layout).
        """
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        for name in self._derived:
            fields[name] = None
        fields.update(changes)
        return TransformerConfig(**fields)

    @property
    def compute_dtype(self):
        return jnp.dtype(self.dtype)

    @property
    def weights_dtype(self):
        return jnp.dtype(self.param_dtype)

    @classmethod
    def gpt2(cls, vocab_size: int, **kwargs) -> TransformerConfig:
        """GPT-2 family defaults: LayerNorm, learned positions, GELU MLP, biases, tied head."""
        base = dict(norm="layernorm", positions="learned", mlp="gelu", use_bias=True)
        base.update(tie_embeddings=True, norm_eps=1e-5)
        base.update(kwargs)
        return cls(vocab_size=vocab_size, **base)

    @classmethod
    def llama(cls, vocab_size: int, **kwargs) -> TransformerConfig:
        """Llama family defaults: RMSNorm, RoPE, SwiGLU, no biases, untied head."""
        base = dict(norm="rmsnorm", positions="rope", mlp="swiglu", use_bias=False)
        base.update(tie_embeddings=False, norm_eps=1e-6)
        base.update(kwargs)
        return cls(vocab_size=vocab_size, **base)

    def num_params(self) -> int:
        """Parameter count (embeddings included)."""
        d, h, kv, hd, m = (
            self.embed_dim,
            self.num_heads,
            self.num_kv_heads,
            self.head_dim,
            self.mlp_dim,
        )
        attn = d * (h + 2 * kv) * hd + h * hd * d
        mlp = (3 if self.mlp == "swiglu" else 2) * d * m
        norms = (2 if self.norm == "layernorm" else 1) * d * 2
        bias = 0
        if self.use_bias:
            bias = (h + 2 * kv) * hd + d + (m + d if self.mlp == "gelu" else 2 * m + d)
        elif self.qkv_bias:
            bias = (h + 2 * kv) * hd
        per_layer = attn + mlp + norms + bias
        emb = self.vocab_size * d + (self.max_len * d if self.positions == "learned" else 0)
        head = 0 if self.tie_embeddings else self.vocab_size * d
        final_norm = (2 if self.norm == "layernorm" else 1) * d
        return self.num_layers * per_layer + emb + head + final_norm
