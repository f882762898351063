"""Lossy acceptance rules, for contrast: faster than the lossless rule, at a measured shift from p.

Both have `speculative_accept`'s signature and return (a decoder takes them as `accept=`), and
neither is lossless: the emitted tokens do NOT follow the target. They are selected only by name
(`accept_rule("lenient:0.5")`, `accept_rule("typical:0.09,0.3")`), never by default, and each
comes with the exact law of the first emitted token in closed form (`*_first_token_law`), so the
shift is a number: `total_variation(law, p)`. `specjax.testing.check_acceptance_rule` flags both.

* `lenient_accept(..., lenience=l)`: Leviathan et al. 2023, Appendix A.5. Accept x_i with
  probability min(1, p_i(x_i) / (l q_i(x_i))), l in (0, 1], in order until the first rejection;
  the paper leaves the correction open, and here it is norm(max(p_n - l q_n, 0)) (the residual of
  the comparison actually made); a bonus from p_{γ+1} if all are accepted. l = 1 is
  `speculative_accept` exactly; no token is emitted with probability above p(x) / l.
* `typical_accept(..., epsilon=0.09, delta=0.3)`: Medusa's typical acceptance (Cai et al. 2024,
  medusa/model/utils.py). Accept x_i while p_i(x_i) > min(ε, δ exp(-H(p_i))), H the entropy;
  after the accepted prefix one token drawn from p (q is not used). Medusa runs ε = 0.09
  (`posterior_threshold`) and δ = 0.3 = √ε (`posterior_alpha`); its lower-level
  `evaluate_posterior` has the two defaults swapped (0.3, 0.09) — a known trap: the arguments
  here are keywords, and "typical:A,B" reads A as ε and B as δ.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.rules._common import (
    accepted_prefix,
    assemble_tokens,
    at_tokens,
    check_args,
    check_unit,
    distributions,
    normalise,
    residual_distribution,
)
from specjax.decoding.sampling import sample_from_probs


def _emit(key, draft_tokens, accepted, p, correction_fn, num_drafted, fill_value):
    """Shared tail: n = accepted prefix length; the next token from correction_fn(n) or the
    bonus p at the row's length; tokens laid out as speculative_accept's."""
    batch, gamma = draft_tokens.shape
    if num_drafted is not None:
        accepted = accepted & (jnp.arange(gamma)[None, :] < num_drafted[:, None])
    n = accepted_prefix(accepted)  # [batch]
    d = jnp.full((batch,), gamma, jnp.int32) if num_drafted is None else num_drafted
    p_n = jnp.take_along_axis(p, n[:, None, None], axis=1)[:, 0]  # [batch, vocab]
    dist = jnp.where((n < d)[:, None], correction_fn(n, p_n), p_n)
    next_token = sample_from_probs(key, dist)
    return assemble_tokens(draft_tokens, n, next_token, fill_value), n.astype(jnp.int32)


def lenient_accept(
    key: jax.Array,
    draft_tokens: jax.Array,
    draft_probs: jax.Array | None,
    target_probs: jax.Array,
    *,
    lenience: float = 1.0,
    fill_value: int = -1,
    num_drafted: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Lenient speculative sampling (LOSSY for lenience < 1; see module doc).

    Args:
      key, draft_tokens, draft_probs, target_probs, fill_value, num_drafted: as
        `speculative_accept` (draft_probs None: point masses on the drafts).
      lenience: l in (0, 1]: accept with min(1, p / (l q)); correction norm(max(p - l q, 0)).

    Returns:
      tokens int32 [batch, γ + 1], num_accepted int32 [batch], as `speculative_accept`.

    Raises:
      ValueError: lenience outside (0, 1] (named in the message), or bad shapes.
    """
    check_unit("lenience", lenience)
    check_args(draft_tokens, draft_probs, target_probs, num_drafted, key=key, fill_value=fill_value)
    batch, gamma = draft_tokens.shape
    draft_tokens, q, p = distributions(draft_tokens, draft_probs, target_probs)
    lq = lenience * q
    k_accept, k_sample = jax.random.split(key)
    p_x = at_tokens(p[:, :gamma], draft_tokens)  # [batch, gamma]
    lq_x = at_tokens(lq, draft_tokens)  # [batch, gamma]
    u = jax.random.uniform(k_accept, (batch, gamma), jnp.float32)
    accepted = u * lq_x < p_x  # u < p / (l q), without dividing

    def correction(n, p_n):
        lq_n = jnp.take_along_axis(jnp.pad(lq, ((0, 0), (0, 1), (0, 0))), n[:, None, None], 1)
        return residual_distribution(p_n, lq_n[:, 0])  # norm(max(p - l q, 0)), else p

    return _emit(k_sample, draft_tokens, accepted, p, correction, num_drafted, fill_value)


def typical_threshold(p: jax.Array, epsilon: float, delta: float) -> jax.Array:
    """min(ε, δ exp(-H(p))) per row of p [..., vocab] (0 log 0 = 0)."""
    entropy = -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), axis=-1)
    return jnp.minimum(epsilon, delta * jnp.exp(-entropy))


def typical_accept(
    key: jax.Array,
    draft_tokens: jax.Array,
    draft_probs: jax.Array | None,
    target_probs: jax.Array,
    *,
    epsilon: float = 0.09,
    delta: float = 0.3,
    fill_value: int = -1,
    num_drafted: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Medusa's typical acceptance (LOSSY; see module doc). draft_probs is checked, not used.

    Args:
      epsilon: ε in (0, 1], Medusa's posterior_threshold (0.09).
      delta: δ in (0, 1], Medusa's posterior_alpha (0.3 = √ε). Not the swapped pair.
      the rest: as `speculative_accept`.

    Raises:
      ValueError: epsilon or delta outside (0, 1] (named in the message), or bad shapes.
    """
    check_unit("epsilon", epsilon)
    check_unit("delta", delta)
    check_args(draft_tokens, draft_probs, target_probs, num_drafted, key=key, fill_value=fill_value)
    gamma = draft_tokens.shape[1]
    draft_tokens = draft_tokens.astype(jnp.int32)
    p = normalise(target_probs.astype(jnp.float32))
    p_x = at_tokens(p[:, :gamma], draft_tokens)  # [batch, gamma]
    accepted = p_x > typical_threshold(p[:, :gamma], epsilon, delta)
    return _emit(key, draft_tokens, accepted, p, lambda n, p_n: p_n, num_drafted, fill_value)


# ----------------------------------------------------------------------------- exact shifts


def _as_laws(p1, q1):
    p = np.asarray(p1, np.float64)
    q = np.asarray(q1, np.float64)
    return p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True)


def lenient_first_token_law(p1, q1, lenience: float) -> np.ndarray:
    """Exact law of the first emitted token of `lenient_accept`, drafts drawn from q1 (float64).

    P(y) = q(y) min(1, p(y) / (l q(y))) + (1 - α) r(y), with α = Σ_x min(q(x), p(x) / l) and
    r = norm(max(p - l q, 0)) (p where that has no mass). A deterministic draft is q1 = one-hot.
    Rows: p1, q1 [..., vocab].
    """
    check_unit("lenience", lenience)
    p, q = _as_laws(p1, q1)
    accept = np.minimum(q, p / lenience)  # q(y) min(1, p / (l q)), 0 where q = 0
    alpha = accept.sum(-1, keepdims=True)
    residual = np.maximum(p - lenience * q, 0.0)
    mass = residual.sum(-1, keepdims=True)
    r = np.where(mass > 0, residual / np.where(mass > 0, mass, 1.0), p)
    return accept + (1.0 - alpha) * r


def typical_first_token_law(p1, q1, epsilon: float = 0.09, delta: float = 0.3) -> np.ndarray:
    """Exact law of the first emitted token of `typical_accept`, drafts drawn from q1 (float64).

    P(y) = q(y) [p(y) > τ] + (Σ_x q(x) [p(x) <= τ]) p(y), τ = min(ε, δ exp(-H(p))).
    """
    check_unit("epsilon", epsilon)
    check_unit("delta", delta)
    p, q = _as_laws(p1, q1)
    logp = np.log(np.where(p > 0, p, 1.0))
    tau = np.minimum(epsilon, delta * np.exp(np.sum(p * logp, -1, keepdims=True)))
    keep = p > tau
    return q * keep + np.sum(q * ~keep, -1, keepdims=True) * p


def total_variation(a, b) -> np.ndarray:
    """½ Σ |a - b| over the last axis (float64)."""
    return 0.5 * np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).sum(-1)


def _call_law(drafts, q, p, d, accept_prob, correction) -> np.ndarray:
    """[γ + 1, vocab] exact law of (n, next token) of one call of a token-wise-shaped rule."""
    gamma, vocab = len(drafts), p.shape[-1]
    q = np.eye(vocab)[np.asarray(drafts)] if q is None else q
    law = np.zeros((gamma + 1, vocab))
    reach = 1.0
    for i in range(d + 1):
        if i == d:
            law[i] = reach * p[i]
            break
        a = accept_prob(p[i], q[i], drafts[i])
        law[i] = reach * (1.0 - a) * correction(p[i], q[i])
        reach *= a
    return law


def lenient_call_law(drafts, q, p, d, lenience: float) -> np.ndarray:
    """Exact (n, y) law of one `lenient_accept` call (float64; `specjax.testing.law.RuleLaw` with
    the knob bound by functools.partial), for `law.stream_law`: the exact shift of a stream."""

    def accept(p_i, q_i, x):
        return 1.0 if p_i[x] >= lenience * q_i[x] else p_i[x] / (lenience * q_i[x])

    def correction(p_i, q_i):
        r = np.maximum(p_i - lenience * q_i, 0.0)
        return r / r.sum() if r.sum() > 0 else p_i

    return _call_law(drafts, q, p, d, accept, correction)


def typical_call_law(drafts, q, p, d, epsilon: float = 0.09, delta: float = 0.3) -> np.ndarray:
    """Exact (n, y) law of one `typical_accept` call (float64), as `lenient_call_law`."""

    def accept(p_i, q_i, x):
        logp = np.log(np.where(p_i > 0, p_i, 1.0))
        return float(p_i[x] > min(epsilon, delta * np.exp(np.sum(p_i * logp))))

    return _call_law(drafts, q, p, d, accept, lambda p_i, q_i: p_i)


# Registry markers (`specjax.decoding.rules.is_lossless`): neither rule is exact (lenience = 1
# excepted: `BoundRule.lossless` says so).
lenient_accept.lossless = False
typical_accept.lossless = False
