"""The optimizer: AdamW on a linear warm-up + cosine schedule, after global-norm clipping."""

from __future__ import annotations

import jax
import optax


def learning_rate_schedule(
    peak_lr: float, warmup_steps: int, total_steps: int, end_lr_fraction: float = 0.1
) -> optax.Schedule:
    """Linear warm-up from 0 to `peak_lr`, then cosine decay to `end_lr_fraction * peak_lr`.

    Args:
      peak_lr: learning rate at the end of warm-up, > 0.
      warmup_steps: steps of linear warm-up, >= 0 and < total_steps.
      total_steps: length of the whole schedule (the run's num_steps), >= 1.
      end_lr_fraction: final learning rate as a fraction of the peak, in [0, 1].

    Returns:
      An optax schedule, step -> learning rate.
    """
    if not peak_lr > 0:
        raise ValueError(f"peak_lr must be > 0, got {peak_lr!r}")
    if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps < 1:
        raise ValueError(f"total_steps must be an integer >= 1, got {total_steps!r}")
    if not 0 <= warmup_steps < total_steps:
        raise ValueError(
            f"warmup_steps must be in [0, total_steps={total_steps}), got {warmup_steps}"
        )
    if not 0.0 <= end_lr_fraction <= 1.0:
        raise ValueError(f"end_lr_fraction must be in [0, 1], got {end_lr_fraction!r}")
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=peak_lr,
        warmup_steps=warmup_steps,
        decay_steps=total_steps,
        end_value=peak_lr * end_lr_fraction,
    )


def _decay_mask(params):
    """Weight decay on matrices only: norms' scales and biases are not shrunk towards 0."""
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def make_optimizer(
    total_steps: int,
    peak_lr: float = 1e-3,
    warmup_steps: int = 100,
    end_lr_fraction: float = 0.1,
    weight_decay: float = 0.1,
    clip_norm: float = 1.0,
    b1: float = 0.9,
    b2: float = 0.95,
) -> optax.GradientTransformation:
    """Global-norm clipping, then AdamW with `learning_rate_schedule`.

    Args:
      total_steps: steps of the whole run (the cosine reaches its end here).
      peak_lr, warmup_steps, end_lr_fraction: see `learning_rate_schedule`.
      weight_decay: decoupled weight decay on matrices (ndim >= 2), >= 0.
      clip_norm: gradients are rescaled to global norm <= clip_norm, > 0.
      b1, b2: Adam moment decay rates.

    Returns:
      The optax transformation; its state counts steps, so restoring it restores the schedule.
    """
    if not clip_norm > 0:
        raise ValueError(f"clip_norm must be > 0, got {clip_norm!r}")
    if not weight_decay >= 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
    schedule = learning_rate_schedule(peak_lr, warmup_steps, total_steps, end_lr_fraction)
    return optax.chain(
        optax.clip_by_global_norm(clip_norm),
        optax.adamw(schedule, b1=b1, b2=b2, weight_decay=weight_decay, mask=_decay_mask),
    )
