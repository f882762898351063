"""Model-level tests: the transformer against a float64 NumPy reference, incremental decoding over
the explicit KV cache, GQA/MQA/MHA, RoPE, tied heads, logical axes and config validation."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models import TransformerConfig, TransformerLM
from specjax.models.kv_cache import init_kv_cache, rollback, write_rows
from specjax.models.layers import apply_rope, rope_frequencies

V = 32

GPT2 = TransformerConfig.gpt2(V, num_layers=2, embed_dim=32, num_heads=4, mlp_dim=64, max_len=32)
# Grouped-query attention: 4 query heads share 2 key/value heads.
LLAMA = TransformerConfig.llama(
    V, num_layers=2, embed_dim=32, num_heads=4, num_kv_heads=2, mlp_dim=64, max_len=32
)


def random_params(lm: TransformerLM, seed: int, scale: float = 0.3) -> dict:
    """Parameters with every entry drawn N(0, scale²) (norm scales around 1).

    The default init (std 0.02, zero biases, unit norm scales) makes the model nearly
    position- and context-blind; large random weights make every term of the forward pass matter,
    so a wrong mask, position or head grouping changes the logits visibly. Drawn with NumPy: one
    eager JAX op per parameter shape would compile a program each.
    """
    shapes = jax.eval_shape(lm.init_params, jax.random.PRNGKey(0))
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        noise = scale * rng.standard_normal(leaf.shape).astype(np.float32)
        is_scale = getattr(path[-1], "key", None) == "scale"
        return jnp.asarray(1.0 + noise if is_scale else noise)

    return jax.tree_util.tree_map_with_path(draw, shapes)


# -- float64 NumPy reference ---------------------------------------------------------------------


def _np(tree):
    return jax.tree.map(lambda x: np.asarray(x, np.float64), tree)


def _norm(cfg, p, x):
    if cfg.norm == "layernorm":
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + cfg.norm_eps) * p["scale"] + p["bias"]
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + cfg.norm_eps) * p["scale"]


def _dense(p, x, spec):
    out = np.einsum(spec, x, p["kernel"])
    return out + p["bias"] if "bias" in p else out


def _rope(x, positions, cfg):
    """x [T, heads, head_dim]; rotate-half convention, float64."""
    half = cfg.head_dim // 2
    inv_freq = 1.0 / cfg.rope_theta ** (np.arange(0, cfg.head_dim, 2) / cfg.head_dim)
    angles = positions[:, None] * inv_freq[None, :]  # [T, half]
    cos = np.concatenate([np.cos(angles)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(angles)] * 2, -1)[:, None, :]
    rotated = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def reference_logits(cfg: TransformerConfig, params: dict, tokens) -> np.ndarray:
    """A plain float64 forward pass over one full sequence (no cache). Returns [T, vocab]."""
    p = _np(params)
    tokens = np.asarray(tokens)
    t = len(tokens)
    positions = np.arange(t, dtype=np.float64)
    x = p["embed"]["embedding"][tokens]  # [T, embed]
    if cfg.positions == "learned":
        x = x + p["pos_embed"][:t]
    group = cfg.num_heads // cfg.num_kv_heads
    causal = np.tril(np.ones((t, t), bool))
    for i in range(cfg.num_layers):
        blk = p[f"block_{i}"]
        h = _norm(cfg, blk["attn_norm"], x)
        q = _dense(blk["attn"]["query"], h, "td,dhk->thk")  # [T, heads, head_dim]
        k = _dense(blk["attn"]["key"], h, "td,dhk->thk")  # [T, kv_heads, head_dim]
        v = _dense(blk["attn"]["value"], h, "td,dhk->thk")
        if cfg.positions == "rope":
            q, k = _rope(q, positions, cfg), _rope(k, positions, cfg)
        # Hugging Face's repeat_kv: kv head j serves query heads j*group .. (j+1)*group - 1.
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = np.einsum("thk,shk->hts", q, k) / np.sqrt(cfg.head_dim)
        scores = np.where(causal[None], scores, -np.inf)
        w = np.exp(scores - scores.max(-1, keepdims=True))
        w = w / w.sum(-1, keepdims=True)
        attn = np.einsum("hts,shk->thk", w, v)
        x = x + _dense(blk["attn"]["out"], attn, "thk,hkd->td")
        h = _norm(cfg, blk["mlp_norm"], x)
        if cfg.mlp == "swiglu":
            gate = _dense(blk["mlp"]["gate"], h, "td,dm->tm")
            hidden = gate / (1 + np.exp(-gate)) * _dense(blk["mlp"]["up"], h, "td,dm->tm")
        else:
            u = _dense(blk["mlp"]["up"], h, "td,dm->tm")
            hidden = 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u**3)))
        x = x + _dense(blk["mlp"]["down"], hidden, "tm,md->td")
    x = _norm(cfg, p["final_norm"], x)
    if cfg.tie_embeddings:
        return x @ p["embed"]["embedding"].T
    return x @ p["head"]["kernel"]


# -- helpers -------------------------------------------------------------------------------------

_apply = jax.jit(
    lambda lm, params, state, tokens, num_new: lm.apply(params, state, tokens, num_new),
    static_argnums=0,
)


def full_forward(lm, params, tokens, max_len=32):
    """Logits [batch, T, vocab] of a one-call prefill of `tokens` [batch, T] into a fresh cache."""
    tokens = jnp.asarray(tokens, jnp.int32)
    batch, t = tokens.shape
    state = lm.init_state(batch, max_len)
    logits, _ = _apply(lm, params, state, tokens, jnp.full((batch,), t, jnp.int32))
    return np.asarray(logits)


def _sequence(seed, length, vocab=V):
    return np.random.default_rng(seed).integers(0, vocab, size=length).astype(np.int32)


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def model(request):
    cfg = GPT2 if request.param == "gpt2" else LLAMA
    lm = TransformerLM(cfg)
    return lm, random_params(lm, seed=3)


# -- tests ---------------------------------------------------------------------------------------


def test_full_forward_matches_numpy_reference(model):
    lm, params = model
    tokens = _sequence(0, 12)
    ours = full_forward(lm, params, tokens[None])[0]
    ref = reference_logits(lm.config, params, tokens)
    assert np.abs(ref).max() > 1.0  # the check below is not trivially satisfied by tiny logits
    np.testing.assert_allclose(ours, ref, atol=2e-4, rtol=1e-4)


def test_incremental_decoding_equals_full_forward(model):
    """Prefill 5 tokens, then feed 1, then 4, then 2: every step's logits equal the full pass.

    Multi-token steps use one padded width of 5 (num_new says how many are real), as the decoders
    do; the 1-token step takes the separate one-token cache-write path.
    """
    lm, params = model
    tokens = _sequence(1, 12)  # [12]
    full = full_forward(lm, params, tokens[None])[0]  # [12, vocab]
    state = lm.init_state(1, 32)
    pos = 0
    for chunk in (5, 1, 4, 2):
        width = 1 if chunk == 1 else 5
        piece = np.full((1, width), V - 1, np.int32)
        piece[0, :chunk] = tokens[pos : pos + chunk]
        logits, state = _apply(lm, params, state, jnp.asarray(piece), jnp.array([chunk]))
        np.testing.assert_allclose(
            np.asarray(logits)[0, :chunk], full[pos : pos + chunk], atol=2e-5
        )
        pos += chunk
        assert int(state.lengths[0]) == pos


def test_ragged_num_new_per_row_and_padding_is_ignored(model):
    """Rows advance by their own num_new; padding tokens past num_new never leak into later steps
    (they are written past the row's length and overwritten/masked)."""
    lm, params = model
    a, b = _sequence(2, 6), _sequence(3, 6)
    # Step 1: row 0 takes 4 real tokens, row 1 takes 2 (its other 3 are junk padding).
    step1 = np.stack([np.concatenate([a[:4], [3]]), np.concatenate([b[:2], [V - 1, V - 2, 5]])])
    # Step 2: row 0 takes 1 real token, row 1 takes 3.
    step2 = np.stack([np.concatenate([a[4:5], [7, 7, 7, 7]]), np.concatenate([b[2:5], [1, 2]])])
    step1, step2 = step1.astype(np.int32), step2.astype(np.int32)  # [2, 5] each
    state = lm.init_state(2, 32)
    l1, state = _apply(lm, params, state, jnp.asarray(step1), jnp.array([4, 2], jnp.int32))
    l2, state = _apply(lm, params, state, jnp.asarray(step2), jnp.array([1, 3], jnp.int32))
    np.testing.assert_array_equal(state.lengths, [5, 5])
    ref0 = reference_logits(lm.config, params, a[:5])
    ref1 = reference_logits(lm.config, params, b[:5])
    l1, l2 = np.asarray(l1), np.asarray(l2)
    np.testing.assert_allclose(l1[0, :4], ref0[:4], atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(l2[0, :1], ref0[4:5], atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(l1[1, :2], ref1[:2], atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(l2[1, :3], ref1[2:5], atol=2e-4, rtol=1e-4)


def test_rollback_then_rewrite_equals_fresh_decode(model):
    """Feed 4 'draft' tokens, roll back 2 of them, feed others: as if never drafted."""
    lm, params = model
    prefix, drafted, actual = _sequence(4, 5), _sequence(5, 5), _sequence(6, 5)
    state = lm.init_state(1, 32)
    _, state = _apply(lm, params, state, jnp.asarray(prefix[None]), jnp.array([5], jnp.int32))
    _, state = _apply(lm, params, state, jnp.asarray(drafted[None]), jnp.array([4], jnp.int32))
    state = rollback(state, jnp.array([7]))  # keep drafted[:2]
    seq = np.concatenate([prefix, drafted[:2], actual])  # [12]
    logits, state = _apply(lm, params, state, jnp.asarray(actual[None]), jnp.array([5]))
    ref = reference_logits(lm.config, params, seq)
    np.testing.assert_allclose(np.asarray(logits)[0], ref[7:12], atol=2e-4, rtol=1e-4)
    # The cache itself equals a fresh prefill of the final sequence at the valid positions.
    fresh = lm.init_state(1, 32)
    _, fresh = _apply(lm, params, fresh, jnp.asarray(seq[None]), jnp.array([12]))
    for mine, theirs in zip(state.keys + state.values, fresh.keys + fresh.values, strict=True):
        np.testing.assert_allclose(mine[:, :12], theirs[:, :12], atol=1e-5)


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_gqa_mqa_mha_shapes_and_equivalence_to_repeated_heads(num_kv_heads):
    """GQA/MQA equal multi-head attention whose k/v projections are repeated per group."""
    cfg = dataclasses.replace(LLAMA, num_layers=1, num_kv_heads=num_kv_heads)
    lm = TransformerLM(cfg)
    params = random_params(lm, seed=num_kv_heads)
    attn = params["block_0"]["attn"]
    assert attn["query"]["kernel"].shape == (32, 4, 8)
    assert attn["key"]["kernel"].shape == (32, num_kv_heads, 8)
    assert attn["value"]["kernel"].shape == (32, num_kv_heads, 8)
    state = lm.init_state(3, 16)
    assert state.keys[0].shape == (3, 16, num_kv_heads, 8)

    mha = TransformerLM(dataclasses.replace(cfg, num_kv_heads=4))
    group = 4 // num_kv_heads
    mha_params = jax.tree.map(lambda x: x, params)
    for name in ("key", "value"):
        kernel = params["block_0"]["attn"][name]["kernel"]
        mha_params["block_0"]["attn"][name] = {"kernel": jnp.repeat(kernel, group, axis=1)}
    tokens = _sequence(7, 9)[None]
    np.testing.assert_allclose(
        full_forward(lm, params, tokens, 16), full_forward(mha, mha_params, tokens, 16), atol=2e-5
    )


def test_rope_rotation_matches_hand_computation_and_is_relative():
    cfg = TransformerConfig.llama(V, embed_dim=8, num_heads=2, mlp_dim=8)  # head_dim 4
    inv_freq = rope_frequencies(cfg)
    np.testing.assert_allclose(inv_freq, [1.0, 0.01], rtol=1e-6)  # 10000 ** -(0, 2)/4
    x = jnp.array([1.0, 2.0, 3.0, 4.0]).reshape(1, 1, 1, 4)
    out = np.asarray(apply_rope(x, jnp.array([[3]]), inv_freq))[0, 0, 0]
    # Rotate-half: pairs (x0, x2) by angle 3 * 1, (x1, x3) by angle 3 * 0.01.
    c0, s0, c1, s1 = np.cos(3.0), np.sin(3.0), np.cos(0.03), np.sin(0.03)
    expected = [1 * c0 - 3 * s0, 2 * c1 - 4 * s1, 3 * c0 + 1 * s0, 4 * c1 + 2 * s1]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    # <rope(q, m), rope(k, n)> depends only on m - n.
    q, k = jax.random.normal(jax.random.PRNGKey(0), (2, 1, 1, 1, 4))

    def dot(m, n):
        return float(
            jnp.sum(
                apply_rope(q, jnp.array([[m]]), inv_freq)
                * apply_rope(k, jnp.array([[n]]), inv_freq)
            )
        )

    assert dot(7, 2) == pytest.approx(dot(15, 10), abs=1e-5)
    assert dot(7, 2) != pytest.approx(dot(7, 3), abs=1e-3)


def test_learned_positions_vs_rope_parameters():
    learned = jax.eval_shape(TransformerLM(GPT2).init_params, jax.random.PRNGKey(0))
    rope = jax.eval_shape(TransformerLM(LLAMA).init_params, jax.random.PRNGKey(0))
    assert learned["pos_embed"].shape == (32, 32)
    assert "pos_embed" not in rope
    # A learned-position model cannot address positions past its table.
    with pytest.raises(ValueError, match="max_len"):
        TransformerLM(GPT2).init_state(1, 33)
    TransformerLM(LLAMA).init_state(1, 64)  # RoPE has no table: any cache length works
    # A table shorter than the cache that initialisation traces with still initialises, with
    # the same values a longer table's model draws for its other parameters.
    short = TransformerLM(dataclasses.replace(GPT2, max_len=4))
    params = short.init_params(jax.random.PRNGKey(3))
    assert params["pos_embed"].shape == (4, 32) and short.logical_axes()["pos_embed"] is not None
    full = TransformerLM(GPT2).init_params(jax.random.PRNGKey(3))
    np.testing.assert_array_equal(params["embed"]["embedding"], full["embed"]["embedding"])


def test_tied_vs_untied_head():
    tied_cfg = dataclasses.replace(LLAMA, tie_embeddings=True, num_layers=1)
    untied_cfg = dataclasses.replace(LLAMA, tie_embeddings=False, num_layers=1)
    tied = random_params(TransformerLM(tied_cfg), seed=5)
    untied = random_params(TransformerLM(untied_cfg), seed=5)
    assert "head" not in tied and untied["head"]["kernel"].shape == (32, V)
    # An untied head equal to the embedding's transpose computes the tied model.
    untied = dict(untied, head={"kernel": tied["embed"]["embedding"].T})
    untied.update({k: v for k, v in tied.items() if k != "head"})
    tokens = _sequence(8, 7)[None]
    np.testing.assert_allclose(
        full_forward(TransformerLM(tied_cfg), tied, tokens),
        full_forward(TransformerLM(untied_cfg), untied, tokens),
        atol=1e-5,
    )


@pytest.mark.parametrize(
    "cfg",
    [
        GPT2,
        LLAMA,
        dataclasses.replace(LLAMA, tie_embeddings=True, qkv_bias=True, num_kv_heads=1),
        dataclasses.replace(GPT2, head_dim=16, num_heads=2, num_kv_heads=2, tie_embeddings=False),
    ],
    ids=["gpt2", "llama_gqa", "qwen_like_mqa", "gpt2_untied_head_dim"],
)
def test_logical_axes_on_every_param_and_param_count(cfg):
    lm = TransformerLM(cfg)
    params = jax.eval_shape(lm.init_params, jax.random.PRNGKey(0))
    axes = lm.logical_axes()
    assert jax.tree.structure(params) == jax.tree.structure(
        axes, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec)
    )
    vocabulary = {"vocab", "embed", "mlp", "heads", "kv_heads", "kv", None}
    flat_params = jax.tree_util.tree_leaves_with_path(params)
    flat_axes = jax.tree.leaves(axes, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
    for (path, leaf), spec in zip(flat_params, flat_axes, strict=True):
        assert isinstance(spec, jax.sharding.PartitionSpec), path
        assert len(spec) == leaf.ndim, (path, spec, leaf.shape)
        assert set(spec) <= vocabulary, (path, spec)
        assert any(a is not None for a in spec), path
    assert sum(np.prod(x.shape) for x in jax.tree.leaves(params)) == cfg.num_params()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(vocab_size=0), "vocab_size"),
        (dict(num_layers=0), "num_layers"),
        (dict(num_heads=4, num_kv_heads=3), "num_kv_heads"),
        (dict(embed_dim=30, num_heads=4), "divisible"),
        (dict(norm="batchnorm"), "norm"),
        (dict(positions="alibi"), "positions"),
        (dict(mlp="relu"), "mlp"),
        (dict(positions="rope", num_heads=1, embed_dim=7), "even head_dim"),
        (dict(num_heads=2.0), "num_heads"),
        (dict(max_len=0), "max_len must be an integer >= 1"),
        (dict(head_dim=0), "head_dim must be an integer >= 1"),
        (dict(norm_eps=float("nan")), "norm_eps must be finite and > 0"),
        (dict(positions="rope", rope_theta=0.0), "rope_theta must be finite and > 0"),
    ],
)
def test_config_validation_errors(kwargs, match):
    base = dict(vocab_size=V, embed_dim=32, num_heads=4, mlp_dim=32)
    base.update(kwargs)
    with pytest.raises(ValueError, match=match):
        TransformerConfig(**base)


def test_unknown_dtype_and_bad_token_rank_raise():
    with pytest.raises(TypeError):
        TransformerConfig(vocab_size=V, dtype="float33")
    lm = TransformerLM(GPT2)
    params = random_params(lm, 0)
    with pytest.raises(ValueError, match="tokens"):
        lm.apply(params, lm.init_state(1, 8), jnp.zeros((3,), jnp.int32), jnp.ones((1,), jnp.int32))


def test_bfloat16_compute_returns_float32_logits_close_to_float32():
    cfg = dataclasses.replace(LLAMA, dtype="bfloat16", num_layers=1)
    lm16, lm32 = TransformerLM(cfg), TransformerLM(dataclasses.replace(cfg, dtype="float32"))
    params = random_params(lm32, 0, scale=0.1)
    tokens = _sequence(9, 8)[None]
    out16 = full_forward(lm16, params, tokens)
    assert out16.dtype == np.float32
    assert lm16.init_state(1, 8).keys[0].dtype == jnp.bfloat16
    np.testing.assert_allclose(out16, full_forward(lm32, params, tokens), atol=3e-2)


def test_write_rows_hand_written():
    buffer = jnp.zeros((2, 5), jnp.int32)
    new = jnp.array([[1, 2, 3], [4, 5, 6]])
    # Row 0 writes at 1..3; row 1 at 3..5, where position 5 falls off the end and is dropped.
    out = write_rows(buffer, new, jnp.array([1, 3]))
    np.testing.assert_array_equal(out, [[0, 1, 2, 3, 0], [0, 0, 0, 4, 5]])
    one = write_rows(out, jnp.array([[9], [8]]), jnp.array([0, 4]))  # the one-token path
    np.testing.assert_array_equal(one, [[9, 1, 2, 3, 0], [0, 0, 0, 4, 8]])
    cache = init_kv_cache(2, 3, 6, 2, 4)
    assert len(cache.keys) == 2 and cache.keys[0].shape == (3, 6, 2, 4)
    assert cache.max_len == 6 and cache.batch == 3
    np.testing.assert_array_equal(rollback(cache, jnp.array([1, 2, 3])).lengths, [1, 2, 3])


def test_config_replace_rederives_derived_fields():
    base = TransformerConfig.gpt2(32, num_heads=4, embed_dim=64)
    wider = base.replace(num_heads=8)
    # num_kv_heads and head_dim were derived, so they follow the new num_heads.
    assert (wider.num_kv_heads, wider.head_dim) == (8, 8)
    assert wider == TransformerConfig.gpt2(32, num_heads=8, embed_dim=64)
    # Explicit values survive a replace of an unrelated field.
    gqa = TransformerConfig.llama(32, num_heads=4, num_kv_heads=2, head_dim=8, embed_dim=64)
    deeper = gqa.replace(num_layers=3)
    assert (deeper.num_kv_heads, deeper.head_dim, deeper.num_layers) == (2, 8, 3)
    assert hash(base.replace()) == hash(base) and base.replace() == base
