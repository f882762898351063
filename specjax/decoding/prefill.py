"""Prefill: a model fed every prompt token but the last, before the first decoding step.

Every decoder keeps the pending-token invariant: a row of L tokens has its first L - 1 in each
model's state, and its last token is fed by the next step (with the drafts, or as the
autoregressive step's input). So every decoder's and drafter's `init` starts with this one call,
and a drafter that reads what the target computed on the prompt (a feature head, EAGLE-style)
hooks in here, where each model first sees the prompt.
"""

from __future__ import annotations

import jax


def prefill(model, params, state, prompts: jax.Array, prompt_lengths: jax.Array):
    """`state` after feeding each row's prompt tokens but the last (jittable).

    Args:
      model: any specjax model (`specjax/models/interface.py`).
      params: its parameters.
      state: its fresh decoding state, `model.init_state(batch, cache_len)`.
      prompts: int32 [batch, P] right-padded prompts.
      prompt_lengths: int32 [batch] real lengths, each >= 1.

    Returns:
      The model's state holding prompt_lengths - 1 tokens per row.
    """
    _, state = model.apply(params, state, prompts, prompt_lengths - 1)
    return state


def prefill_features(
    model, params, state, prompts: jax.Array, prompt_lengths: jax.Array, layers: tuple = ()
):
    """`prefill` through the model's `forward`, also returning its features (jittable).

    For decoders whose drafter reads the target's features (`drafters.base.reads_features`).

    Returns:
      (state holding prompt_lengths - 1 tokens per row, features [batch, P, F]: after each
      prompt token, valid for the first prompt_lengths - 1 positions; see `target_features`).
    """
    if not hasattr(model, "forward"):
        raise TypeError(
            f"a drafter that reads the target's features needs a target with `forward` (hidden "
            f"states); {type(model).__name__} has none"
        )
    out = model.forward(params, state, prompts, prompt_lengths - 1, return_layers=layers)
    if out.hidden is None:
        raise TypeError(f"{type(model).__name__}.forward returns no hidden states")
    return out.state, target_features(out, layers)


def target_features(out, layers: tuple = ()) -> jax.Array:
    """What a feature-reading drafter reads from a `forward` output: the final hidden state
    [batch, T, embed] (layers ()), or the residual streams after `layers`, concatenated,
    [batch, T, len(layers) * embed] (`drafters.base.feature_layers`)."""
    if not layers:
        return out.hidden
    batch, width = out.layers.shape[:2]
    return out.layers.reshape(batch, width, -1)
