"""Verification as wide as the longest drafted row, not as wide as gamma_max.

With an adaptive γ (`gamma_policy.py`) a row drafts 1..gamma_max tokens, but a static-shape
verifier scores gamma_max + 1 positions whatever was drafted, so a short γ_t saves draft steps
only. `score_to_longest` picks, per iteration, the narrowest compiled width that covers every
active row's drafts: one `lax.switch` branch per width in `widths` (each a target call of static
shape [batch, w + 1]), its logits padded back to [batch, gamma_max + 1, vocab]. The padded
positions lie past every row's `num_drafted`, where the acceptance rule never looks (it accepts
at most num_drafted drafts and draws its extra token at position num_drafted), so the output law
is unchanged; the target cache advances by w + 1 and is rolled back to the accepted prefix as
before. The branch is chosen from `num_drafted`, the draft's own decision: nothing here depends
on the target's verdict.

On a device where the target's cost is flat in the width (an accelerator at small batch) this
buys nothing; on a CPU, where T(k) grows with k, it makes a short γ_t cheap to verify too.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np


def check_widths(widths: Sequence[int], gamma_max: int) -> tuple[int, ...]:
    """`widths` as a sorted tuple ending at gamma_max; ValueError naming `verify_widths`."""
    try:
        items = list(widths)
    except TypeError:
        raise ValueError(f"verify_widths must be integers, got {widths!r}") from None
    if any(isinstance(w, bool) or not isinstance(w, int | np.integer) for w in items):
        raise ValueError(f"verify_widths must be integers, got {widths!r}")
    out = tuple(sorted({int(w) for w in items}))
    if not out or out[0] < 1 or out[-1] != gamma_max:
        raise ValueError(
            f"verify_widths must be integers in [1, gamma_max={gamma_max}] that include "
            f"gamma_max (a row may draft all of them); got {widths!r}"
        )
    return out


def score_to_longest(target, target_params, t_state, verify_in, num_drafted, active, widths):
    """The target's logits at [last, d_1..d_w], w the narrowest width covering every row.

    Args:
      target: the target model (`apply(params, state, tokens, num_new)`).
      target_params: its params.
      t_state: its cache, holding each row's tokens before `last`.
      verify_in: int32 [batch, gamma_max + 1], [last, d_1..d_gamma_max] per row.
      num_drafted: int32 [batch], each row's drafts (1..gamma_max).
      active: bool [batch], rows still generating (others write nothing).
      widths: sorted static widths ending at gamma_max (`check_widths`).

    Returns:
      (logits [batch, gamma_max + 1, vocab], with zeros past the chosen width; new t_state).
    """
    gamma_max = verify_in.shape[1] - 1
    longest = jnp.max(jnp.where(active, num_drafted, 1))  # scalar
    branch = jnp.searchsorted(jnp.asarray(widths, jnp.int32), longest)  # first width >= longest

    def width(w: int):
        def run(t_state):
            num_new = jnp.where(active, w + 1, 0).astype(jnp.int32)
            logits, t_state = target.apply(target_params, t_state, verify_in[:, : w + 1], num_new)
            pad = [(0, 0), (0, gamma_max - w), (0, 0)]
            return jnp.pad(logits, pad), t_state  # [batch, gamma_max + 1, vocab]

        return run

    if len(widths) == 1:
        return width(widths[0])(t_state)
    return jax.lax.switch(branch, [width(w) for w in widths], t_state)
