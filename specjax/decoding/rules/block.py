r"""Block verification (Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh; ICLR 2025,
arXiv:2403.10444, Algorithm 2): judge the drafted block as a whole, still exactly lossless.

Token-wise verification (`speculative_accept`) stops at the first rejected draft. Block
verification keeps a running weight of the whole drafted prefix and may accept x_1..x_τ even
where a token-wise coin for some x_i (i <= τ) would have failed. Per row, with p_i the target's
and q_i the draft's distribution at drafted position i (p_{γ+1}: the bonus position):

    b_0 = 1,   b_i = min(1, b_{i−1} p_i(x_i) / q_i(x_i))                       i = 1..γ
    ρ_i = Σ_v max(b_i p_{i+1}(v) − q_{i+1}(v), 0),  h_i = ρ_i / (ρ_i + 1 − b_i)  i = 1..γ−1
    h_γ = b_γ
    η_1..η_γ ~ U(0, 1) i.i.d.;  τ = max({0} ∪ {i : η_i < h_i})   (no break at a failed coin)
    emit x_1..x_τ, then y ~ p_{γ+1} if τ = γ, else y ~ norm(max(b_τ p_{τ+1} − q_{τ+1}, 0)).

Why it is lossless (the paper's Theorem 1, in a short form we checked). Write Q(x_{1:i}) =
Π_{j<=i} q_j(x_j) and w(x_{1:i}) = Q(x_{1:i}) b_i, so w() = 1 and
w(x_{1:i+1}) = min(Q(x_{1:i+1}), w(x_{1:i}) p_{i+1}(x_{i+1})). Since Σ_v q_{i+1}(v) = 1 and
Σ_v min(q_{i+1}(v), b_i p_{i+1}(v)) = b_i − ρ_i, the weight's expectation over the next draft is
E[b_{i+1} | x_{1:i}] = b_i − ρ_i. Then, by induction from i = γ down (coins independent of
everything else; τ is the LAST success, so τ >= i + 1 does not look at η_i):

    P(τ >= i | x_{1:i}) = b_i,    P(τ = i | x_{1:i}) = h_i (1 − b_i + ρ_i) = ρ_i   (i < γ),

which is what h_i is chosen for (P(τ >= γ | x_{1:γ}) = b_γ starts the induction). The output
x_{1:i} y with τ = i < γ therefore has probability Q(x_{1:i}) ρ_i · max(b_i p_{i+1}(y) −
q_{i+1}(y), 0) / ρ_i = w(x_{1:i}) p_{i+1}(y) − w(x_{1:i} y), and with τ = γ, w(x_{1:γ})
p_{γ+1}(y). Adding the outputs that run past position k (probability w(z_{1:k})), the output
agrees with a string z_{1:k} up to position k with probability w(z_{1:k−1}) p_k(z_k | z_{<k}):
given that the call emits a k-th token after z_{<k}, that token is exactly a draw of the target's
p_k(· | z_{<k}). Every emitted token is thus a target draw given the stream before it (later
calls start afresh from the emitted prefix), which is losslessness. The b_τ weight in the
residual is what gives the term w(x_{1:i}) p_{i+1}(y); without it the law is wrong as soon as a
partially kept prefix (b_i < 1) is completed.

More tokens. Token-wise verification keeps x_{1:i} with probability w_tok(x_{1:i}) =
Π_{j<=i} min(q_j(x_j), p_j(x_j)), which is <= Q(x_{1:i}) and <= w_tok(x_{1:i−1}) p_i(x_i), hence by
induction <= w(x_{1:i}) pointwise: E[τ] = Σ_i Σ_{x_{1:i}} w(x_{1:i}) >= E[num_accepted] of
token-wise verification, for every p and q (the paper's Theorem 2 says more: no valid verifier
that emits a draft prefix plus one token and looks only at the sample path's p and q keeps more).

The tests do not take this on trust: tests/test_block_accept_exact.py enumerates the exact law
of the emitted stream over chained calls (prefix-dependent p and q, γ = 1..3) and matches the
target's to 1e-12, and shows that the three published mistakes (h_i = b_i; the residual without
its b_τ weight; stopping at the first failed coin) are not lossless.

Every 0/0, and why each fallback is exact (exact arithmetic; "never used" means "used with
probability 0", so any value there leaves the output law unchanged):
  * b_i with q_i(x_i) = 0: the ratio is +inf (b_i = 1) when b_{i−1} p_i(x_i) > 0, and 0 when it is
    0 too (a token neither model can produce is never kept, as in `speculative_accept`). A
    stochastic draft never proposes such a token; the values only keep the arithmetic finite.
  * h_i with ρ_i + 1 − b_i = 0: then b_i = 1 and ρ_i = 0, i.e. p_{i+1} = q_{i+1}. Then x_{i+1}
    lies in q_{i+1}'s support, so b_{i+1} = 1 and h_{i+1} = 1 (ρ_{i+1} / ρ_{i+1}, this same
    case again, or h_γ = b_γ): τ >= i + 1 surely and h_i is never used. We set h_i = 1, the
    limit along b_i = 1 (where h_i = ρ_i / ρ_i for every ρ_i > 0).
  * the correction residual with zero mass (ρ_τ = 0, or p_1 = q_1 at τ = 0): stopping at τ needs
    η_τ < h_τ = 0 (when b_τ < 1), impossible with the strict "<", or b_τ = 1 and the case above,
    where τ is never the last success. Fallback: p_{τ+1} (so the output stays a distribution;
    NVIDIA's reference does the same).
  * a row with b_τ = 0 is never stopped at τ >= 1 (h_τ = 0 / (0 + 1) = 0).
With floats, h_i and b_i are rounded, so the law is exact up to float32 rounding (as for
`speculative_accept`); η < h (not <=) keeps h = 0 never and h = 1 always selected even though
`jax.random.uniform` can return exactly 0.

Deterministic drafts (`draft_probs=None`, q_i a point mass on x_i): b_i = Π_{j<=i} p_j(x_j),
ρ_i = b_i (1 − p_{i+1}(x_{i+1})), and the residual is p_{τ+1} with x_{τ+1} removed (b_τ cancels).
Then P(τ >= i) = b_i for every i, which is the law of token-wise verification's num_accepted, and
the correction token has the same law too: block verification equals token-wise verification in
distribution for point-mass drafts (no valid verifier can do better: P(τ >= i) <= the target's
probability of x_{1:i} = b_i). It gains only with sampled drafts.

A row that drafted d < γ tokens (`num_drafted`): h_d = b_d (position d is that row's last), h_i
= 0 for i > d, and when τ = d its extra token is the bonus from p_{d+1}, not a residual against
the padding draft at d + 1 (the static-shape trap of ALGORITHMS.md §1c).

Static shapes: γ is a Python loop bound (the running weight is a length-γ recurrence), the rest
is masks and gathers, so the function jits once per (batch, γ, vocab).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax.decoding.rules._common import (
    assemble_tokens,
    at_tokens,
    check_args,
    distributions,
    weighted_residual,
)
from specjax.decoding.rules.point_mass import point_mass_accept
from specjax.decoding.sampling import sample_from_probs


def block_weights(p_x: jax.Array, q_x: jax.Array) -> jax.Array:
    """The running weights b_0..b_γ of the drafted prefixes.

    b_0 = 1, b_i = min(1, b_{i−1} p_i(x_i) / q_i(x_i)); where q_i(x_i) = 0 the ratio is +inf
    (b_i = 1) if b_{i−1} p_i(x_i) > 0 and 0 otherwise.

    Args:
      p_x: float32 [batch, gamma] p_i(x_i).
      q_x: float32 [batch, gamma] q_i(x_i).

    Returns:
      float32 [batch, gamma + 1], column i = b_i.
    """
    weights = [jnp.ones(p_x.shape[:1], jnp.float32)]
    for i in range(p_x.shape[1]):
        num = weights[-1] * p_x[:, i]  # [batch]
        at_least_q = num >= q_x[:, i]  # ratio >= 1 (q_x == 0 included)
        ratio = num / jnp.where(at_least_q, 1.0, q_x[:, i])  # q_x > 0 where it is used
        weights.append(jnp.where(at_least_q, (num > 0).astype(jnp.float32), ratio))
    return jnp.stack(weights, axis=1)


def stop_chances(
    draft_tokens: jax.Array, q: jax.Array, p: jax.Array, drafted: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """The weights b_0..b_γ and the stopping chances h_1..h_γ of block verification.

    τ is the last i with η_i < h_i, so P(τ >= i | drafts) = 1 − Π_{j>=i} (1 − h_j): with
    `expected_accepted` below this gives E[τ | drafts] in closed form (no coins drawn).

    Args:
      draft_tokens: int32 [batch, gamma].
      q: float32 [batch, gamma, vocab] normalised draft distributions (point masses for a
        deterministic draft).
      p: float32 [batch, gamma + 1, vocab] normalised target distributions.
      drafted: int32 [batch] tokens each row drafted (h_d = b_d, h_i = 0 past d).

    Returns:
      b: float32 [batch, gamma + 1], column i = b_i.
      h: float32 [batch, gamma], column i - 1 = h_i.
    """
    gamma = draft_tokens.shape[1]
    p_x = at_tokens(p[:, :gamma], draft_tokens)  # [batch, gamma]
    q_x = at_tokens(q, draft_tokens)  # [batch, gamma]
    b = block_weights(p_x, q_x)  # [batch, gamma + 1], b[:, i] = b_i

    # ρ_i for i = 0..gamma-1 (column i pairs b_i with p_{i+1}, q_{i+1}: p[:, i], q[:, i]).
    rho = jnp.maximum(b[:, :gamma, None] * p[:, :gamma] - q, 0.0).sum(-1)  # [batch, gamma]
    # h_i for i = 1..gamma-1 from the ρ formula, in column i - 1.
    rho_h, b_h = rho[:, 1:], b[:, 1:gamma]  # [batch, gamma - 1]
    denom = rho_h + 1.0 - b_h
    h_mid = jnp.where(denom > 0, rho_h / jnp.where(denom > 0, denom, 1.0), 1.0)
    h_mid = jnp.pad(h_mid, ((0, 0), (0, 1)))  # [batch, gamma]; the last column is replaced
    i = jnp.arange(1, gamma + 1)[None, :]  # [1, gamma]
    d = drafted[:, None]  # [batch, 1]
    # Position d is the row's last drafted one (h_d = b_d); positions past it are never kept.
    h = jnp.where(i < d, h_mid, jnp.where(i == d, b[:, 1:], 0.0))  # [batch, gamma]
    return b, h


def expected_accepted(h: jax.Array) -> jax.Array:
    """E[τ | drafts] = Σ_i P(τ >= i) = Σ_i (1 − Π_{j>=i} (1 − h_j)) from h [..., gamma]."""
    survive = jnp.cumprod((1.0 - h)[..., ::-1], axis=-1)[..., ::-1]  # Π_{j>=i} (1 − h_j)
    return jnp.sum(1.0 - survive, axis=-1)


def block_accept(
    key: jax.Array,
    draft_tokens: jax.Array,
    draft_probs: jax.Array | None,
    target_probs: jax.Array,
    *,
    fill_value: int = -1,
    num_drafted: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Block verification: accepts a drafted prefix so the output is distributed as the target's.

    A drop-in for `speculative_accept` (same arguments, checks and return; see its docstring):
    `SpeculativeDecoder(..., accept=block_accept)`. Accepts at least as many drafts as token-wise
    verification in expectation, strictly more for some sampled drafts, the same law for
    deterministic ones (module docstring).

    Args:
      key: a PRNG key (one per call; rows draw independent randomness from it).
      draft_tokens: int [batch, gamma] tokens the draft proposed.
      draft_probs: float [batch, gamma, vocab] q at each drafted position, or None for a
        deterministic draft (q a point mass on the drafted token).
      target_probs: float [batch, gamma + 1, vocab] p at each drafted position plus the bonus
        position (float32 or bfloat16; rows renormalised in float32).
      fill_value: written to tokens[b, n + 1:].
      num_drafted: int [batch] in [0, gamma], how many of each row's tokens were drafted, or
        None: every row drafted gamma.

    Returns:
      tokens: int32 [batch, gamma + 1]; tokens[b, :n + 1] are emitted (x_1..x_n, then the
        correction or bonus token), the rest `fill_value`.
      num_accepted: int32 [batch], n = τ in [0, gamma].
    """
    check_args(draft_tokens, draft_probs, target_probs, num_drafted, key=key, fill_value=fill_value)
    batch, gamma = draft_tokens.shape
    # As in speculative_accept: float32, renormalised (bf16 rows sum to 1 +- 2e-3).
    draft_tokens, q, p = distributions(draft_tokens, draft_probs, target_probs)  # [b, g(+1), V]
    drafted = jnp.full((batch,), gamma, jnp.int32) if num_drafted is None else num_drafted
    drafted = drafted.astype(jnp.int32)  # [batch]

    b, h = stop_chances(draft_tokens, q, p, drafted)  # [batch, gamma + 1], [batch, gamma]
    i = jnp.arange(1, gamma + 1)[None, :]  # [1, gamma]

    key_accept, key_sample = jax.random.split(key)
    eta = jax.random.uniform(key_accept, (batch, gamma), jnp.float32)  # [batch, gamma]
    # τ = the LAST position whose coin succeeds: no break at the first failure.
    tau = jnp.max(jnp.where(eta < h, i, 0), axis=-1).astype(jnp.int32)  # [batch]

    q_ext = jnp.pad(q, ((0, 0), (0, 1), (0, 0)))  # [batch, gamma + 1, vocab]
    index = tau[:, None, None]  # [batch, 1, 1]
    p_next = jnp.take_along_axis(p, index, axis=1)[:, 0]  # [batch, vocab] p_{τ+1}
    q_next = jnp.take_along_axis(q_ext, index, axis=1)[:, 0]  # [batch, vocab] q_{τ+1}
    b_tau = jnp.take_along_axis(b, tau[:, None], axis=1)[:, 0]  # [batch]
    # τ = d: every drafted token kept, the bonus comes from p at the row's own length.
    dist = jnp.where(
        (tau == drafted)[:, None], p_next, weighted_residual(p_next, q_next, b_tau[:, None])
    )  # [batch, vocab]
    next_token = sample_from_probs(key_sample, dist)  # [batch]

    return assemble_tokens(draft_tokens, tau, next_token, fill_value), tau


# Registry marker (`specjax.decoding.rules.is_lossless`): this rule is exact.
block_accept.lossless = True
# Its outcome when p is a point mass (greedy), from tokens alone (`point_mass.py`).
block_accept.point_mass = point_mass_accept
