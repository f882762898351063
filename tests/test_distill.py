"""Distillation: exact objectives, gradients only through the draft, and a tiny pair whose
total variation shrinks."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.alpha import measure_alpha
from specjax.data.tokenizer import VOCAB_SIZE
from specjax.decoding import make_warper
from specjax.models import TransformerConfig, TransformerLM
from specjax.training.distill import distill_loss, divergence, make_distill_step
from specjax.training.optim import make_optimizer
from specjax.training.steps import init_train_state

P = jnp.log(jnp.array([[[0.25, 0.75]]]))  # [1, 1, 2]
Q = jnp.log(jnp.array([[[0.5, 0.5]]]))


@pytest.mark.parametrize(
    "objective, expected",
    [
        ("tv", 0.25),
        ("kl", 0.25 * math.log(0.5) + 0.75 * math.log(1.5)),
        ("tv_kl", 0.25 + 0.1 * (0.25 * math.log(0.5) + 0.75 * math.log(1.5))),
        ("greedy", math.log(2.0)),
    ],
)
def test_divergences_of_hand_written_distributions(objective, expected):
    np.testing.assert_allclose(divergence(P, Q, objective), [[expected]], rtol=1e-6)


def test_temperature_and_bad_arguments():
    # Temperature 2 on log(0.25), log(0.75): p ~ sqrt(.25), sqrt(.75) normalised.
    p_hot = np.sqrt([0.25, 0.75]) / np.sqrt([0.25, 0.75]).sum()
    np.testing.assert_allclose(divergence(P, Q, "tv", 2.0), [[0.5 - p_hot[0]]], rtol=1e-6)
    with pytest.raises(ValueError, match="objective"):
        divergence(P, Q, "js")
    with pytest.raises(ValueError, match="temperature"):
        divergence(P, Q, "tv", 0.0)


def _pair():
    cfg = TransformerConfig.gpt2(
        VOCAB_SIZE, num_layers=1, num_heads=2, embed_dim=16, mlp_dim=32, max_len=32
    )
    target = TransformerLM(cfg)
    draft = TransformerLM(
        dataclasses.replace(
            cfg, embed_dim=8, num_heads=1, num_kv_heads=1, mlp_dim=16, head_dim=None
        )
    )
    # Scaled-up random weights make the target's distributions peaky (far from the draft's
    # near-uniform start), so there is a gap to close.
    tparams = jax.tree.map(lambda x: 5 * x, target.init_params(jax.random.PRNGKey(0)))
    return target, tparams, draft, draft.init_params(jax.random.PRNGKey(1))


def test_gradient_flows_only_through_the_draft():
    target, tparams, draft, dparams = _pair()
    inputs = jax.random.randint(jax.random.PRNGKey(3), (2, 8), 0, 256)
    grads = jax.jit(jax.grad(lambda p: distill_loss(p, inputs, draft, target)[0]))(
        {"draft": dparams, "target": tparams}
    )
    assert all(float(jnp.abs(g).max()) == 0.0 for g in jax.tree.leaves(grads["target"]))
    assert any(float(jnp.abs(g).max()) > 0.0 for g in jax.tree.leaves(grads["draft"]))


def test_distillation_reduces_total_variation_on_a_tiny_pair():
    # 80 TV-distillation steps on random byte windows; held-out windows' mean TV at t=1 must
    # fall by at least 0.05 (from 0.670 to 0.556 here: 0.114, 2.3x the bound). Six other batch
    # streams (keys 1100 + i, ..., 5100 + i) gave 0.104 to 0.121, and the same run without
    # learning (peak_lr 1e-12) 0.000, so the bound separates training from no training by a
    # margin the data order does not erode. (0.08 was within 1.5x of what the tiny draft can
    # reach: lr 3e-2 or 1e-1 still stops at 0.13 to 0.15.) Deterministic seeds.
    target, tparams, draft, dparams = _pair()
    tx = make_optimizer(80, peak_lr=1e-2, warmup_steps=5)
    state = init_train_state(dparams, tx)
    step = jax.jit(make_distill_step(draft, target, tx, "tv"))
    held_out = jax.random.randint(jax.random.PRNGKey(99), (8, 16), 0, 256)

    def tv(params):
        return 1.0 - float(
            measure_alpha(target, tparams, draft, params, held_out, make_warper(1)).mean()
        )

    before = tv(dparams)
    for i in range(80):
        batch = jax.random.randint(jax.random.PRNGKey(100 + i), (8, 17), 0, 256)
        state, metrics = step(state, batch, tparams)
    after = tv(state.params)
    assert jax.tree.structure(state.params) == jax.tree.structure(dparams)
    assert after < before - 0.05, (before, after)
    assert 0.0 <= float(metrics["tv"]) <= 1.0
