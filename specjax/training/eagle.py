"""Training an EAGLE-1 head on cached target features: batches, the loss, the train step.

Loss (Li et al. 2024, EAGLE-1), per pair t (the head reads (f_t + noise, x_{t+1}) and predicts
f^_{t+1}):
    SmoothL1(f^_{t+1}, f_{t+1})  (mean over the embed axis)
  + ce_weight x CE(p_{t+1}, q_{t+1}),  p = softmax(unembed(f_{t+1})), q = softmax(unembed(f^_{t+1}))
with uniform noise U(-noise/2, noise/2) on the input features (EAGLE-1: 0.2), averaged over the
weighted pairs. The target (its embedding and output layer) is frozen; only the head trains.

Batches are a pure function of (seed, step) (`HeadBatches.batch_at`), so a resumed run sees the
same batches as an uninterrupted one, and the noise key is fold_in(key, step).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax

from specjax.models.draft_vocab import target_columns
from specjax.training.features import FeatureData
from specjax.training.loss_logits import check_trainable, loss_logits


@dataclasses.dataclass
class HeadBatches:
    """Fixed-size batches of sequences from `FeatureData`.

    Each example is one sequence, cut to its last `seq_len` tokens (the reply end) and padded.
    Sequences are visited in a fresh permutation per epoch (seeded by seed and epoch).

    Attributes:
      data: the feature data.
      batch_size: sequences per batch.
      seq_len: tokens per example.
      seed: the permutation seed.
      reply_only: weight only pairs whose predicted token is a reply token (EAGLE's loss mask);
        False: every pair (prompt text included: the target's p there is as good a label).
    """

    data: FeatureData
    batch_size: int
    seq_len: int
    seed: int = 0
    reply_only: bool = False

    def __post_init__(self):
        if self.seq_len < 3:
            raise ValueError(f"seq_len must be >= 3, got {self.seq_len}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.data.num_sequences // self.batch_size)

    def _sequence(self, index: int) -> int:
        n = self.data.num_sequences
        epoch, i = divmod(index, n)
        order = np.random.default_rng([self.seed, epoch]).permutation(n)
        return int(order[i])

    def batch_at(self, step: int) -> dict:
        """{"tokens" int32 [B, S], "features" float32 [B, S, H], "weight" float32 [B, S - 1]},
        and "layers" float32 [B, S, F] when the data has layer features (EAGLE-3).

        weight[b, t] is 1 where pair t (f_t, x_{t+1}) -> f_{t+1} is trained.
        """
        d, b_size, s_len = self.data, self.batch_size, self.seq_len
        tokens = np.zeros((b_size, s_len), np.int32)
        feats = np.zeros((b_size, s_len, d.features.shape[1]), np.float32)
        weight = np.zeros((b_size, s_len - 1), np.float32)
        layers = None
        if d.layers is not None:
            layers = np.zeros((b_size, s_len, d.layers.shape[1]), np.float32)
        for b in range(b_size):
            s = self._sequence(step * b_size + b)
            lo, hi = int(d.offsets[s]), int(d.offsets[s + 1])
            lo = max(lo, hi - s_len)
            n = hi - lo
            tokens[b, :n] = d.tokens[lo:hi]
            feats[b, :n] = d.features[lo:hi]
            if layers is not None:
                layers[b, :n] = d.layers[lo:hi]
            # pair t predicts f_{t+1}, whose distribution is over token t + 2: trained when
            # position t + 1 (a real position) predicts a reply token, or always.
            ok = np.arange(s_len - 1) + 1 < n
            if self.reply_only:
                ok &= np.concatenate([d.loss_mask[lo + 1 : hi], np.zeros(s_len - n, bool)])[
                    : s_len - 1
                ]
            weight[b] = ok
        out = {"tokens": tokens, "features": feats, "weight": weight}
        return out if layers is None else dict(out, layers=layers)


def output_columns(head, target_params, token_ids) -> jax.Array:
    """The target's output layer restricted to `token_ids`: [embed, N] (x @ it = those logits).

    Read off `unembed` of the identity, so it works for every weight layout.
    """
    return target_columns(head.target, target_params, token_ids)


def rank_by_frequency(tokens: np.ndarray, minlength: int = 0) -> np.ndarray:
    """Token ids, most frequent in `tokens` first (ties by id): int64 [max(minlength, max + 1)]."""
    return rank_counts(np.bincount(tokens, minlength=minlength))


def rank_counts(counts: np.ndarray) -> np.ndarray:
    """Token ids by their counts [vocab], largest first (ties by id): int64 [vocab]."""
    return np.argsort(-np.asarray(counts), kind="stable")


def frequent_tokens(data: FeatureData, count: int) -> np.ndarray:
    """The `count` most frequent token ids of the data (ties by id), int32 [count]."""
    return np.sort(rank_by_frequency(data.tokens, count)[:count]).astype(np.int32)


def eagle_loss(
    head, head_params, target_params, batch, key, *, noise=0.2, ce_weight=0.1, columns=None
):
    """(loss, metrics) of an EAGLE-1 head on one batch (see the module docstring).

    Args:
      head: the `EagleHead`.
      head_params: its params (differentiated).
      target_params: the target's params (frozen).
      batch: `HeadBatches.batch_at` arrays.
      key: PRNG key of the input noise.
      noise: width of the uniform noise on input features.
      ce_weight: weight of the soft cross-entropy term.
      columns: None: the cross-entropy over the full vocabulary; else [embed, N] the target's
        output layer at N tokens (`output_columns`): p renormalised over them, and q too (for a
        full-vocabulary head: a cheaper loss, since the full-vocabulary matmuls dominate a
        step's cost on CPU; a head with `draft_ids` must get its ids' columns, and its q is its
        own "lm_head"). The metrics top1/alpha1 are then over those N tokens.
    """
    check_trainable(head)
    feats, tokens, w = batch["features"], batch["tokens"], batch["weight"]
    batch_size, seq_len, _ = feats.shape
    inputs = feats[:, :-1] + noise * (jax.random.uniform(key, feats[:, :-1].shape) - 0.5)
    embeds = head.target.embed(target_params, tokens[:, 1:])  # [B, S-1, H]
    cache = head.init_state(batch_size, seq_len - 1)
    num = jnp.full((batch_size,), seq_len - 1, jnp.int32)
    pred, _ = head.forward_features(head_params, cache, inputs, embeds, num)  # [B, S-1, H]
    target = feats[:, 1:]
    l1 = optax.huber_loss(pred, target, delta=1.0).mean(-1)  # [B, S-1] SmoothL1
    p_logits, q_logits = loss_logits(head, head_params, target_params, target, pred, columns)
    p = jax.nn.softmax(p_logits, axis=-1)
    ce = -(p * jax.nn.log_softmax(q_logits, axis=-1)).sum(-1)  # [B, S-1]
    total = jnp.maximum(w.sum(), 1.0)
    loss = (w * (l1 + ce_weight * ce)).sum() / total
    agree = (jnp.argmax(q_logits, -1) == jnp.argmax(p_logits, -1)).astype(jnp.float32)
    # Expected acceptance of a one-step draft: sum_x min(p, q) (alpha of the first position).
    alpha = jnp.minimum(p, jax.nn.softmax(q_logits, axis=-1)).sum(-1)
    metrics = {
        "loss": loss,
        "smooth_l1": (w * l1).sum() / total,
        "ce": (w * ce).sum() / total,
        "top1": (w * agree).sum() / total,
        "alpha1": (w * alpha).sum() / total,
    }
    return loss, metrics


def head_loss(
    head, head_params, target_params, batch, key, *, noise, ce_weight, columns, ttt_steps=1
):
    """The loss of any trained draft: `eagle_loss` for an EagleHead, `eagle3.eagle3_loss` for
    one with `feature_layers` (training-time test over `ttt_steps` passes), `medusa_loss` for
    Medusa heads (which read no noise key and have no feature term), `distilled_draft_loss` for
    a `DistilledDraft` (KL to the target's p; its target params in the "xla" layout)."""
    if hasattr(head, "num_layers") and hasattr(head, "full_params"):
        from specjax.training.distilled_draft import distilled_draft_loss

        return distilled_draft_loss(head, head_params, target_params, batch, columns=columns)
    if hasattr(head, "num_heads"):
        from specjax.training.medusa import medusa_loss

        return medusa_loss(head, head_params, target_params, batch, columns=columns)
    if getattr(head, "feature_layers", ()):
        from specjax.training.eagle3 import eagle3_loss

        return eagle3_loss(
            head, head_params, target_params, batch, steps=ttt_steps, columns=columns
        )
    return eagle_loss(
        head, head_params, target_params, batch, key,
        noise=noise, ce_weight=ce_weight, columns=columns,
    )  # fmt: skip


def make_head_step(
    head, tx: optax.GradientTransformation, *, noise=0.2, ce_weight=0.1, ttt_steps=1
):
    """A jittable step (params, opt_state, step, batch, target_params, key, columns=None) ->
    (params, opt_state, metrics); the noise key is fold_in(key, step); `columns`: see
    `eagle_loss`; `ttt_steps`: an EAGLE-3 head's training-time-test passes."""

    def step_fn(params, opt_state, step, batch, target_params, key, columns=None):
        grad_fn = jax.value_and_grad(
            lambda hp: head_loss(
                head, hp, target_params, batch, jax.random.fold_in(key, step),
                noise=noise, ce_weight=ce_weight, columns=columns, ttt_steps=ttt_steps,
            ),
            has_aux=True,
        )  # fmt: skip
        (_, metrics), grads = grad_fn(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, metrics

    return step_fn
