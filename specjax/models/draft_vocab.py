"""A reduced draft vocabulary (EAGLE-3's): checked ids, the target's columns there, full rows.

Feature heads (`EagleHead`, `MedusaHeads`) may draft over N token ids only, with an output layer
of their own [embed, N]; q is 0 outside the ids, which every lossless rule allows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from specjax import checks


def check_draft_ids(ids, vocab_size: int) -> tuple:
    """`ids` as a tuple of ints; ValueError unless sorted, distinct and in [0, vocab_size)."""
    if isinstance(ids, str | bytes):
        raise TypeError(f"draft_ids must be a sequence of token ids, got {ids!r}")
    bad = [i for i in ids if not checks.is_integer(i)]
    if bad:  # int(1.5), int("1") and int(True) would each become a token id
        raise TypeError(f"draft_ids must hold integer token ids; got {bad[0]!r}")
    ids = tuple(int(i) for i in ids)
    if not ids or list(ids) != sorted(set(ids)) or ids[0] < 0 or ids[-1] >= vocab_size:
        raise ValueError(
            f"draft_ids must be sorted distinct token ids in [0, {vocab_size}); got "
            f"{len(ids)} ids starting {ids[:5]}"
        )
    return ids


def target_columns(target, target_params, ids) -> jax.Array:
    """The target's output layer at `ids`, [embed, N], read off `unembed` of the identity (so
    it works for every weight layout)."""
    eye = jnp.eye(target.config.embed_dim, dtype=jnp.float32)
    return target.unembed(target_params, eye)[:, jnp.asarray(ids)]


def full_rows(sub: jax.Array, ids, vocab_size: int, fill: float = -jnp.inf) -> jax.Array:
    """float32 [..., vocab]: `sub` [..., N] at `ids`, `fill` elsewhere (-inf for logits, so
    q = 0 there; 0 for probabilities)."""
    full = jnp.full(sub.shape[:-1] + (vocab_size,), fill, jnp.float32)
    return full.at[..., jnp.asarray(ids)].set(sub.astype(jnp.float32))


def column_subset(draft_ids, ids, name: str = "ids") -> np.ndarray:
    """Positions in `draft_ids` of the token ids `ids` (checked by `check_draft_ids` first):
    int [N'], for cutting a trained reduced-vocabulary output layer [embed, N] down to N' <= N
    of its columns. ValueError naming `name` unless every id is among `draft_ids`.
    """
    where = {t: i for i, t in enumerate(draft_ids)}
    missing = [t for t in ids if t not in where]
    if missing:
        raise ValueError(
            f"{name}: {len(missing)} of {len(ids)} token ids are not in the draft vocabulary "
            f"({len(draft_ids)} ids), e.g. {missing[:5]}"
        )
    return np.asarray([where[t] for t in ids], np.int32)
