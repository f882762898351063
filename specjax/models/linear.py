"""Dense projections of the "xla" layout, and the initializer of packed kernels.

`TransformerConfig.matmul` picks the layout of every projection kernel (q/k/v/out, the MLP,
an untied head):
  "xla"     the kernel is [in..., out...]: flax's `Dense`/`DenseGeneral` (`dense` below),
            multiplied by XLA's dot.
  "packed"  projections that take the same input are fused (q|k|v, gate|up) and each kernel
            is [ceil(out / 8), in, 8] (`specjax.kernels.pack` of the [in, out] matrix),
            multiplied by specjax's weight-streaming CPU kernels (`models/packed.py`).
            Same function, other rounding: outputs match "xla" to float32 accuracy.
`specjax.models.layout.convert_params` moves params between the two.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from specjax import kernels
from specjax.models.config import TransformerConfig


def partitioned(init, axes):
    """Wraps an initializer with logical axis names."""
    return nn.with_logical_partitioning(init, axes)


def packed_init(init, in_features: int, out_features: int):
    """An initializer of a packed kernel: `init` on [in, out], then `kernels.pack`."""

    def make(key, shape, dtype=jnp.float32):
        del shape
        return kernels.pack(init(key, (in_features, out_features), dtype))

    return make


def dense(
    config: TransformerConfig,
    features,
    axes: tuple,
    *,
    in_dims: int = 1,
    use_bias: bool = False,
    name: str,
) -> nn.Module:
    """A projection of the "xla" layout.

    Args:
      config: the model's config (`matmul`, dtypes).
      features: output size (int) or shape (tuple).
      axes: logical axis names of the "xla" kernel [in..., out...].
      in_dims: trailing axes of the input that are contracted.
      use_bias: whether it has a bias (its axes: the output part of `axes`).
      name: the param scope ("query", "up", "head", ...).

    Returns:
      A module mapping x [..., in...] to [..., features...]: `nn.Dense` for a plain
      [in, out] kernel, `nn.DenseGeneral` otherwise (the modules this model always used, so
      params, initialisation and programs are unchanged).
    """
    plain = isinstance(features, int) and in_dims == 1
    features = (features,) if isinstance(features, int) else tuple(features)
    common = dict(
        use_bias=use_bias,
        dtype=config.compute_dtype,
        param_dtype=config.weights_dtype,
        kernel_init=partitioned(nn.initializers.normal(0.02), axes),
        bias_init=partitioned(nn.initializers.zeros, axes[in_dims:]),
        name=name,
    )
    if plain:  # `Dense` as before the packed layout existed: same params, init and program
        return nn.Dense(features[0], **common)
    axis = tuple(range(-in_dims, 0)) if in_dims > 1 else -1
    return nn.DenseGeneral(features if len(features) > 1 else features[0], axis=axis, **common)
