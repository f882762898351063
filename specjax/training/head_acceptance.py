"""Acceptance by rank and by draft depth of an EAGLE head, measured on the target's own text.

Sequoia builds its trees from P[k], the probability that the k-th child tried at a node is the
one accepted (`specjax.rank_acceptance`). An EAGLE head drafts depth d on its own predicted
features of depths 1..d-1, so it accepts less the deeper it drafts, and one vector describes it
badly. This module measures one vector per depth, P[d][k], from the same unrolled passes that
train the head (`eagle3.ttt_outputs`, tested equal to the drafter's own calls):

  * pass k at position t is the head's (k+1)-th draft of a chain whose true pairs end at
    s = t - k: it has seen the target's features up to s and its own predictions after, with
    the teacher tokens x_{s+1} .. x_{t+1} as the chain's accepted tokens. It proposes x_{t+2};
    the target's law there is its logits after x_{t+1};
  * a chain start s counts when decoding can start a chain there: x_{s+1} is generated
    (s >= prompt length - 1), and x_{t+2} is in the sequence.

The target's sequences should be its own continuations at the warper's temperature: conditional
on a chain having been accepted to depth d - 1, its tokens are what the target emitted there
(at t = 0 exactly; at t > 0 the accepted path's tokens follow the target's law). Each row is a
mean over all chain starts, not only those whose earlier drafts were accepted: like Sequoia's own
vector it assumes a node's acceptance does not depend on how its path was accepted.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from specjax import checks
from specjax.alpha import check_token_ids, overlap
from specjax.decoding.prompts import bucket_length
from specjax.decoding.sampling import Warper, check_warper
from specjax.decoding.trees.search import conditional_from_positional
from specjax.rank_acceptance import RULES, rank_acceptance
from specjax.training.eagle3 import ttt_outputs


def head_rank_acceptance(
    head,
    head_params,
    target_params,
    sequences,
    prompt_lengths,
    warper: Warper,
    *,
    ranks: int = 4,
    depth: int = 4,
    rules=("top_k",),
    samples: int = 32,
    seed: int = 0,
) -> dict:
    """P[d][k]: the k-th child tried at a node of depth d + 1 is the one accepted, by rule.

    Args:
      head: an `EagleHead` (EAGLE-1 or EAGLE-3) in the xla layout; its `target` is the target.
      head_params, target_params: their params.
      sequences: 1-D int token arrays, each a prompt followed by the target's continuation.
      prompt_lengths: each sequence's prompt length P (>= 1; the first generated token is x_P).
      warper: applied to the target's and the head's logits (the decoder's warper).
      ranks: K children per node, >= 1 (<= vocab_size for "without" and "top_k").
      depth: draft depths measured, >= 1 (the unrolled passes).
      rules: which of `rank_acceptance.RULES`: "top_k" (the head's K most likely tokens, as a
        static tree drafts at t = 0), "without" (K draws without replacement, as at t > 0),
        "with" (K independent draws).
      samples: races per position for "without".
      seed: PRNG seed for "without".

    Returns:
      rule -> {"positional": [depth][K] mean P, "conditional": [depth][K] rates a_k (each row
      from its own P), "alpha": [depth] mean beta = sum min(p, q) at each depth, "positions":
      [depth] chain starts counted}. Row d is for the children of nodes at depth d (row 0: the
      root's), the form `optimal_tree` and `expected_accepted` take.
    """
    rules = _check_rules(rules)
    check_warper(warper)
    if getattr(head, "packed", False):
        raise ValueError(
            "head: measure a head in the xla layout (head.with_matmul(params, 'xla')): the "
            "unrolled passes run the training code"
        )
    target = head.target
    seqs, lengths = _check_sequences(sequences, prompt_lengths, target.vocab_size)
    checks.check_count("depth", depth)
    distinct = any(rule in ("without", "top_k") for rule in rules)
    checks.check_count("ranks", ranks, 1, target.vocab_size if distinct else None)
    checks.check_count("samples", samples)
    # chain starts per depth (s >= P - 1, t = s + k <= L - 3), known before any model runs
    sizes = np.array([len(s) for s in seqs])
    counts = np.array(
        [np.maximum(sizes - 1 - np.array(lengths) - k, 0).sum() for k in range(depth)]
    )
    if not counts.all():
        raise ValueError(
            f"sequences: no chain start reaches depth {int(np.argmin(counts > 0)) + 1} (each "
            f"needs a continuation of at least depth + 1 = {depth + 1} tokens); lower depth or "
            "give longer continuations"
        )
    sums = {rule: np.zeros((depth, ranks)) for rule in rules}
    beta = np.zeros(depth)
    key = jax.random.PRNGKey(seed)
    for seq, prompt_len in zip(seqs, lengths, strict=True):
        t_logits, q_by_depth = _logits(head, head_params, target_params, seq, depth)
        size = len(seq)
        for k in range(depth):
            # chain starts s >= P - 1 with x_{t+2} in the sequence, t = s + k
            t = np.arange(prompt_len - 1 + k, size - 2)
            if t.size == 0:
                continue
            p_rows = t_logits[t + 1]  # [n, V] the target's law of x_{t+2}
            q_rows = q_by_depth[k][t]  # [n, V] the head's depth-(k+1) draft of it
            beta[k] += float(overlap(p_rows, q_rows, warper).sum())
            for rule in rules:
                key, sub = jax.random.split(key)
                got = rank_acceptance(sub, p_rows, q_rows, warper, ranks, rule, samples)
                sums[rule][k] += np.asarray(got, np.float64).sum(0)
    out = {}
    for rule in rules:
        positional = sums[rule] / counts[:, None]
        out[rule] = {
            "positional": positional.tolist(),
            "conditional": [
                conditional_from_positional(np.clip(row, 0, 1)).tolist() for row in positional
            ],
            "alpha": (beta / counts).tolist(),
            "positions": counts.tolist(),
        }
    return out


def _logits(head, head_params, target_params, seq: np.ndarray, depth: int):
    """(target logits [L, V], [depth] head logits [L - 1, V]) of one sequence, padded to a
    bucket width so few programs compile (positions past L are never read: all is causal)."""
    width = bucket_length(len(seq), 16)
    tokens = np.zeros((1, width), np.int32)
    tokens[0, : len(seq)] = seq
    t_logits, q_logits = _unrolled(head, head_params, target_params, jnp.asarray(tokens), depth)
    size = len(seq)
    return np.asarray(t_logits[0, :size]), [np.asarray(q[0, : size - 1]) for q in q_logits]


@functools.partial(jax.jit, static_argnums=(0, 4))
def _unrolled(head, head_params, target_params, tokens, depth):
    target = head.target
    batch, width = tokens.shape
    out = target.forward(
        target_params, target.init_state(batch, width), tokens, jnp.full((batch,), width),
        return_layers=head.feature_layers,
    )  # fmt: skip
    features = out.layers.reshape(batch, width, -1) if head.feature_layers else out.hidden
    preds = ttt_outputs(head, head_params, target_params, features, tokens, depth)
    return out.logits, [head.logits(target_params, head_params, pred) for pred in preds]


def _check_rules(rules) -> tuple:
    if isinstance(rules, str):
        raise TypeError(f"rules must be a sequence of rule names from {RULES}; got {rules!r}")
    rules = tuple(rules)
    if not rules or any(rule not in RULES for rule in rules):
        raise ValueError(f"rules must be a non-empty selection of {RULES}; got {rules!r}")
    return rules


def _check_sequences(sequences, prompt_lengths, vocab_size: int):
    seqs = [check_token_ids(f"sequences[{i}]", s, vocab_size) for i, s in enumerate(sequences)]
    lengths = list(prompt_lengths)
    if not seqs or len(lengths) != len(seqs):
        raise ValueError(
            f"sequences and prompt_lengths: one prompt length per sequence, at least one; got "
            f"{len(seqs)} sequences and {len(lengths)} lengths"
        )
    for i, (s, p) in enumerate(zip(seqs, lengths, strict=True)):
        if s.ndim != 1:
            raise ValueError(f"sequences[{i}] must be 1-D token ids; got shape {s.shape}")
        checks.check_count(f"prompt_lengths[{i}]", p, 1, max(1, len(s) - 1))
    return [s.astype(np.int32) for s in seqs], [int(p) for p in lengths]
