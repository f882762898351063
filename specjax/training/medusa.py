"""Training Medusa heads on cached target features: the loss (batches are `eagle.HeadBatches`).

Head i (i = 1..K) reads f_t and is trained towards the target's distribution of token t+1+i,
p = softmax(unembed(f_{t+i})), by soft cross-entropy, weighted decay^(i-1) (Medusa: 0.8^i) and
averaged over the positions where f_{t+i} is real (and, with `reply_only` batches, predicts a
reply token). Self-distillation with soft labels, as Medusa-2 does without the original data.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def medusa_loss(heads, head_params, target_params, batch, *, columns=None, decay=0.8):
    """(loss, metrics) of `MedusaHeads` on one batch.

    Args:
      heads: the MedusaHeads.
      head_params: their params (differentiated).
      target_params: the target's params (frozen).
      batch: `HeadBatches.batch_at` arrays (features [B, S, H], weight [B, S - 1]).
      columns: as `eagle_loss`'s: the target's output layer at N tokens ([embed, N]): p (and q
        without `draft_ids`) over them; needed with `draft_ids`; None: the full vocabulary.
      decay: weight of head i is decay^(i - 1).
    """
    feats, weight = batch["features"], batch["weight"]
    seq_len = feats.shape[1]
    hidden = heads.features(head_params, feats)  # [B, S, K, H]
    total, metrics = 0.0, {}
    norm = 0.0
    for i in range(1, heads.num_heads + 1):
        if i >= seq_len:
            break
        h = hidden[:, : seq_len - i, i - 1]  # [B, S - i, H] head i at t = 0..S-1-i
        target = feats[:, i:]  # f_{t+i}: its distribution is that of token t+i+1
        w = weight[:, i - 1 :]  # [B, S - i] f_{t+i} real (and a reply position)
        if heads.draft_ids is not None:
            if columns is None:
                raise ValueError("columns: heads with draft_ids need the target's columns there")
            p_logits, q_logits = target @ columns, h @ head_params["lm_head"]
        elif columns is not None:
            p_logits, q_logits = target @ columns, h @ columns
        else:
            p_logits = heads.target.unembed(target_params, target)
            q_logits = heads.target.unembed(target_params, h)
        p = jax.nn.softmax(jax.lax.stop_gradient(p_logits), axis=-1)
        ce = -(p * jax.nn.log_softmax(q_logits, axis=-1)).sum(-1)  # [B, S - i]
        count = jnp.maximum(w.sum(), 1.0)
        head_ce = (w * ce).sum() / count
        alpha = (w * jnp.minimum(p, jax.nn.softmax(q_logits, axis=-1)).sum(-1)).sum() / count
        total = total + decay ** (i - 1) * head_ce
        norm += decay ** (i - 1)
        metrics[f"ce{i}"] = head_ce
        metrics[f"alpha{i}"] = alpha
    loss = total / norm
    metrics["loss"] = loss
    return loss, metrics
