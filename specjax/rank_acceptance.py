"""Acceptance by rank: how often the k-th child tried at a tree node is the one accepted.

Sequoia describes a (target, draft, warper, rule) combination by its positional acceptance vector
P[k] = P(the k-th child tried is the one accepted), k = 1..K, and builds its trees from it
(`specjax.decoding.trees.search`). This module measures P at every position of given token
sequences (normally text the target generated), from one forward pass of each model, for a node
of K children drawn by each rule `tree_accept` verifies:

  * "with": K independent draws from q (SpecInfer). Exact: the residual after a rejection does not
    depend on which token was rejected, so a_k = sum min(r_k, q), r_{k+1} = norm((r_k - q)+) and
    P_k = a_k prod_{j<k} (1 - a_j).
  * "without": K draws without replacement from q (Sequoia), verified by `tree_accept` itself on
    a one-level tree; P is the Monte-Carlo frequency over `samples` races per position (the
    rejected token changes the next proposal, so there is no closed form). With a greedy warper
    the draft's top-k is used instead, as `TreeDrafter` does: see "top_k".
  * "top_k": the draft's K most likely tokens as deterministic proposals. Exact: child k is
    accepted exactly when the target's sample is that token, so P_k = p(x_k).

P[1] is the paper's beta = sum min(p, q) under every rule but "top_k" (in expectation for
"without"), so its mean over positions is alpha.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from specjax import checks
from specjax.alpha import check_sequences, overlap
from specjax.decoding import TokenTree, Warper, residual_distribution, tree_accept
from specjax.decoding.argmax import top_k
from specjax.decoding.trees.search import conditional_from_positional
from specjax.decoding.trees.topology import draw_children
from specjax.models.interface import check_pair
from specjax.models.sequence import sequence_logits

_logits = jax.jit(sequence_logits, static_argnums=0)

RULES = ("with", "without", "top_k")


def _with_replacement(p: jax.Array, q: jax.Array, ranks: int) -> jax.Array:
    out, r, reach = [], p, jnp.ones(p.shape[:-1], jnp.float32)
    for _ in range(ranks):
        a = jnp.clip(jnp.minimum(r, q).sum(-1), 0.0, 1.0)
        out.append(reach * a)
        reach, r = reach * (1.0 - a), residual_distribution(r, q)  # empty: r
    return jnp.stack(out, -1)


def _without_replacement(key, p: jax.Array, q: jax.Array, ranks: int, samples: int) -> jax.Array:
    """Monte-Carlo P over `samples` Gumbel races per position: float32 [n, ranks] from [n, V]."""
    n, vocab = p.shape
    tree = TokenTree.from_branching((ranks,))
    p_rows = jnp.repeat(p, samples, axis=0)  # [n * samples, V]
    q_rows = jnp.repeat(q, samples, axis=0)
    draw_key, accept_key = jax.random.split(key)
    children = draw_children(draw_key, q_rows, ranks, replacement=False)  # [n * S, K]
    tokens = jnp.concatenate([jnp.zeros((n * samples, 1), jnp.int32), children], axis=1)
    nodes = (n * samples, ranks + 1, vocab)
    _, _, path = tree_accept(
        accept_key,
        tree,
        tokens,
        jnp.broadcast_to(q_rows[:, None], nodes),
        jnp.broadcast_to(p_rows[:, None], nodes),  # only the root's p is read before a leaf
        replacement=False,
    )
    rank = path[:, 1] - 1  # the accepted child's rank, -1 when none was accepted
    hits = jax.nn.one_hot(rank, ranks, dtype=jnp.float32)  # all zero for -1
    return hits.reshape(n, samples, ranks).mean(1)


@functools.partial(jax.jit, static_argnames=("warper", "ranks", "rule", "samples"))
def rank_acceptance(
    key: jax.Array,
    target_logits: jax.Array,
    draft_logits: jax.Array,
    warper: Warper,
    ranks: int,
    rule: str,
    samples: int = 32,
) -> jax.Array:
    """Positional acceptance P[k] at each position: float32 [n, ranks].

    Args:
      key: PRNG key (used by "without" only).
      target_logits: float [n, vocab] the target's logits at n positions.
      draft_logits: float [n, vocab] the draft's at the same positions.
      warper: applied to both (the distributions the decoder samples and verifies).
      ranks: K, the children tried at the node.
      rule: "with", "without" or "top_k" (module docstring); "without" with a greedy warper is
        "top_k".
      samples: races per position for "without".

    Returns:
      float32 [n, ranks]; each row sums to at most 1 (the rest: no child accepted).
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}; got {rule!r}")
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks must be an int >= 1; got {ranks!r}")
    if target_logits.ndim != 2 or target_logits.shape != draft_logits.shape:
        raise ValueError(
            "target_logits and draft_logits must both be [n, vocab] with one vocabulary; got "
            f"{tuple(target_logits.shape)} and {tuple(draft_logits.shape)}"
        )
    p = warper.probs(target_logits.astype(jnp.float32))
    q = warper.probs(draft_logits.astype(jnp.float32))
    if rule == "top_k" or (rule == "without" and warper.is_greedy):
        top = top_k(draft_logits.astype(jnp.float32), ranks)[1]  # [n, K]
        return jnp.take_along_axis(p, top, axis=-1)
    if rule == "with":
        return _with_replacement(p, q, ranks)
    return _without_replacement(key, p, q, ranks, samples)


def rank_acceptance_on_sequences(
    target,
    target_params,
    draft,
    draft_params,
    sequences,
    prompt_len: int,
    warper: Warper,
    ranks: int,
    rules=RULES,
    samples: int = 32,
    batch_size: int = 8,
    seed: int = 0,
) -> dict:
    """Mean positional and conditional acceptance by rank over the generated positions.

    Args:
      target, target_params: the target model.
      draft, draft_params: the draft (same vocabulary).
      sequences: int [n, P + N] prompts followed by continuations (normally the target's own,
        `alpha_generated.generate_reference`), n >= 1, ids in [0, vocab_size).
      prompt_len: P in [1, P + N - 1]; positions predicting tokens P .. P + N - 1 count.
      warper: applied to both models.
      ranks: K children per node, >= 1; at most vocab_size for "without" and "top_k" (K
        distinct tokens).
      rules: which of RULES to measure.
      samples: races per position for "without", >= 1.
      batch_size: sequences per forward pass, >= 1.
      seed: PRNG seed for "without".

    Returns:
      rule -> {"positional": [K] mean P_k, "conditional": [K] a_k from it, "alpha": mean beta
      (the paper's alpha, from the same forward passes), "positions": int}.
    """
    # Everything is checked on the host, before the first forward pass compiles.
    check_pair(target, draft)
    if isinstance(rules, str):
        raise TypeError(f"rules must be a sequence of rule names from {RULES}; got {rules!r}")
    rules = tuple(rules)
    for rule in rules:
        if rule not in RULES:
            raise ValueError(f"rules must be drawn from {RULES}; got {rule!r}")
    sequences = check_sequences(sequences, prompt_len, target.vocab_size)
    distinct = any(rule in ("without", "top_k") for rule in rules)  # K distinct tokens
    checks.check_count("ranks", ranks, 1, target.vocab_size if distinct else None)
    checks.check_count("samples", samples)
    checks.check_count("batch_size", batch_size)
    inputs = sequences[:, :-1]
    sums = {rule: np.zeros(ranks) for rule in rules}
    beta_sum, count = 0.0, 0
    key = jax.random.PRNGKey(seed)
    for start in range(0, inputs.shape[0], batch_size):
        chunk = jnp.asarray(inputs[start : start + batch_size])
        t = _logits(target, target_params, chunk)[:, prompt_len - 1 :]  # [b, N, V]
        d = _logits(draft, draft_params, chunk)[:, prompt_len - 1 :]
        t, d = t.reshape(-1, t.shape[-1]), d.reshape(-1, d.shape[-1])
        beta_sum += float(overlap(t, d, warper).sum())
        count += t.shape[0]
        for rule in rules:
            key, sub = jax.random.split(key)
            got = rank_acceptance(sub, t, d, warper, ranks, rule, samples)
            sums[rule] += np.asarray(got, np.float64).sum(0)
    out = {}
    for rule in rules:
        positional = sums[rule] / count
        out[rule] = {
            "positional": positional.tolist(),
            "conditional": conditional_from_positional(np.clip(positional, 0, 1)).tolist(),
            "alpha": beta_sum / count,
            "positions": count,
        }
    return out
