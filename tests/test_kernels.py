"""specjax's CPU kernels (`specjax.kernels`) against their XLA references.

Every kernel is checked against the XLA implementation of the same function (`ops.*_reference`,
which is also what runs off the CPU): products to 1e-5 of the output's scale, attention to
1e-5. The kernels accumulate in float32 in another order than XLA, so closeness, not identity,
is the contract; the measured differences are 1e-7 to 3e-7 (a twentieth of the bound). One
property is exact and checked bit for bit: a row's result does not depend on how many rows are
in the call (a verification gives the decode step's logits).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import kernels
from specjax.kernels import ops

pytestmark = pytest.mark.skipif(
    not kernels.available(), reason=f"kernels not built: {kernels.status()}"
)

TOL = 1e-5
# The XLA references (and the kernels outside a test's own jit) as one program each: called op
# by op, each op compiles once per shape, most of this file's time.
FUSED = jax.jit(ops.fused_matmul, static_argnums=2, static_argnames=("eps", "swiglu"))
FUSED_REFERENCE = jax.jit(
    ops.fused_matmul_reference, static_argnums=2, static_argnames=("eps", "swiglu")
)
ATTENTION = jax.jit(ops.cache_attention, static_argnames="num_heads")
ATTENTION_REFERENCE = jax.jit(ops.cache_attention_reference, static_argnums=7)


def _rel(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def _case(rng, m, k, n, width=None):
    x = rng.standard_normal((m, width or 2 * k + 3)).astype(np.float32)  # wider rows: padding
    w = ops.pack(rng.standard_normal((k, n)).astype(np.float32))
    return jnp.asarray(x), jnp.asarray(w)


def test_pack_round_trip_and_padding():
    w = np.arange(5 * 13, dtype=np.float32).reshape(5, 13)
    packed = ops.pack(w)
    assert packed.shape == (2, 5, 8)
    assert (packed[1, :, 5:] == 0).all()  # the last panel is padded with zeros
    np.testing.assert_array_equal(ops.unpack(packed, 13), w)
    with pytest.raises(ValueError, match="does not hold 17 columns"):
        ops.unpack(packed, 17)


@pytest.mark.parametrize("m", [1, 2, 5, 7, 9, 16, 37])
def test_fused_matmul_matches_reference(m):
    rng = np.random.default_rng(m)
    k, n = 44, 52  # neither a multiple of 8: the panel padding and odd K are exercised
    x, w = _case(rng, m, k, n)
    scale = jnp.asarray(rng.standard_normal(k).astype(np.float32))
    bias = jnp.asarray(rng.standard_normal(n).astype(np.float32))
    residual = jnp.asarray(rng.standard_normal((m, n)).astype(np.float32))
    variants = [
        dict(),
        dict(rms_scale=scale, eps=1e-5),
        dict(swiglu=True),
        dict(bias=bias, residual=residual),
        dict(rms_scale=scale, eps=1e-6, bias=bias, residual=residual),
    ]
    for kw in variants:
        got = FUSED(x, w, n, **kw)
        want = FUSED_REFERENCE(x, w, n, **kw)[:, :n]
        assert got.shape == (m, n)
        assert _rel(got, want) < TOL, kw


def test_rows_are_independent_of_the_batch_bit_for_bit():
    rng = np.random.default_rng(0)
    x, w = _case(rng, 16, 64, 96)
    scale = jnp.asarray(rng.standard_normal(64).astype(np.float32))
    full = np.asarray(ops.fused_matmul(x, w, 96, rms_scale=scale))
    for m in (1, 3, 9):
        part = np.asarray(ops.fused_matmul(x[:m], w, 96, rms_scale=scale))
        np.testing.assert_array_equal(part, full[:m])


def test_packed_matmul_gradients_match_xla():
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((3, 4, 24)).astype(np.float32))
    w_full = jnp.asarray(rng.standard_normal((24, 20)).astype(np.float32))

    def loss_packed(x, w):
        return jnp.sum(jnp.sin(ops.packed_matmul(x, w, 20)))

    def loss_xla(x, w_full):
        return jnp.sum(jnp.sin(x @ w_full))

    gx, gw = jax.jit(jax.grad(loss_packed, argnums=(0, 1)))(x, ops.pack(w_full))
    rx, rw = jax.jit(jax.grad(loss_xla, argnums=(0, 1)))(x, w_full)
    assert _rel(gx, rx) < TOL
    assert _rel(ops.unpack(gw, 20), rw) < TOL


def test_bad_shapes_are_refused():
    rng = np.random.default_rng(2)
    x, w = _case(rng, 2, 16, 24, width=16)
    with pytest.raises(ValueError, match="do not make 40 output columns"):
        ops.packed_matmul(x, w, 40)
    with pytest.raises(ValueError, match="do not make"):
        ops.fused_matmul(x, w, 24, swiglu=True)  # SwiGLU reads 2K = 32 columns
    with pytest.raises(ValueError, match="one prologue"):
        ops.fused_matmul(x, w, 24, swiglu=True, rms_scale=jnp.ones(16))


def _attention_case(rng, batch, t, s, h, kv, d, starts):
    qkv = rng.standard_normal((batch, t, (h + 2 * kv) * d + 8)).astype(np.float32)
    starts = np.asarray(starts, np.int32)
    positions = starts[:, None] + np.arange(t)[None, :]
    cache_k = rng.standard_normal((batch, s, kv, d)).astype(np.float32)
    cache_v = rng.standard_normal((batch, s, kv, d)).astype(np.float32)
    inv_freq = (1.0 / 1e4 ** (np.arange(0, d, 2) / d)).astype(np.float32)
    return qkv, positions, inv_freq, cache_k, cache_v, starts


@pytest.mark.parametrize("d", [64, 12])  # 64: the register path; 12: the generic one
def test_cache_attention_matches_reference(d):
    rng = np.random.default_rng(d)
    batch, t, s, h, kv = 2, 5, 48, 6, 2
    qkv, pos, inv_freq, ck, cv, starts = _attention_case(rng, batch, t, s, h, kv, d, [3, 40])
    causal = np.arange(s)[None, None, :] <= pos[:, :, None]
    tree = causal & (rng.random((batch, t, s)) < 0.6)  # any mask: a token tree's, say
    tree |= np.arange(s)[None, None, :] == pos[:, :, None]  # a token sees itself
    tree[0, 2] = False  # a query that sees nothing gets zeros
    for mask, freq in ((causal, inv_freq), (tree, inv_freq), (causal, None)):
        args = (qkv, pos, freq, ck, cv, mask, starts)
        got = ATTENTION(*args, num_heads=h)
        want = ATTENTION_REFERENCE(*args, h)
        for g, w_ in zip(got, want, strict=True):
            assert _rel(g, w_) < TOL
    # Row 1 writes slots 40..44 of 48; a row at 46 drops the writes past the buffer.
    qkv, pos, inv_freq, ck, cv, starts = _attention_case(rng, 1, t, s, h, kv, d, [46])
    mask = np.arange(s)[None, None, :] <= pos[:, :, None]
    got = ATTENTION(qkv, pos, inv_freq, ck, cv, mask, starts, num_heads=h)
    want = ATTENTION_REFERENCE(qkv, pos, inv_freq, ck, cv, mask, starts, h)
    assert _rel(got[1], want[1]) < TOL


def test_reference_path_when_kernels_are_off(monkeypatch):
    """Off the CPU (or unbuilt), the same calls run XLA's reference."""
    rng = np.random.default_rng(3)
    x, w = _case(rng, 3, 16, 24)
    on = ops.fused_matmul(x, w, 24, swiglu=True)
    monkeypatch.setattr(ops, "use_kernels", lambda: False)
    off = ops.fused_matmul(x, w, 24, swiglu=True)
    assert _rel(on, off) < TOL


def test_no_recompilation_across_calls():
    rng = np.random.default_rng(4)
    x, w = _case(rng, 4, 32, 40, width=32)
    traces = []

    @jax.jit
    def f(x, w):
        traces.append(1)
        return ops.fused_matmul(x, w, 40)

    for i in range(3):
        f(x + i, w)
    assert len(traces) == 1
