"""A lossless chain rule's outcome when the target is a point mass (greedy decoding).

With temperature 0 the target's p at every scored position is the one-hot of its argmax a_i.
Then the token-wise rule (`speculative_accept`) decides without chance, whatever q is:
  * a draft x_i = a_i has p_i(x_i) = 1 >= q_i(x_i): accepted (u q < 1 for every u in [0, 1));
  * a draft x_i != a_i has p_i(x_i) = 0: rejected;
  * the correction norm(max(0, p_n − q_n)) has its only mass at a_n (q_n(a_n) < 1, since the
    rejected x_n had q_n(x_n) > 0; where it has none, the rule's fallback is p_n itself), and
    the bonus is drawn from p_{γ+1} = one-hot(a_{γ+1}).
So the rule emits the longest prefix of drafts that equals a_1, a_2, ..., then the target's
argmax after it: exactly greedy decoding's tokens. Block verification (`block_accept`) keeps
the same prefix: its weight b_i stays 1 along the matching drafts and drops to 0 at the first
mismatch, so h_i is 1 up to it and 0 after, and its correction is one-hot(a_τ+1) too.

`point_mass_accept` computes that outcome from the drafted and the target's tokens alone, with
no [batch, γ + 1, vocab] distributions: a greedy speculative iteration then pays one argmax
over the target's logits instead of a one-hot, the rule's passes over p and q, and a draw from
the residual (about 1 ms per iteration at a 49,152-token vocabulary on a 2-core CPU). The
decoders use it where the warper ends in `Greedy` and the rule carries it (`point_mass`
attribute: `speculative_accept`, `block_accept`); tests/test_point_mass_accept.py checks it
against both rules on random one-hot targets and random q, ragged `num_drafted` included.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax import checks
from specjax.decoding.rules._common import accepted_prefix, assemble_tokens


def point_mass_accept(
    draft_tokens: jax.Array,
    target_tokens: jax.Array,
    *,
    fill_value: int = -1,
    num_drafted: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The lossless rules' output for a point-mass target: the drafts that equal its tokens.

    Args:
      draft_tokens: int [batch, gamma] the drafted tokens.
      target_tokens: int [batch, gamma + 1] the token the target's p is a point mass on at each
        scored position (`Warper.greedy_tokens` of its logits), or a negative value where p has
        no mass at all (logits all -inf, or NaN at the argmax): there, as the rules do with an
        all-zero p row, no draft is accepted and token 0 is emitted.
      fill_value: written to tokens[b, n + 1:].
      num_drafted: int [batch] in [0, gamma], how many of each row's tokens were drafted (the
        rest is never accepted), or None: every row drafted gamma.

    Returns:
      tokens: int32 [batch, gamma + 1]; tokens[b, :n + 1] are emitted (the n accepted drafts,
        then the target's token at position n), the rest `fill_value`.
      num_accepted: int32 [batch], n in [0, gamma].
    """
    checks.check_rank("draft_tokens", draft_tokens, 2, "[batch, gamma]")
    checks.check_int("draft_tokens", draft_tokens)
    checks.check_rank("target_tokens", target_tokens, 2, "[batch, gamma + 1]")
    checks.check_int("target_tokens", target_tokens)
    batch, gamma = draft_tokens.shape
    if target_tokens.shape != (batch, gamma + 1):
        raise ValueError(
            f"target_tokens must have shape [batch, gamma + 1] = [{batch}, {gamma + 1}] for "
            f"draft_tokens of shape {tuple(draft_tokens.shape)}; got {tuple(target_tokens.shape)}"
        )
    if num_drafted is not None:
        checks.check_rank("num_drafted", num_drafted, 1, "[batch]")
        if num_drafted.shape[0] != batch:
            raise ValueError(
                f"num_drafted must have shape [batch] = [{batch}]; got {tuple(num_drafted.shape)}"
            )
    draft_tokens = draft_tokens.astype(jnp.int32)
    target_tokens = target_tokens.astype(jnp.int32)
    accepted = draft_tokens == target_tokens[:, :gamma]  # [batch, gamma]; never at no mass
    if num_drafted is not None:
        accepted = accepted & (jnp.arange(gamma)[None, :] < num_drafted[:, None])
    num_accepted = accepted_prefix(accepted)  # [batch]
    next_token = jnp.take_along_axis(target_tokens, num_accepted[:, None], axis=1)[:, 0]
    next_token = jnp.maximum(next_token, 0)  # no mass: the rules' draw from an all-zero row
    tokens = assemble_tokens(draft_tokens, num_accepted, next_token, fill_value)
    return tokens, num_accepted.astype(jnp.int32)
