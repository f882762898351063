"""Medusa heads as a draft: lossless in chains (with a reduced draft vocabulary) and in trees
(siblings with and without replacement), a planted misreported q caught, greedy = AR (chain and
top-k tree), clear errors; a tiny run trains, saves and loads them.

The target is test_eagle's tiny Llama (vocab 5 for the statistical checks). False-failure rate
of each `check_decoder` run: the kit's Bonferroni bound, 12 checks at 1e-6, about 1.2e-5. The
lossless runs put the two prompts side by side in every call (`mixed=True`: ragged rows).
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from decoding_setup import DRAFT_NAN, nan_params

from specjax import testing
from specjax.decoding import (
    AutoregressiveDecoder,
    HeuristicGamma,
    MedusaDrafter,
    MedusaTreeDrafter,
    SpeculativeDecoder,
    TokenTree,
    TreeSpeculativeDecoder,
    make_warper,
)
from specjax.models import MedusaHeads
from specjax.testing import tiny_llama

T1, T0 = make_warper(1.0), make_warper(0.0)
PROMPTS = ((2,), (1, 4, 3))


def _heads(vocab, draft_ids=None, seed=0):
    target, tp = tiny_llama(vocab, seed)
    heads = MedusaHeads(target, 4, draft_ids=draft_ids)
    hp = heads.with_target_columns(heads.init_params(jax.random.PRNGKey(3)), tp)
    # Random residual blocks: every head a different, far-from-p guess.
    keys = jax.random.split(jax.random.PRNGKey(seed + 11), 2)
    hp = dict(hp, w=0.5 * jax.random.normal(keys[0], hp["w"].shape),
              b=0.5 * jax.random.normal(keys[1], hp["b"].shape))  # fmt: skip
    return target, tp, heads, hp


@pytest.mark.runtime_bound  # tests/conftest.py: 2^14 rows per prompt; ~2-3 s faster at level 1
def test_medusa_chain_with_a_reduced_vocabulary_is_lossless():
    target, tp, heads, hp = _heads(5, draft_ids=(0, 2, 3))
    dec = SpeculativeDecoder(target, heads, 3, T1, cache_len=32)
    assert isinstance(dec.drafter, MedusaDrafter)
    report = testing.check_decoder(dec, tp, hp, draws=1 << 14, prompts=PROMPTS, mixed=True)
    print(report)
    assert report.passed


class _MisreportedQ(MedusaDrafter):
    """Planted bug: reports q^0.5 (renormalised) instead of the q its tokens were drawn from."""

    def propose(self, params, state, seq, key, gamma):
        proposal = super().propose(params, state, seq, key, gamma)
        flat = jnp.sqrt(proposal.probs)
        return proposal.replace(probs=flat / flat.sum(-1, keepdims=True))


@pytest.mark.runtime_bound  # tests/conftest.py: 2^14 rows per prompt; ~2-3 s faster at level 1
def test_a_misreported_q_is_caught():
    target, tp, heads, hp = _heads(5)
    dec = SpeculativeDecoder(target, _MisreportedQ(heads, T1), 3, T1, cache_len=32)
    report = testing.check_decoder(dec, tp, hp, draws=1 << 14, prompts=PROMPTS, greedy=False)
    print(report)
    assert not report.passed


@pytest.mark.runtime_bound  # as above
@pytest.mark.parametrize(
    "replacement, draft_ids",
    [(False, None), (False, (0, 2, 3)), (True, (0, 2, 3))],
    ids=["sequoia", "sequoia-reduced", "specinfer-reduced"],
)
def test_medusa_tree_is_lossless(replacement, draft_ids):
    """Children drawn from head d's q at every depth-d node (the tree's shape fixed first);
    with draft ids, drawn over those ids alone (the root's three siblings race inside them)."""
    target, tp, heads, hp = _heads(5, draft_ids=draft_ids)
    tree = TokenTree.from_branching((3, 2))
    dec = TreeSpeculativeDecoder(target, heads, tree, T1, replacement=replacement, cache_len=32)
    assert isinstance(dec.drafter, MedusaTreeDrafter)
    report = testing.check_decoder(dec, tp, hp, draws=1 << 14, prompts=PROMPTS, mixed=True)
    print(report)
    assert report.passed


def test_medusa_greedy_equals_autoregressive_and_errors():
    target, tp, heads, hp = _heads(23, seed=2)
    prompts = [np.array([1, 2, 3, 4, 5]), np.array([7]), np.array([3, 3, 9, 1])]
    key = jax.random.PRNGKey(0)
    ar = AutoregressiveDecoder(target, T0, cache_len=32).generate(
        tp, prompts=prompts, key=key, max_new_tokens=20
    )
    sp = SpeculativeDecoder(target, heads, 4, T0, cache_len=32).generate(
        tp, hp, prompts=prompts, key=key, max_new_tokens=20
    )
    for a, b in zip(ar.new_tokens(), sp.new_tokens(), strict=True):
        np.testing.assert_array_equal(a, b)
    # Refused when the decoder is built, not when it first runs (also under a gamma policy).
    with pytest.raises(ValueError, match="gamma=5 exceeds the 4 Medusa heads"):
        SpeculativeDecoder(target, heads, 5, T0, cache_len=32)
    with pytest.raises(ValueError, match="gamma=5 exceeds the 4 Medusa heads"):
        SpeculativeDecoder(target, heads, 5, T0, cache_len=32, gamma_policy=HeuristicGamma())
    with pytest.raises(ValueError, match="depth 5 exceeds the 4 Medusa heads"):
        TreeSpeculativeDecoder(target, heads, TokenTree.from_branching((2, 1, 1, 1, 1)), T0)
    tree = TreeSpeculativeDecoder(target, heads, TokenTree.from_branching((3, 2, 1)), T0,
                                  cache_len=48)  # fmt: skip
    assert isinstance(tree.drafter, MedusaTreeDrafter) and tree.drafter.deterministic
    # The tree drafter's gamma is its N - 1 = 15 nodes (not the chain's bound of 4 heads).
    tree.drafter.check_gamma(15)
    with pytest.raises(ValueError, match="proposes num_nodes - 1 = 15 tokens; got gamma=4"):
        tree.drafter.check_gamma(4)
    sp = tree.generate(tp, hp, prompts=prompts, key=key, max_new_tokens=20)
    for a, b in zip(ar.new_tokens(), sp.new_tokens(), strict=True):
        np.testing.assert_array_equal(a, b)
    # NaN heads are named (chain: NaN in the one-hot q; tree: top-k, no q), not just rejected.
    for decoder in (SpeculativeDecoder(target, heads, 4, T0, cache_len=32), tree):
        with pytest.raises(ValueError, match=DRAFT_NAN):
            decoder.generate(tp, nan_params(hp), prompts=prompts, key=key, max_new_tokens=20)
    with pytest.raises(ValueError, match="num_heads must be an integer >= 1"):
        MedusaHeads(target, 0)
    # With draft ids (drawn over them, mapped to token ids), chain and top-k tree alike.
    _, _, reduced, rp = _heads(23, draft_ids=(1, 2, 3, 5, 8, 13, 21), seed=2)
    for decoder in (
        SpeculativeDecoder(target, reduced, 4, T0, cache_len=32),
        TreeSpeculativeDecoder(
            target, reduced, TokenTree.from_branching((3, 2, 1)), T0, cache_len=48
        ),  # fmt: skip
    ):
        sp = decoder.generate(tp, rp, prompts=prompts, key=key, max_new_tokens=20)
        for a, b in zip(ar.new_tokens(), sp.new_tokens(), strict=True):
            np.testing.assert_array_equal(a, b)
        with pytest.raises(ValueError, match=DRAFT_NAN):
            decoder.generate(tp, nan_params(rp), prompts=prompts, key=key, max_new_tokens=20)


def test_a_tiny_medusa_run_trains_and_loads(tmp_path):
    from configs.heads import get_config
    from experiments.heads import train as heads_train
    from specjax.training.head_run import load_head

    config = get_config("tiny,medusa,steps=20")
    summary = heads_train.run(config, str(tmp_path / "m"))
    records = [json.loads(line) for line in open(tmp_path / "m" / "metrics.jsonl")]
    assert summary["steps"] == 20 and records[-1]["loss"] < records[0]["loss"]
    model, _ = heads_train.tiny_target()
    heads, params = load_head(str(tmp_path / "m"), model)
    assert isinstance(heads, MedusaHeads) and heads.num_heads == 4
    assert params["w"].shape == (4, 32, 32)
