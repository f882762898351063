"""Distilling a draft from a frozen target, with objectives aimed at the acceptance rate.

Speculative decoding accepts a draft token with probability beta = sum_x min(p, q) = 1 - TV(p, q)
(Leviathan et al. 2023, Section 3.2), so alpha is maximised by minimising the expected total
variation between the *warped* target and draft distributions. A draft trained on data alone
minimises KL(data || q) instead, which spends capacity on the data's tail the target may not
even model. The objectives here (all per position, over the target's distribution on training
windows):

- "tv":   TV(p_t, q_t) with p_t, q_t = softmax(logits / t); maximises alpha at temperature t.
- "kl":   KL(p_t || q_t), the classic distillation loss (smooth, mass-covering).
- "tv_kl": TV + kl_weight * KL: TV's gradient vanishes where q has no mass, KL's does not.
- "greedy": -log q(argmax p), a smooth stand-in for alpha at temperature 0, which is
  P[argmax q = argmax p] and has no useful gradient itself.

The loss sees both models' parameters in one dict {"draft": ..., "target": ...}, but only the
draft is differentiated and updated; the target is an argument of the step (not a constant
baked into the compiled program) and never enters the optimizer or the checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from specjax.models.sequence import sequence_logits
from specjax.training.steps import TrainState

OBJECTIVES = ("tv", "kl", "tv_kl", "greedy")


def divergence(
    target_logits: jax.Array,
    draft_logits: jax.Array,
    objective: str,
    temperature: float = 1.0,
    kl_weight: float = 0.1,
) -> jax.Array:
    """Per-position distillation loss between target and draft logits.

    Args:
      target_logits: [batch, T, vocab].
      draft_logits: [batch, T, vocab].
      objective: one of `OBJECTIVES`.
      temperature: > 0, applied to both models for "tv", "kl" and "tv_kl".
      kl_weight: weight of KL in "tv_kl".

    Returns:
      float32 [batch, T].
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    t_logits = target_logits.astype(jnp.float32)
    d_logits = draft_logits.astype(jnp.float32)
    if objective == "greedy":
        best = jnp.argmax(t_logits, axis=-1)  # [batch, T]
        return optax.softmax_cross_entropy_with_integer_labels(d_logits, best)
    log_p = jax.nn.log_softmax(t_logits / temperature, axis=-1)  # [batch, T, vocab]
    log_q = jax.nn.log_softmax(d_logits / temperature, axis=-1)  # [batch, T, vocab]
    p, q = jnp.exp(log_p), jnp.exp(log_q)
    tv = 0.5 * jnp.abs(p - q).sum(-1)
    kl = jnp.sum(p * (log_p - log_q), axis=-1)
    if objective == "tv":
        return tv
    if objective == "kl":
        return kl
    return tv + kl_weight * kl


def distill_loss(
    params: dict,
    inputs: jax.Array,
    draft,
    target,
    objective: str = "tv",
    temperature: float = 1.0,
    kl_weight: float = 0.1,
):
    """Mean distillation loss of a draft against a frozen target on token windows.

    Args:
      params: {"draft": draft params, "target": target params}; the target's are wrapped in
        `stop_gradient`, so the gradient of this loss w.r.t. them is exactly zero.
      inputs: int32 [batch, T] token windows.
      draft, target: the two models.
      objective, temperature, kl_weight: see `divergence`.

    Returns:
      (loss float32 [], (target_logits, draft_logits) each [batch, T, vocab]).
    """
    t_logits = sequence_logits(target, jax.lax.stop_gradient(params["target"]), inputs)
    d_logits = sequence_logits(draft, params["draft"], inputs)  # [batch, T, vocab]
    loss = divergence(t_logits, d_logits, objective, temperature, kl_weight).mean()
    return loss, (t_logits, d_logits)


def make_distill_step(
    draft,
    target,
    tx: optax.GradientTransformation,
    objective: str = "tv",
    temperature: float = 1.0,
    kl_weight: float = 0.1,
) -> Callable:
    """Builds `distill_step(state, batch, target_params) -> (state, metrics)`.

    Args:
      draft: the draft model (its params are `state.params`).
      target: the frozen target model.
      tx: the draft's optimizer.
      objective, temperature, kl_weight: see `divergence`.

    Returns:
      A pure function; batch is int32 [batch, seq_len + 1] (only the inputs [:, :-1] are used:
      the targets come from the target model). Metrics are float32 scalars: "loss",
      "tv" (mean TV at t=1, = 1 - alpha_t1 on the batch), "greedy_match" (mean alpha_t0 on the
      batch) and "grad_norm".
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")

    def loss_fn(draft_params, target_params, inputs):
        params = {"draft": draft_params, "target": target_params}
        return distill_loss(params, inputs, draft, target, objective, temperature, kl_weight)

    def distill_step(state: TrainState, batch: jax.Array, target_params):
        inputs = batch[:, :-1]  # [batch, T]
        (loss, (t_logits, d_logits)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params, target_params, inputs
        )
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        tv = divergence(t_logits, d_logits, "tv", 1.0).mean()
        match = jnp.mean(jnp.argmax(t_logits, -1) == jnp.argmax(d_logits, -1))
        metrics = {
            "loss": loss,
            "tv": tv,
            "greedy_match": match.astype(jnp.float32),
            "grad_norm": optax.tree.norm(grads),
        }
        return TrainState(state.step + 1, params, opt_state), metrics

    return distill_step
