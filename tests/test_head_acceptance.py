"""An EAGLE head's acceptance by rank and depth (`training/head_acceptance.py`).

* Exact: every row equals a by-hand derivation that runs the head the way its drafter does (the
  true pairs up to the chain's start, then its own predicted features one call at a time), scores
  the target on the unpadded sequence, and takes p at the drafted token's position, for two
  sequences of different lengths and prompts, at t = 0 and t = 1 (EAGLE-3) and t = 1 (EAGLE-1)
  ("top_k": p at the head's top-k; alpha: sum min(p, q)). Tolerance 1e-5 (float32 sums).
* Power: the same derivation with p one position early (an off-by-one in the alignment) is
  caught: its rows differ from the measured ones by more than 100 times the tolerance.
* The rows feed `optimal_tree` as a per-depth matrix.
* Bad input names the argument.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decoding import make_warper, optimal_tree
from specjax.models import EagleHead
from specjax.testing import tiny_llama
from specjax.training.head_acceptance import head_rank_acceptance

VOCAB = 23
RANKS, DEPTH = 3, 3
PROMPTS = (4, 7)


def _setup(layers):
    target, tp = tiny_llama(VOCAB, 2)
    head = EagleHead(target, feature_layers=layers)
    hp = head.with_target_columns(head.init_params(jax.random.PRNGKey(9)), tp)
    hp = jax.tree.map(lambda x: x * 3.0 if x.ndim == 2 else x, hp)  # a q far from uniform
    rng = np.random.default_rng(0)
    seqs = [
        rng.integers(1, VOCAB, 14).astype(np.int32),
        rng.integers(1, VOCAB, 19).astype(np.int32),
    ]
    return target, tp, head, hp, seqs


def _by_hand(target, tp, head, hp, seqs, warper, shift=0):
    """(top_k rows [DEPTH, RANKS], alpha [DEPTH]) from the drafter's call sequence."""
    sums, beta, counts = np.zeros((DEPTH, RANKS)), np.zeros(DEPTH), np.zeros(DEPTH)
    for seq, prompt in zip(seqs, PROMPTS, strict=True):
        size = len(seq)
        tokens = jnp.asarray(seq)[None]
        out = target.forward(tp, target.init_state(1, size), tokens, jnp.full((1,), size),
                             return_layers=head.feature_layers)  # fmt: skip
        feats = out.layers.reshape(1, size, -1) if head.feature_layers else out.hidden
        inputs = head.fuse_features(hp, feats[:, :-1])
        embeds = target.embed(tp, tokens[:, 1:])
        for s in range(prompt - 1, size - 2):  # chain starts: x_{s+1} generated
            cache = head.init_state(1, 64)
            # the true pairs 0..s (the whole row is fed, its first s + 1 pairs count: one shape)
            pred, cache = head.forward_features(hp, cache, inputs, embeds, jnp.full((1,), s + 1))
            feature = pred[:, s]
            for k in range(DEPTH):
                t = s + k
                if t + 2 > size - 1:
                    break
                q_logits = np.asarray(head.logits(tp, hp, feature))[0]
                p = np.asarray(warper.probs(out.logits[0, t + 1 - shift]))
                q = np.asarray(warper.probs(jnp.asarray(q_logits)))
                top = np.argsort(-q_logits, kind="stable")[:RANKS]
                sums[k] += p[top]
                beta[k] += np.minimum(p, q).sum()
                counts[k] += 1
                if t + 1 < size - 1:  # feed (own feature, the teacher token x_{t+2})
                    pred, cache = head.forward_features(
                        hp, cache, feature[:, None], embeds[:, t + 1][:, None], jnp.ones((1,))
                    )
                    feature = pred[:, 0]
    return sums / counts[:, None], beta / counts


@pytest.mark.parametrize(
    "layers, temperature",
    [((0, 1), 0.0), ((0, 1), 1.0), ((), 1.0)],
    ids=["eagle3-t0", "eagle3-t1", "eagle1-t1"],
)
def test_rows_equal_the_drafters_calls(layers, temperature):
    target, tp, head, hp, seqs = _setup(layers)
    warper = make_warper(temperature)
    got = head_rank_acceptance(head, hp, tp, seqs, PROMPTS, warper, ranks=RANKS, depth=DEPTH)
    rows, alpha = _by_hand(target, tp, head, hp, seqs, warper)
    measured = np.asarray(got["top_k"]["positional"])
    np.testing.assert_allclose(measured, rows, atol=1e-5)
    np.testing.assert_allclose(got["top_k"]["alpha"], alpha, atol=1e-5)
    starts = zip(seqs, PROMPTS, strict=True)
    lengths = [(len(s), p) for s, p in starts]
    want = [sum(max(0, n - 2 - (p - 1 + k)) for n, p in lengths) for k in range(DEPTH)]
    assert got["top_k"]["positions"] == want
    if temperature == 0.0:  # a greedy target accepts the top child or none: the rank-1 column
        np.testing.assert_allclose(measured[:, 0], alpha, atol=1e-6)
    # Power: p taken one position early is a different measurement.
    shifted, _ = _by_hand(target, tp, head, hp, seqs, warper, shift=1)
    assert float(np.abs(shifted - measured).max()) > 1e-3
    # The rows are a per-depth matrix for Sequoia's DP.
    tree = optimal_tree(measured, 6, max_depth=DEPTH)
    assert tree.num_nodes == 6 and tree.max_depth <= DEPTH


def test_bad_input_names_the_argument():
    target, tp, head, hp, seqs = _setup((0, 1))
    t0 = make_warper(0.0)
    with pytest.raises(ValueError, match="prompt_lengths"):
        head_rank_acceptance(head, hp, tp, seqs, (4,), t0)
    with pytest.raises(ValueError, match=r"prompt_lengths\[1\]"):
        head_rank_acceptance(head, hp, tp, seqs, (4, 19), t0)
    with pytest.raises(ValueError, match=r"sequences\[0\]"):
        head_rank_acceptance(head, hp, tp, [np.array([1, 2, VOCAB]), seqs[1]], PROMPTS, t0)
    with pytest.raises(ValueError, match="depth"):
        head_rank_acceptance(head, hp, tp, seqs, (11, 16), t0, depth=4)  # 3 tokens after x_P
    with pytest.raises(ValueError, match="depth"):
        head_rank_acceptance(head, hp, tp, seqs, PROMPTS, t0, depth=0)
    with pytest.raises(TypeError, match="rules"):
        head_rank_acceptance(head, hp, tp, seqs, PROMPTS, t0, rules="top_k")
    with pytest.raises(ValueError, match="rules"):
        head_rank_acceptance(head, hp, tp, seqs, PROMPTS, t0, rules=("typical",))
    with pytest.raises(ValueError, match="ranks"):
        head_rank_acceptance(head, hp, tp, seqs, PROMPTS, t0, ranks=VOCAB + 1)
    packed, packed_params = head.with_matmul(hp, "packed")
    with pytest.raises(ValueError, match="xla layout"):
        head_rank_acceptance(packed, packed_params, tp, seqs, PROMPTS, t0)
