"""The lossless speculative-sampling rule (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023).

Given γ tokens x_1..x_γ that a draft sampled from q_1..q_γ and the target's distributions
p_1..p_{γ+1} at the same positions (one parallel target call), every row of the batch:
  * accepts x_i with probability min(1, p_i(x_i) / q_i(x_i)), in order, until the first rejection;
  * on a rejection at position n draws the next token from norm(max(0, p_n − q_n));
  * if all γ are accepted draws a bonus token from p_{γ+1}.
The emitted tokens are then distributed exactly as the target's own samples, whatever q is.

A deterministic draft (greedy draft, n-gram argmax, prompt lookup) has q = point mass on x_i; then
the rule reads "accept with probability p(x); on rejection sample p with x removed", which is what
`draft_probs=None` computes, by the same code path.

A row may draft fewer than γ tokens (`num_drafted`: a prompt-lookup miss, an adaptive γ): its
positions past num_drafted are never accepted, and if it accepts all it drafted, its extra token
is the bonus from p at its own length, p_{num_drafted + 1} (q there is "nothing drafted", i.e.
zero, so the residual formula gives p itself).

Everything is static-shaped and branch-free: acceptance is a mask, the rejection position an index,
so the function jits once per (batch, γ, vocab) and runs inside `lax.while_loop`. The decoders
take the rule as a static field (`SpeculativeDecoder(..., accept=speculative_accept)`), so any
function with this signature and return is a drop-in verifier. `block_accept` (block verification,
block.py) is one: lossless, and never fewer accepted drafts in expectation. The scaffolding the
rules share (argument checks, float32 laws, the residual, the output layout) is `_common.py`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax.decoding.rules._common import (
    accepted_prefix,
    assemble_tokens,
    at_tokens,
    check_args,
    distributions,
    residual_distribution,
)
from specjax.decoding.rules.point_mass import point_mass_accept
from specjax.decoding.sampling import sample_from_probs


def speculative_accept(
    key: jax.Array,
    draft_tokens: jax.Array,
    draft_probs: jax.Array | None,
    target_probs: jax.Array,
    *,
    fill_value: int = -1,
    num_drafted: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Accepts or rejects drafted tokens so the output is distributed exactly as the target's.

    Args:
      key: a PRNG key (one per call; rows draw independent randomness from it).
      draft_tokens: int [batch, gamma] tokens the draft proposed.
      draft_probs: float [batch, gamma, vocab] q at each drafted position (what the draft sampled
        from), or None for a deterministic draft (q is a point mass on the drafted token). A
        drafted token has q(x) > 0; given concrete arrays, a q(x) = 0 raises ValueError.
      target_probs: float [batch, gamma + 1, vocab] p at each drafted position plus the bonus
        position. float32 or bfloat16; computed in float32 after renormalising each row (p and q
        rows are treated as the distributions sampling draws from, i.e. divided by their sums).
      fill_value: written to tokens[b, n + 1:].
      num_drafted: int [batch] in [0, gamma], how many of each row's tokens were drafted (the
        rest is padding, never accepted; the row's extra token is then drawn at its own length),
        or None: every row drafted gamma.

    Returns:
      tokens: int32 [batch, gamma + 1]; tokens[b, :n + 1] are emitted (the n accepted drafts, then
        the resampled or bonus token), the rest `fill_value`.
      num_accepted: int32 [batch], n in [0, gamma].
    """
    check_args(draft_tokens, draft_probs, target_probs, num_drafted, key=key, fill_value=fill_value)
    batch, gamma = draft_tokens.shape
    draft_tokens, q, p = distributions(draft_tokens, draft_probs, target_probs)

    key_accept, key_sample = jax.random.split(key)
    p_x = at_tokens(p[:, :gamma], draft_tokens)  # [batch, gamma]
    q_x = at_tokens(q, draft_tokens)  # [batch, gamma]
    u = jax.random.uniform(key_accept, (batch, gamma), jnp.float32)  # [batch, gamma] in [0, 1)
    # u < p/q written without the division: p >= q always accepts, q == 0 never divides by zero.
    accepted = u * q_x < p_x  # [batch, gamma]
    if num_drafted is not None:
        drafted_mask = jnp.arange(gamma)[None, :] < num_drafted[:, None]  # [batch, gamma]
        accepted = accepted & drafted_mask
    num_accepted = accepted_prefix(accepted)  # [batch]

    # With q padded by zeros at the bonus position, "residual at n" covers both cases:
    # n < gamma gives norm(max(0, p_n - q_n)); n == gamma gives p_gamma itself.
    q_ext = jnp.pad(q, ((0, 0), (0, 1), (0, 0)))  # [batch, gamma + 1, vocab]
    index = num_accepted[:, None, None]  # [batch, 1, 1]
    p_n = jnp.take_along_axis(p, index, axis=1)[:, 0]  # [batch, vocab]
    q_n = jnp.take_along_axis(q_ext, index, axis=1)[:, 0]  # [batch, vocab]
    if num_drafted is not None:
        # All drafted tokens accepted: nothing was drafted at n, so q_n is zero (bonus from p_n).
        q_n = jnp.where((num_accepted < num_drafted)[:, None], q_n, 0.0)
    next_token = sample_from_probs(key_sample, residual_distribution(p_n, q_n))  # [batch]

    tokens = assemble_tokens(draft_tokens, num_accepted, next_token, fill_value)
    return tokens, num_accepted.astype(jnp.int32)


# Registry marker (`specjax.decoding.rules.is_lossless`): this rule is exact.
speculative_accept.lossless = True
# Its outcome when p is a point mass (greedy), from tokens alone (`point_mass.py`).
speculative_accept.point_mass = point_mass_accept
