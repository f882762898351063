"""Every attention implementation equals the "xla" reference (today's einsum over the buffer).

Kernel level (`specjax.models.attention_kernels`) for prefill, one-token decode, γ+1 chain
verification, a random token-tree mask, ragged rows, MHA/GQA/MQA, block sizes that do not divide
the buffer and a row at cache length 0; model level for learned positions (GPT-2) and RoPE
(Llama, GQA), bf16 included; the blockwise loop's trip count is traced (no recompilation as the
sequence grows), and its derivatives (its custom JVP) equal xla's under jit, kernel and model
level, never read stale slots, and vanish on a query row that sees nothing; config validation.

Tolerances: the largest |blockwise - xla| and |dot_product_attention - xla| measured over these
cases (kernels with seeds 0-2, the reference jitted as here) was 1.1e-6 for float32 kernel
outputs (values up to ~3; 1.7e-6 against the reference run op by op), 7.2e-7 for float32 model
logits (up to ~2.2) and 0.0117 for bf16 model logits against bf16 "xla" (about one bf16 ulp at
2; 0.0195 with the earlier params); the bounds below are at least twice those. Blockwise's
gradients against xla's (q, k and v; the four differentiated cases with seeds 0-3, under jit):
0 apart, as its rule is xla's derivative; they are held to KERNEL_TOL all the same.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.checkpoint import model_config_from_dict, model_config_to_dict
from specjax.models import TransformerConfig, TransformerLM
from specjax.models import attention_kernels as ak
from specjax.models.interface import causal_mask, chain_positions

KERNEL_TOL = 4e-6
LOGITS_TOL = 3e-6
BF16_TOL = 0.05
MAX_LEN = 70  # not a multiple of any block size below

OTHERS = {
    "blockwise": lambda *a: ak.blockwise_attention(*a, block=16),
    "dot_product_attention": ak.dot_product_attention,
}
# The reference and the kernels called outside a test's own jit, as one program each (called
# op by op they cost a compilation per op and shape: most of this file's time).
XLA = jax.jit(ak.xla_attention)
BLOCKWISE = jax.jit(ak.blockwise_attention, static_argnames="block")
CHAIN_MASK = jax.jit(
    lambda starts, t: causal_mask(chain_positions(starts, t), MAX_LEN), static_argnums=1
)


def _inputs(starts, t, kv_heads, group, seed=0, tree=False, head_dim=8):
    """Random q and cache; the cache past each row's live slots holds garbage (stale entries)."""
    rng = np.random.default_rng(seed)
    starts = np.asarray(starts, np.int32)
    batch = starts.shape[0]
    q = jnp.asarray(rng.normal(size=(batch, t, kv_heads, group, head_dim)), jnp.float32)
    k = jnp.asarray(3 * rng.normal(size=(batch, MAX_LEN, kv_heads, head_dim)), jnp.float32)
    v = jnp.asarray(rng.normal(size=(batch, MAX_LEN, kv_heads, head_dim)), jnp.float32)
    if tree:
        # Node i's parent is a random earlier node; it sees the context and its ancestors.
        parents = [-1] + [int(rng.integers(0, i)) for i in range(1, t)]
        anc = np.eye(t, dtype=bool)
        for i in range(1, t):
            anc[i] |= anc[parents[i]]
        slots = np.arange(MAX_LEN)[None, None, :]
        node = slots - np.asarray(starts)[:, None, None]  # [batch, 1, max_len]
        in_tree = (node >= 0) & (node < t)
        seen = np.take_along_axis(
            np.broadcast_to(anc[None], (batch, t, t)),
            np.clip(node, 0, t - 1).repeat(t, axis=1),
            axis=2,
        )
        mask = jnp.asarray((node < 0) | (in_tree & seen))
    else:
        mask = CHAIN_MASK(starts, t)
    return q, k, v, mask, jnp.asarray(starts + t)


CASES = {
    # name: (starts per row, T, kv_heads, group)
    "prefill": ([0, 0], 24, 2, 2),
    "decode": ([37, 5], 1, 2, 2),
    "verify_gamma4": ([40, 63], 5, 2, 2),
    "ragged_mha": ([0, 17, 31, 64], 6, 4, 1),
    "mqa": ([12, 50], 3, 1, 4),
    "cache_len_0_row": ([0, 33], 2, 2, 2),
    "full_buffer": ([0], MAX_LEN, 2, 2),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_kernels_equal_xla_on_chains(case):
    starts, t, kv, group = CASES[case]
    args = _inputs(starts, t, kv, group)
    ref = XLA(*args)
    for name, fn in OTHERS.items():
        out = jax.jit(fn)(*args)
        assert out.shape == ref.shape and out.dtype == ref.dtype, name
        np.testing.assert_allclose(out, ref, atol=KERNEL_TOL, rtol=0, err_msg=name)


def test_kernels_equal_xla_on_a_random_tree_mask():
    args = _inputs([3, 41], 9, 2, 2, seed=1, tree=True)
    mask = np.asarray(args[3])
    assert not (mask[:, 1:, :] == mask[:, :1, :]).all()  # the mask is a tree, not a chain
    ref = XLA(*args)
    for name, fn in OTHERS.items():
        np.testing.assert_allclose(jax.jit(fn)(*args), ref, atol=KERNEL_TOL, rtol=0, err_msg=name)


@pytest.mark.parametrize("block", [7, 32])
def test_blockwise_block_sizes_that_do_not_divide_the_buffer(block):
    for starts, t in (([0, 3], 24), ([37, 66], 4)):
        args = _inputs(starts, t, 2, 2, seed=block)
        out = BLOCKWISE(*args, block=block)
        np.testing.assert_allclose(out, XLA(*args), atol=KERNEL_TOL, rtol=0)


def test_blockwise_reads_no_block_past_the_longest_row():
    # The longest row has 23 live slots: with block 16 only blocks 0 and 1 (slots 0..31) are
    # read, so NaN in every later slot changes nothing.
    q, k, v, mask, lengths = _inputs([5, 20], 3, 2, 2)
    assert int(lengths.max()) == 23
    read = np.arange(MAX_LEN)[None, :, None, None] < 32
    k_nan, v_nan = (np.where(read, x, np.nan).astype(np.float32) for x in (k, v))
    out = BLOCKWISE(q, k_nan, v_nan, mask, lengths, block=16)
    ref = XLA(q, k, v, mask)
    np.testing.assert_allclose(out, ref, atol=KERNEL_TOL, rtol=0)
    # Control: the xla path reads the whole buffer, so the NaNs reach it.
    assert np.isnan(np.asarray(XLA(q, k_nan, v_nan, mask))).any()


def test_blockwise_row_without_visible_slots_in_a_block_is_not_nan():
    # Row 1's queries see only slots 50.. : its first blocks are all hidden.
    q, k, v, mask, lengths = _inputs([0, 50], 2, 2, 2)
    mask = np.asarray(mask).copy()
    mask[1, :, :50] = False
    out = BLOCKWISE(q, k, v, mask, lengths, block=16)
    assert np.isfinite(np.asarray(out)).all()
    np.testing.assert_allclose(out, XLA(q, k, v, mask), atol=KERNEL_TOL, rtol=0)


def test_blockwise_buffers_of_two_blocks_take_the_xla_path():
    # Control for the NaN test below: with block 35 (70 = two blocks) every slot is read.
    q, k, v, mask, lengths = _inputs([5, 20], 3, 2, 2)
    k_nan, v_nan = (np.asarray(x).copy() for x in (k, v))
    k_nan[:, 40:] = v_nan[:, 40:] = np.nan
    out = BLOCKWISE(q, k_nan, v_nan, mask, lengths, block=35)
    assert np.isnan(np.asarray(out)).any()


def test_blockwise_is_differentiable_on_full_buffer_calls():
    # Training scores a whole buffer (T == max_len): that takes the xla path, so reverse mode
    # works (it cannot go through the traced-bound loop).
    q, k, v, mask, lengths = _inputs([0], MAX_LEN, 2, 2)
    grads = [
        jax.jit(jax.grad(lambda q, fn=fn: (fn(q, k, v, mask, lengths) ** 2).sum()))(q)
        for fn in (OTHERS["blockwise"], ak.xla_attention)
    ]
    np.testing.assert_allclose(grads[0], grads[1], atol=KERNEL_TOL, rtol=0)
    assert np.abs(np.asarray(grads[1])).max() > 0


def _weighted_loss(fn, mask, lengths, seed=7):
    """(q, k, v) -> sum(w * attention): its gradient is attention's VJP of a fixed random w."""

    def loss(q, k, v):
        out = fn(q, k, v, mask, lengths)
        w = jax.random.normal(jax.random.PRNGKey(seed), out.shape, out.dtype)
        return (w * out).sum()

    return loss


@pytest.mark.parametrize("case", ["decode", "verify_gamma4", "ragged_mha", "tree"])
def test_blockwise_is_differentiable_on_partial_buffers(case):
    # T < max_len and more than two blocks: the traced-bound loop, which reverse mode cannot go
    # through (before its custom JVP, jax.grad raised here). Its derivatives are xla's, in
    # reverse and forward mode, for q, k and v.
    if case == "tree":
        q, k, v, mask, lengths = _inputs([3, 41], 9, 2, 2, seed=1, tree=True)
    else:
        starts, t, kv, group = CASES[case]
        q, k, v, mask, lengths = _inputs(starts, t, kv, group, seed=3)
    grads = [
        jax.jit(jax.grad(_weighted_loss(fn, mask, lengths), argnums=(0, 1, 2)))(q, k, v)
        for fn in (OTHERS["blockwise"], ak.xla_attention)
    ]
    for got, want, name in zip(*grads, "qkv", strict=True):
        assert np.abs(np.asarray(want)).max() > 0.1, name
        np.testing.assert_allclose(got, want, atol=KERNEL_TOL, rtol=0, err_msg=name)
    rng = np.random.default_rng(4)
    tangents = tuple(rng.normal(size=x.shape).astype(np.float32) for x in (q, k, v))

    def jvp(fn):
        return jax.jit(
            lambda *a: jax.jvp(lambda q, k, v: fn(q, k, v, mask, lengths), a, tangents)[1]
        )

    jvps = [jvp(fn)(q, k, v) for fn in (OTHERS["blockwise"], ak.xla_attention)]
    np.testing.assert_allclose(jvps[0], jvps[1], atol=KERNEL_TOL, rtol=0)


def test_blockwise_gradient_ignores_stale_slots():
    # NaN in every slot past the longest row (23 live slots) and in row 0's slots past its own
    # 8: the output never reads them, nor may the gradient. Control: xla's gradient does.
    q, k, v, mask, lengths = _inputs([5, 20], 3, 2, 2)
    slot = np.arange(MAX_LEN)[None, :, None, None]
    stale = slot >= np.asarray(lengths)[:, None, None, None]  # [batch, max_len, 1, 1]
    k_nan, v_nan = (np.where(stale, np.nan, x).astype(np.float32) for x in (k, v))
    blockwise = _weighted_loss(OTHERS["blockwise"], mask, lengths)
    grad = jax.jit(jax.grad(blockwise, argnums=(0, 1, 2)))  # traced lengths, as in training
    got, want = grad(q, k_nan, v_nan), grad(q, k, v)
    for g, w, name in zip(got, want, "qkv", strict=True):
        assert np.isfinite(np.asarray(g)).all(), name
        np.testing.assert_allclose(g, w, atol=KERNEL_TOL, rtol=0, err_msg=name)
    assert not np.asarray(got[1])[np.asarray(stale[..., 0, 0])].any()  # no gradient into them
    control = jax.jit(jax.grad(_weighted_loss(ak.xla_attention, mask, lengths)))(q, k_nan, v_nan)
    assert np.isnan(np.asarray(control)).any()


def test_blockwise_row_that_sees_nothing_has_zero_output_and_gradient():
    # Row 1's second query sees no slot: blockwise's output there is 0 whatever q, k, v, so its
    # derivative is 0 too (xla's uniform average over the buffer is not: the control).
    q, k, v, mask, lengths = _inputs([0, 50], 2, 2, 2)
    mask = np.asarray(mask).copy()
    mask[1, 1, :] = False
    out = np.asarray(BLOCKWISE(q, k, v, mask, lengths, block=16))
    assert not out[1, 1].any()
    w = np.zeros(out.shape, np.float32)
    w[1, 1] = 1.0  # a loss that reads only that row

    def loss(fn):
        return lambda q, k, v: (w * fn(q, k, v, mask, lengths)).sum()

    got = jax.jit(jax.grad(loss(OTHERS["blockwise"]), argnums=(0, 1, 2)))(q, k, v)
    assert not any(np.asarray(g).any() for g in got)
    control = jax.jit(jax.grad(loss(ak.xla_attention), argnums=2))(q, k, v)
    assert np.abs(np.asarray(control)).max() > 0


def test_blockwise_trip_count_is_traced():
    traces = []

    @jax.jit
    def run(q, k, v, mask, lengths):
        traces.append(1)
        return ak.blockwise_attention(q, k, v, mask, lengths, block=16)

    for starts in ([3, 9], [60, 2]):  # one and four blocks: the same program
        args = _inputs(starts, 2, 2, 2)
        np.testing.assert_allclose(run(*args), XLA(*args), atol=KERNEL_TOL, rtol=0)
    assert len(traces) == 1


def _lm(family, attention, dtype="float32"):
    make = TransformerConfig.gpt2 if family == "gpt2" else TransformerConfig.llama
    kv = {"gpt2": 4, "llama": 2}[family]  # Llama: grouped-query attention
    cfg = make(
        64,
        num_layers=2,
        embed_dim=32,
        num_heads=4,
        num_kv_heads=kv,
        mlp_dim=64,
        max_len=MAX_LEN,
        dtype=dtype,
        attention=attention,
        attention_block=16,
    )
    return TransformerLM(cfg)


def _model_and_inputs(family, attention, dtype, prompt_len):
    """A model with random params (the same for every attention), a [2, prompt_len] prompt and
    a [2, 5] verification step."""
    lm = _lm(family, attention, dtype)
    rng = np.random.default_rng(1)  # drawn on the host: no program per parameter shape
    params = jax.tree.map(
        lambda x: jnp.asarray(0.3 * rng.standard_normal(x.shape), x.dtype),
        jax.eval_shape(lm.init_params, jax.random.PRNGKey(0)),
    )
    rng = np.random.default_rng(2)
    prompt = jnp.asarray(rng.integers(0, 64, (2, prompt_len)), jnp.int32)
    step = jnp.asarray(rng.integers(0, 64, (2, 5)), jnp.int32)
    return lm, params, prompt, step


def _model_outputs(family, attention, dtype):
    """Logits of a ragged 20-token prefill (row 1 keeps 13) and a 5-token verification."""
    lm, params, prompt, step = _model_and_inputs(family, attention, dtype, 20)
    apply = jax.jit(lm.apply)
    state = lm.init_state(2, MAX_LEN)
    first, state = apply(params, state, prompt, jnp.array([20, 13], jnp.int32))
    second, _ = apply(params, state, step, jnp.array([5, 5], jnp.int32))
    return first[:, :13], second


@pytest.mark.parametrize(
    "family, dtype", [("gpt2", "float32"), ("llama", "float32"), ("llama", "bfloat16")]
)
def test_models_equal_xla_prefill_then_verify(family, dtype):
    tol = LOGITS_TOL if dtype == "float32" else BF16_TOL
    ref = _model_outputs(family, "xla", dtype)
    # dot_product_attention at model level once (its kernel is checked on every case above).
    names = ("blockwise", "dot_product_attention") if family == "gpt2" else ("blockwise",)
    for name in names:
        for got, want in zip(_model_outputs(family, name, dtype), ref, strict=True):
            np.testing.assert_allclose(got, want, atol=tol, rtol=0, err_msg=name)


def _verification_grads(attention):
    """Gradient w.r.t. the params of a 5-token verification scored after a 40-token prefill
    (row 1 keeps 33): T < max_len, so blockwise attention runs its loop (70 > 2 x 16 slots)."""
    lm, params, prompt, step = _model_and_inputs("llama", attention, "float32", 40)
    _, state = jax.jit(lm.apply)(
        params, lm.init_state(2, MAX_LEN), prompt, jnp.array([40, 33], jnp.int32)
    )

    def loss(p):
        logits, _ = lm.apply(p, state, step, jnp.array([5, 5], jnp.int32))
        return jax.nn.logsumexp(logits, -1).sum()

    return jax.jit(jax.grad(loss))(params)


def test_model_gradient_through_a_cache_equals_xlas():
    # Training through a cached model call on the CPU's default attention (a draft head's
    # training-time test, a fine-tune of a verification): measured 1.8e-7 apart from xla's
    # gradient (entries up to 0.73), held to LOGITS_TOL.
    got, want = _verification_grads("blockwise"), _verification_grads("xla")
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, w, atol=LOGITS_TOL, rtol=0)
    assert max(float(jnp.abs(w).max()) for w in jax.tree.leaves(want)) > 0.1


def test_config_validates_attention_fields():
    with pytest.raises(ValueError, match="attention"):
        TransformerConfig(vocab_size=8, attention="flash")
    for bad in (0, True, 2.0):
        with pytest.raises(ValueError, match="attention_block"):
            TransformerConfig(vocab_size=8, attention_block=bad)
    with pytest.raises(ValueError, match="attention"):
        ak.resolve("pallas")


def test_configs_saved_without_attention_load_as_auto():
    saved = model_config_to_dict(TransformerConfig(vocab_size=8, attention="blockwise"))
    assert saved["attention"] == "blockwise"
    old = {k: v for k, v in saved.items() if not k.startswith("attention")}
    cfg = model_config_from_dict(old)
    assert (cfg.attention, cfg.attention_block) == ("auto", 128)


def test_auto_picks_by_backend():
    assert ak.resolve("auto", "cpu") == "blockwise"
    assert ak.resolve("auto", "tpu") == "blockwise"
    assert ak.resolve("auto", "gpu") == "dot_product_attention"
    assert ak.resolve("xla", "gpu") == "xla"
