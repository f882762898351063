"""Training a `DistilledDraft` on the cached target replies: the loss (see training/distill.py).

Position t of a sequence: the draft reads tokens 0..t and gives q for token t + 1; the target's
p there is softmax(unembed(f_t)), f_t its cached hidden state after token t (`FeatureData`), so
the target never runs during training. The divergence is `distill.divergence` ("kl" by
default: KL(p || q); "tv" maximises α at t = 1 directly), over the output columns the run
gives (the data's N most frequent tokens, p and q renormalised there: on CPU the
full-vocabulary matmuls are most of a step) or over the full vocabulary.

Known limits: with columns, q's mass outside them is never trained (decoding uses the full
vocabulary) and the `alpha1` metric is over the columns, so it overstates α; a sequence longer
than the window is cut to its end (`HeadBatches`), so the draft predicts its first positions
without the context the target's p saw there.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax.training.distill import divergence


def distilled_draft_loss(draft, params, target_params, batch, *, columns=None, objective="kl"):
    """(loss, metrics) of a `DistilledDraft` on one `HeadBatches` batch.

    Args:
      draft: the DistilledDraft.
      params: its blocks (differentiated).
      target_params: the target's params in the "xla" layout (frozen; shared arrays).
      batch: {"tokens" [B, S], "features" [B, S, H], "weight" [B, S - 1]}; weight[b, t] marks
        the positions t whose next token exists (HeadBatches' pair weights, shifted alike).
      columns: [embed, N] the target's output layer at N tokens, or None: the full vocabulary.
      objective: a `distill.OBJECTIVES` name.
    """
    tokens, feats, w = batch["tokens"], batch["features"], batch["weight"]
    batch_size, seq_len = tokens.shape
    model = draft.model
    full = draft.full_params(params, jax.lax.stop_gradient(target_params))
    num = jnp.full((batch_size,), seq_len, jnp.int32)
    hidden = model.forward(full, model.init_state(batch_size, seq_len), tokens, num).hidden
    hidden, target = hidden[:, :-1], feats[:, :-1]  # position t predicts token t + 1
    if columns is None:
        q_logits = model.unembed(full, hidden)
        p_logits = jax.lax.stop_gradient(model.unembed(full, target))
    else:
        q_logits = hidden @ columns
        p_logits = jax.lax.stop_gradient(target @ columns)
    per_position = divergence(p_logits, q_logits, objective)  # [B, S - 1]
    total = jnp.maximum(w.sum(), 1.0)
    p, q = jax.nn.softmax(p_logits, -1), jax.nn.softmax(q_logits, -1)
    agree = (jnp.argmax(q_logits, -1) == jnp.argmax(p_logits, -1)).astype(jnp.float32)
    metrics = {
        "loss": (w * per_position).sum() / total,
        "top1": (w * agree).sum() / total,
        "alpha1": (w * jnp.minimum(p, q).sum(-1)).sum() / total,
    }
    return metrics["loss"], metrics
