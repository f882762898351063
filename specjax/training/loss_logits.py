"""The two laws a feature head's loss compares: the target's p and the head's q, as logits."""

from __future__ import annotations

import jax


def loss_logits(head, head_params, target_params, target, pred, columns):
    """(p logits, q logits) [..., V or N]: the target's at its final hidden states `target`
    (no gradient) and the head's at its outputs `pred`; over `columns`' N tokens when given
    (see `eagle_loss`), and a head with draft_ids uses its own output layer for q."""
    if head.draft_ids is not None:  # the head's own output layer over its draft vocabulary
        if columns is None:
            raise ValueError("columns: a head with draft_ids needs the target's columns there")
        return jax.lax.stop_gradient(target @ columns), pred @ head_params["lm_head"]
    if columns is None:
        p_logits = jax.lax.stop_gradient(head.target.unembed(target_params, target))
        return p_logits, head.target.unembed(target_params, pred)  # [..., V]
    return jax.lax.stop_gradient(target @ columns), pred @ columns


def check_trainable(head) -> None:
    """ValueError for an EagleHead in the packed layout: that layout is for decoding."""
    if getattr(head, "packed", False):
        raise ValueError(
            "head: this EagleHead is in the packed layout, which is for decoding; train the "
            "head in the xla layout (head.with_matmul(params, 'xla')), then convert its params"
        )
