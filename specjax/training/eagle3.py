"""Training an EAGLE-3 head: fused layer features and training-time test (Li et al. 2025).

An EAGLE-3 head (`EagleHead(target, feature_layers=(i, j, k), draft_ids=...)`) reads
g_t = fuse(concat(l_t, m_t, h_t)), the outputs of three target blocks, and drafts on its own
outputs in g's place: pair t is (input_t, x_{t+1}) and its output a_{t+1} gives q(x_{t+2}).
Training-time test trains the head the way it drafts, `steps` passes over each batch:
  * step 0 reads the true fused features at every position t;
  * step k >= 1 reads, at position t, step k - 1's output at position t - 1 (the head's own
    prediction of the feature there), with the same teacher tokens x_{t+1};
  * the query of step k at position t belongs to the draft chain that starts at s = t - k. At
    inference that chain's pair sees the true pairs 0..s and its own drafted pairs s + 1..t, so
    it attends to step 0's keys at positions <= t - k and to step j's key at position t - k + j
    for 1 <= j <= k (`ttt_mask`). Step j's keys are written to their own cache slots
    [j T, (j + 1) T), at their true positions (RoPE).
`tests/test_eagle3.py` checks every step's outputs against the drafter's own call sequence.

Loss: sum_k 0.8^k CE_k, CE_k the soft cross-entropy of step k's q against the target's p at the
same position (p from the target's final hidden state there), both over the draft vocabulary (p
renormalised over it, as `eagle_loss` with columns), averaged over the pairs of weight 1 whose
chain starts at a real position (t >= k). There is no feature-regression term: the head's
outputs are not asked to equal a target feature. No input noise (EAGLE-3 drops it).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models.kv_cache import rollback
from specjax.training.loss_logits import check_trainable, loss_logits

DECAY = 0.8  # EAGLE-3's step weight


def ttt_mask(seq_len: int, steps: int) -> np.ndarray:
    """bool [steps, T, steps * T]: which cache slots step k's query at position t attends to
    (slot j T + u holds step j's key at position u; see the module docstring)."""
    t = np.arange(seq_len)
    mask = np.zeros((steps, seq_len, steps * seq_len), bool)
    for k in range(steps):
        mask[k, :, :seq_len] = t[None, :] <= (t - k)[:, None]  # true pairs 0..t-k
        for j in range(1, k + 1):
            u = t - k + j  # step j's pair of the same chain
            ok = u >= 0
            mask[k, t[ok], j * seq_len + u[ok]] = True
    return mask


def ttt_outputs(head, head_params, target_params, layers, tokens, steps: int) -> list:
    """The head's outputs of every training-time-test step: `steps` arrays [B, S - 1, embed].

    Args:
      head: an `EagleHead` with `feature_layers`.
      head_params, target_params: its params and the target's (the embedding).
      layers: [B, S, F] the target's layer features at each position.
      tokens: int32 [B, S].
      steps: passes (>= 1); output k at position t is step k's prediction after pair t.
    """
    batch, seq, _ = layers.shape
    width = seq - 1
    # Pass k reads (k + 1) x width of the steps x width slots. Training scores the buffer with
    # "xla", not a "blockwise" head's loop (CPU's "auto"): blockwise's derivative is xla's over
    # the whole buffer anyway (its custom JVP), so its forward loop would only add work. The
    # same function; the params do not depend on the implementation (decoding keeps the head's).
    head = dataclasses.replace(head, config=head.config.replace(attention="xla"))
    inputs = head.fuse_features(head_params, layers[:, :-1])  # [B, T, embed]
    embeds = head.target.embed(target_params, tokens[:, 1:])  # x_{t+1}
    cache = head.init_state(batch, steps * width)
    positions = jnp.broadcast_to(jnp.arange(width, dtype=jnp.int32), (batch, width))
    masks = ttt_mask(width, steps)
    num = jnp.full((batch,), width, jnp.int32)
    outputs = []
    for k in range(steps):
        mask = jnp.broadcast_to(jnp.asarray(masks[k]), (batch, width, steps * width))
        start = jnp.full((batch,), k * width, jnp.int32)
        pred, cache = head.forward_features(
            head_params, rollback(cache, start), inputs, embeds, num, positions=positions,
            mask=mask,
        )  # fmt: skip
        outputs.append(pred)
        # position t of the next step reads this step's prediction made at t - 1
        inputs = jnp.concatenate([jnp.zeros_like(pred[:, :1]), pred[:, :-1]], axis=1)
    return outputs


def eagle3_loss(head, head_params, target_params, batch, *, steps: int, columns=None):
    """(loss, metrics) of an EAGLE-3 head on one batch (see the module docstring).

    Args:
      head: an `EagleHead` with `feature_layers`.
      head_params: its params (differentiated).
      target_params: the target's (frozen).
      batch: `HeadBatches.batch_at` arrays, with "layers".
      steps: training-time-test passes (>= 1).
      columns: as `eagle_loss`'s (a head with draft_ids needs its ids' columns).

    Metrics: loss, ce (step 0), top1 (step 0), alpha1 (step 0's sum_x min(p, q)), and
    alpha_last (the last step's: a chain's (steps)-th draft on the head's own features).
    """
    check_trainable(head)
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if "layers" not in batch:
        raise ValueError("batch: an EAGLE-3 head trains on layer features (FeatureData.layers)")
    w = batch["weight"]  # [B, T]
    outputs = ttt_outputs(head, head_params, target_params, batch["layers"], batch["tokens"], steps)
    target = batch["features"][:, 1:]  # the target's final hidden state at t + 1
    loss, metrics = 0.0, {}
    t = jnp.arange(w.shape[1])
    for k, pred in enumerate(outputs):
        p_logits, q_logits = loss_logits(head, head_params, target_params, target, pred, columns)
        p = jax.nn.softmax(p_logits, axis=-1)
        ce = -(p * jax.nn.log_softmax(q_logits, axis=-1)).sum(-1)  # [B, T]
        wk = w * (t >= k)[None, :]
        total = jnp.maximum(wk.sum(), 1.0)
        loss = loss + DECAY**k * (wk * ce).sum() / total
        alpha = (wk * jnp.minimum(p, jax.nn.softmax(q_logits, axis=-1)).sum(-1)).sum() / total
        if k == 0:
            agree = jnp.argmax(q_logits, -1) == jnp.argmax(p_logits, -1)
            metrics.update(
                ce=(wk * ce).sum() / total,
                top1=(wk * agree.astype(jnp.float32)).sum() / total,
                alpha1=alpha,
            )
        if k == steps - 1:
            metrics["alpha_last"] = alpha
    metrics["loss"] = loss
    return loss, metrics
