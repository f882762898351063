"""The threefry kernel computes Threefry-2x32-20 exactly, and jax.random reaches it.

Three independent witnesses: Random123's published known answers, a numpy implementation of
the hash written here from the paper's description (key schedule, rotation constants, key
injections), and the decoding fixture (tests/test_decoding_fixture.py), recorded with JAX's own
lowering long before the kernel existed, which the session now runs through the kernel
(tests/conftest.py calls `specjax.configure_cpu()`). Every check is exact: a hash has no
tolerance, and no check here can pass by chance (a wrong word differs in ~16 of 32 bits).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_runtime import _run

from specjax import kernels
from specjax.kernels import threefry

pytestmark = pytest.mark.skipif(not kernels.available(), reason=kernels.status())

# Random123 (Salmon et al. 2011), kat_vectors, threefry2x32_20: key, counter -> output.
KNOWN_ANSWERS = [
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


def numpy_threefry(k0, k1, x0, x1):
    """Threefry-2x32 with 20 rounds in numpy (uint32 arithmetic wraps)."""
    with np.errstate(over="ignore"):
        return _numpy_threefry(k0, k1, x0, x1)


def _numpy_threefry(k0, k1, x0, x1):
    k0, k1, x0, x1 = np.broadcast_arrays(*(np.asarray(v, np.uint32) for v in (k0, k1, x0, x1)))
    keys = [k0, k1, k0 ^ k1 ^ np.uint32(0x1BD11BDA)]
    rotations = [(13, 15, 26, 6), (17, 29, 16, 24)]
    a, b = x0 + keys[0], x1 + keys[1]
    for group in range(5):
        for r in rotations[group % 2]:
            a = a + b
            b = (b << np.uint32(r)) | (b >> np.uint32(32 - r))
            b = b ^ a
        a = a + keys[(group + 1) % 3]
        b = b + keys[(group + 2) % 3] + np.uint32(group + 1)
    return a, b


@pytest.mark.parametrize("key, counter, expected", KNOWN_ANSWERS)
def test_known_answers(key, counter, expected):
    words = [np.uint32(v) for v in (*key, *counter)]
    assert [int(v) for v in numpy_threefry(*words)] == list(expected)  # the reference itself
    assert [int(v) for v in jax.jit(kernels.threefry2x32)(*words)] == list(expected)


@pytest.mark.parametrize(
    "shapes",
    [
        [(7,)] * 4,
        [(3, 5)] * 4,
        [(), (), (1001,), (1001,)],  # one key, many counters (jax.random's use)
        [(4, 1), (1, 6), (4, 6), ()],  # broadcasting in every operand
        [(0,)] * 4,
        [(2, 0, 3), (), (), ()],
        [(300_001,)] * 4,  # past the kernel's parallel threshold (2^18 words)
    ],
    ids=["vector", "matrix", "scalar-key", "broadcast", "empty", "empty-3d", "parallel"],
)
def test_random_operands_equal_the_numpy_hash(shapes):
    rng = np.random.default_rng(len(shapes[0]) * 100 + sum(map(len, shapes)))
    words = [rng.integers(0, 2**32, size=s, dtype=np.uint32) for s in shapes]
    got = jax.jit(kernels.threefry2x32)(*words)
    want = numpy_threefry(*words)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == jnp.uint32
        np.testing.assert_array_equal(np.asarray(g), w)


def test_jax_export_gets_plain_ops_and_the_same_numbers():
    """An exported artifact must load where specjax is not: no specjax custom call in it."""
    fn = jax.jit(lambda k: (jax.random.uniform(k, (1001,)), jax.random.split(k, 3)))
    key = jax.random.PRNGKey(7)
    exported = jax.export.export(fn)(key)  # raises on an unregistered custom call
    assert "specjax_threefry2x32" not in exported.mlir_module()
    assert "stablehlo.while" in exported.mlir_module()  # JAX's own rolled loop of rounds
    assert "specjax_threefry2x32" in fn.lower(key).as_text()
    for a, b in zip(jax.tree.leaves(exported.call(key)), jax.tree.leaves(fn(key)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_non_uint32_operands_are_refused_naming_the_dtypes():
    with pytest.raises(TypeError, match="uint32.*int32"):
        kernels.threefry2x32(np.uint32(0), np.uint32(1), np.arange(3, dtype=np.int32), 0)


def test_jax_random_goes_through_the_kernel_with_the_same_bits():
    """jax.random's own hash, split and fold_in: one custom call each, no loop; same words."""
    assert kernels.threefry_installed()  # tests/conftest.py's configure_cpu()
    keypair = (jnp.uint32(0x13198A2E), jnp.uint32(0x03707344))
    counts = jnp.arange(10, dtype=jnp.uint32)
    hashed = jax.jit(jax.extend.random.threefry_2x32)(keypair, counts)
    # jax's threefry_2x32 hashes the counts' two halves as (x0, x1) pairs.
    want = np.concatenate(numpy_threefry(*keypair, np.arange(5), np.arange(5, 10)))
    np.testing.assert_array_equal(np.asarray(hashed), want)

    def draws(key):
        a, b = jax.random.split(key)
        return jax.random.uniform(a, (5,)), jax.random.bits(jax.random.fold_in(b, 3), (4,))

    text = jax.jit(draws).lower(jax.random.PRNGKey(0)).as_text()
    assert "stablehlo.custom_call @specjax_threefry2x32" in text
    assert "stablehlo.while" not in text  # XLA's lowering is a rolled loop of rounds


def test_install_is_idempotent_and_a_missing_library_leaves_jax_alone(monkeypatch):
    assert kernels.install_threefry() and kernels.install_threefry()
    monkeypatch.setattr(threefry, "_installed", False)
    monkeypatch.setattr(threefry, "_load", lambda: "not built here")
    assert not kernels.install_threefry()


def test_configure_cpu_installs_it_unless_asked_not_to():
    """In fresh interpreters: jax's loop without the install, the kernel call with it."""
    results = {}
    for install in (False, True):
        results[install] = _run(
            f"""
            import json
            import jax
            import specjax
            from specjax import kernels
            specjax.configure_cpu(threefry={install})
            text = jax.jit(lambda k: jax.random.uniform(k, (3,))).lower(
                jax.random.PRNGKey(1)).as_text()
            value = jax.random.uniform(jax.random.PRNGKey(1), (3,)).tolist()
            print(json.dumps(dict(installed=kernels.threefry_installed(),
                                  kernel="specjax_threefry2x32" in text, value=value)))
            """
        )
    assert results[False]["installed"] is False and results[False]["kernel"] is False
    assert results[True]["installed"] is True and results[True]["kernel"] is True
    assert results[True]["value"] == results[False]["value"]  # the same random numbers
