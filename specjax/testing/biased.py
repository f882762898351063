"""Deliberately biased acceptance rules: the kit must reject every one of them (calibration).

`biased_accept(key, draft_tokens, draft_probs, target_probs, variant)` has `speculative_accept`'s
signature plus a traced int32 `variant` (so all variants share one compiled program per case
shape); `BIASED` names them:

  "no_residual": token-wise verification that draws the correction token from p instead of
    norm(max(p - q, 0)) after a rejection (the most common mistake);
  "scaled_ratio": token-wise verification accepting with min(1, 0.8 p/q) (a miscalibrated ratio,
    e.g. a temperature applied to one side only), residual as usual;
  "h_is_b": block verification (Sun et al. 2024) with the stopping chance h_i = b_i at every
    position (the token-wise coin reused);
  "residual_without_b": block verification drawing the correction from norm(max(p - q, 0)), its
    b_τ weight dropped (exact for the first two emitted tokens, wrong from the third);
  "contiguous_prefix": block verification with τ = the position before the first failed coin
    (accept a contiguous prefix) instead of the last successful coin.

Each variant's decision is written independently of `specjax.decoding`'s rules; only the
scaffolding every rule shares (float32 laws, the residual, the output layout:
`specjax/decoding/rules/_common.py`) is reused. Deterministic drafts (`draft_probs=None`) are
point masses, `num_drafted` is honoured.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax.decoding.rules._common import (
    accepted_prefix,
    assemble_tokens,
    at_tokens,
    distributions,
    weighted_residual,
)

BIASED = {
    "no_residual": 1,
    "scaled_ratio": 2,
    "h_is_b": 3,
    "residual_without_b": 4,
    "contiguous_prefix": 5,
}

SCALE = 0.8  # the "scaled_ratio" variant's factor


def biased_accept(
    key: jax.Array,
    draft_tokens: jax.Array,
    draft_probs: jax.Array | None,
    target_probs: jax.Array,
    variant: jax.Array,
    *,
    fill_value: int = -1,
    num_drafted: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """A biased rule chosen by `variant` (an int32 scalar, a value of BIASED); see module doc."""
    batch, gamma = draft_tokens.shape
    # p [batch, gamma + 1, vocab], q [batch, gamma, vocab], float32 and renormalised.
    draft_tokens, q, p = distributions(draft_tokens, draft_probs, target_probs)
    d = jnp.full((batch,), gamma, jnp.int32) if num_drafted is None else num_drafted
    d = d.astype(jnp.int32)
    p_x, q_x = at_tokens(p[:, :gamma], draft_tokens), at_tokens(q, draft_tokens)  # [b, gamma]
    ratio = p_x / jnp.where(q_x > 0, q_x, 1.0)
    idx = jnp.arange(1, gamma + 1)[None]  # [1, gamma]: position i of column i - 1
    drafted = idx <= d[:, None]
    k_coin, k_y = jax.random.split(key)
    u = jax.random.uniform(k_coin, (batch, gamma))

    # Token-wise variants: n = consecutive accepted coins.
    scale = jnp.where(variant == BIASED["scaled_ratio"], SCALE, 1.0)
    coin = (u < jnp.minimum(1.0, scale * ratio)) & drafted
    n_token = accepted_prefix(coin)

    # Block variants: b_i, h_i, τ.
    weights = [jnp.ones((batch,))]
    for i in range(gamma):  # b_{i+1} = min(1, b_i p/q)
        weights.append(jnp.minimum(1.0, weights[-1] * ratio[:, i]))
    b = jnp.stack(weights, axis=1)  # [batch, gamma + 1]
    rho = jnp.sum(
        jnp.maximum(b[:, 1:, None] * p[:, 1:] - jnp.pad(q[:, 1:], ((0, 0), (0, 1), (0, 0))), 0.0),
        -1,
    )
    denom = rho + 1.0 - b[:, 1:]  # [batch, gamma]: h_i at column i - 1
    h_rho = jnp.where(denom > 0, rho / jnp.where(denom > 0, denom, 1.0), 1.0)
    mid = jnp.where(variant == BIASED["h_is_b"], b[:, 1:], h_rho)
    h = jnp.where(idx < d[:, None], mid, jnp.where(idx == d[:, None], b[:, 1:], 0.0))
    ok = u < h
    tau_last = jnp.max(jnp.where(ok, idx, 0), axis=1)
    tau_contiguous = accepted_prefix(ok)
    n_block = jnp.where(variant == BIASED["contiguous_prefix"], tau_contiguous, tau_last)

    tokenwise = variant <= BIASED["scaled_ratio"]
    n = jnp.where(tokenwise, n_token, n_block)  # [batch]
    rows = jnp.arange(batch)
    p_n = p[rows, n]
    q_n = jnp.pad(q, ((0, 0), (0, 1), (0, 0)))[rows, n]
    q_n = jnp.where((n < d)[:, None], q_n, 0.0)  # all drafted accepted: the bonus from p
    weight = jnp.where(tokenwise | (variant == BIASED["residual_without_b"]), 1.0, b[rows, n])
    dist = weighted_residual(p_n, q_n, weight[:, None])
    dist = jnp.where((variant == BIASED["no_residual"]) | (n == d)[:, None], p_n, dist)
    y = jax.random.categorical(k_y, jnp.log(dist), axis=-1)
    return assemble_tokens(draft_tokens, n, y, fill_value), n.astype(jnp.int32)
