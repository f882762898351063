"""The scaffolding every acceptance rule shares: argument checks, float32 laws, residuals, output.

A rule (`speculative_accept`'s signature and return) checks its arguments the same way
(`check_args`), reads p and q as float32 rows renormalised to sum to 1 (`distributions`), draws
corrections from residuals of p against q (`residual_distribution`, `weighted_residual`), and
lays out its output the same way (`assemble_tokens`). The rules of this package (token-wise,
block, lossy, tree) and the deliberately biased calibration rules of `specjax.testing.biased`
build on these, so each of them states only its own decision.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from specjax import checks


def normalise(probs: jax.Array) -> jax.Array:
    """Rows divided by their sum (all-zero rows stay zero)."""
    mass = probs.sum(-1, keepdims=True)
    return probs / jnp.where(mass > 0, mass, 1.0)


def distributions(draft_tokens, draft_probs, target_probs):
    """int32 tokens, q [batch, gamma, vocab] and p [batch, gamma + 1, vocab] in float32.

    The rules are exact only for the normalised p and q that sampling really draws from; bfloat16
    rounding leaves rows summing to 1 +- ~2e-3, which biased the output measurably: renormalise.
    A deterministic draft (draft_probs None) is a point mass on its token.
    """
    draft_tokens = draft_tokens.astype(jnp.int32)
    p = normalise(target_probs.astype(jnp.float32))
    if draft_probs is None:
        q = jax.nn.one_hot(draft_tokens, target_probs.shape[-1], dtype=jnp.float32)
    else:
        q = normalise(draft_probs.astype(jnp.float32))
    return draft_tokens, q, p


def at_tokens(probs: jax.Array, tokens: jax.Array) -> jax.Array:
    """probs[b, i, tokens[b, i]]: float32 [batch, gamma] from probs [batch, gamma, vocab]."""
    return jnp.take_along_axis(probs, tokens[..., None], axis=-1)[..., 0]


def residual_distribution(target_probs: jax.Array, draft_probs: jax.Array) -> jax.Array:
    """norm(max(0, p − q)) with a safe fallback to p where the residual has no mass.

    The residual has zero mass only where p == q (up to rounding); rejection then has probability
    zero, so any distribution is correct — p is chosen so the output stays a distribution.

    Args:
      target_probs: [..., vocab] p (float32).
      draft_probs: [..., vocab] q (float32).

    Returns:
      [..., vocab] float32, rows sum to 1.

    Raises:
      TypeError / ValueError: an argument is not a float array, or the two shapes differ. The
        values are not read (this runs inside the rules' loops): the rules check theirs.
    """
    for name, x in (("target_probs", target_probs), ("draft_probs", draft_probs)):
        checks.check_float(name, x)
    checks.check_shape("draft_probs", draft_probs, target_probs.shape, "target_probs' shape")
    residual = jnp.maximum(target_probs - draft_probs, 0.0)
    mass = residual.sum(-1, keepdims=True)
    fallback = target_probs / jnp.maximum(target_probs.sum(-1, keepdims=True), 1e-30)
    return jnp.where(mass > 0, residual / jnp.where(mass > 0, mass, 1.0), fallback)


def weighted_residual(p: jax.Array, q: jax.Array, weight: jax.Array) -> jax.Array:
    """norm(max(weight p − q, 0)), falling back to p (already normalised) where it has no mass.

    Block verification's correction (weight b_τ; see `block.py`).

    Args:
      p, q: float32 [batch, vocab].
      weight: float32 broadcastable to p, e.g. [batch, 1].
    """
    residual = jnp.maximum(weight * p - q, 0.0)  # [batch, vocab]
    mass = residual.sum(-1, keepdims=True)
    return jnp.where(mass > 0, residual / jnp.where(mass > 0, mass, 1.0), p)


def accepted_prefix(accepted: jax.Array) -> jax.Array:
    """int32 [batch]: how many leading entries of each row of bool [batch, gamma] are True."""
    return jnp.sum(jnp.cumprod(accepted.astype(jnp.int32), axis=-1), axis=-1)


def assemble_tokens(
    draft_tokens: jax.Array, num_accepted: jax.Array, next_token: jax.Array, fill_value
) -> jax.Array:
    """The rule's output row: the n accepted drafts, then the next token, then `fill_value`.

    Args:
      draft_tokens: int32 [batch, gamma].
      num_accepted: int [batch] n in [0, gamma].
      next_token: int [batch] the correction or bonus token.
      fill_value: written to tokens[b, n + 1:].

    Returns:
      int32 [batch, gamma + 1].
    """
    gamma = draft_tokens.shape[1]
    positions = jnp.arange(gamma + 1)[None, :]  # [1, gamma + 1]
    drafted = jnp.pad(draft_tokens, ((0, 0), (0, 1)))  # [batch, gamma + 1]
    n = num_accepted[:, None]
    tokens = jnp.where(
        positions < n, drafted, jnp.where(positions == n, next_token[:, None], fill_value)
    )
    return tokens.astype(jnp.int32)


def check_args(draft_tokens, draft_probs, target_probs, num_drafted, *, key, fill_value) -> None:
    """Shapes, dtypes and (when concrete) values of a rule's arguments, its key and its
    fill_value; raises naming one."""
    checks.check_key(key)
    checks.check_fill_value(fill_value)
    checks.check_rank("draft_tokens", draft_tokens, 2, "[batch, gamma]")
    checks.check_int("draft_tokens", draft_tokens)
    batch, gamma = draft_tokens.shape
    if gamma < 1:
        raise ValueError(
            f"draft_tokens must hold gamma >= 1 tokens per row; got shape {(batch, gamma)}"
        )
    layout = "[batch, gamma + 1, vocab]"
    checks.check_distributions(
        "target_probs", target_probs, (batch, gamma + 1), layout, require_mass=True
    )
    vocab = target_probs.shape[-1]
    if draft_probs is not None:
        layout = "[batch, gamma, vocab]"
        checks.check_distributions("draft_probs", draft_probs, (batch, gamma), layout, vocab)
    if num_drafted is not None:
        checks.check_rank("num_drafted", num_drafted, 1, "[batch]")
        checks.check_int("num_drafted", num_drafted)
        if num_drafted.shape[0] != batch:
            raise ValueError(
                f"num_drafted must have shape [batch] = [{batch}]; got {tuple(num_drafted.shape)}"
            )
        if checks.is_concrete(num_drafted):
            lo, hi = checks.value_range(num_drafted)
            if lo < 0 or hi > gamma:
                raise ValueError(
                    f"num_drafted must lie in [0, gamma={gamma}]; got values in [{lo}, {hi}]"
                )
    if checks.is_concrete(draft_tokens):
        lo, hi = checks.value_range(draft_tokens)
        if lo < 0 or hi >= vocab:
            raise ValueError(f"draft_tokens must lie in [0, {vocab}); got values in [{lo}, {hi}]")
        if draft_probs is not None:
            drafted = None
            if num_drafted is not None and checks.is_concrete(num_drafted):
                drafted = np.arange(gamma)[None, :] < np.asarray(num_drafted)[:, None]
            check_drafted_mass("draft_probs", draft_probs, draft_tokens, drafted)


def check_drafted_mass(name: str, probs, tokens, drafted=None) -> None:
    """Each drafted token has mass in the row it was drawn from (when both are concrete).

    A token drawn from q has q(x) > 0. Where q(x) = 0 the rules' ratio p(x) / q(x) is infinite
    and x would be accepted whatever p(x) is: the caller passed another row than the one it
    sampled from, and the output would silently stop following p.

    Args:
      name: the argument's name in the error.
      probs: float [batch, k, vocab] the draft's rows.
      tokens: int [batch, k] the token drawn from each row.
      drafted: bool [batch, k] the entries that were drafted (None: all).
    """
    if not (checks.is_concrete(probs) and checks.is_concrete(tokens)):
        return
    q = np.asarray(jax.device_get(probs)).astype(np.float32)
    x = np.asarray(jax.device_get(tokens)).astype(np.int64)
    mass = np.take_along_axis(q, x[..., None], axis=-1)[..., 0]  # [batch, k]
    empty = mass <= 0 if drafted is None else (mass <= 0) & drafted
    if empty.any():
        b, i = (int(v) for v in np.argwhere(empty)[0])
        raise ValueError(
            f"{name} must give each drafted token the probability it was drawn with, which is "
            f"> 0; got {name}[{b}, {i}, {x[b, i]}] = 0 ({int(empty.sum())} such entries): pass "
            "the distribution the token was sampled from"
        )


def check_unit(name: str, value, *, closed_low: bool = False) -> None:
    """A rule's knob in (0, 1] (or [0, 1] with closed_low) when concrete; raises naming it."""
    if isinstance(value, jax.Array) and not checks.is_concrete(value):
        return
    v = float(value)
    if not ((0.0 <= v if closed_low else 0.0 < v) and v <= 1.0):
        low = "[0" if closed_low else "(0"
        raise ValueError(f"{name} must lie in {low}, 1]; got {value}")
