"""Shared set-up of the feature-head tests: a tiny random Llama-shaped target."""

from __future__ import annotations

import jax

from specjax.models import TransformerConfig, TransformerLM


def tiny_llama(vocab: int, seed: int = 0, embed: int = 16):
    cfg = TransformerConfig(
        vocab_size=vocab, num_layers=2, num_heads=2, num_kv_heads=1, embed_dim=embed,
        mlp_dim=32, max_len=64, norm="rmsnorm", positions="rope", mlp="swiglu",
        tie_embeddings=True,
    )  # fmt: skip
    model = TransformerLM(cfg)
    params = model.init_params(jax.random.PRNGKey(seed))
    # Larger logits than the 0.02 init gives: a target law far from uniform.
    params = jax.tree.map(lambda x: x * 8.0 if x.ndim == 2 else x, params)
    return model, params
