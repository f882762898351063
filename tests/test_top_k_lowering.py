"""Top-k children and the top-k warper must compile to XLA:CPU's TopK kernel, not to a full sort.

Inside a decoder's loop, XLA:CPU's simplifier merged the slices of a decomposed `lax.top_k`
with their consumers before the pass that turns sort + slices back into the TopK kernel ran,
so each row of the level was sorted whole: ~10 ms of a 40 ms SmolLM2 iteration for one level
of two nodes (`specjax.decoding.argmax.top_k`'s docstring). This checks the compiled program
structurally (no sort op from a top_k), not with a timing.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding import TokenTree, TreeDrafter, TreeSpeculativeDecoder, loop, make_warper
from specjax.decoding.argmax import top_k
from specjax.models import TransformerConfig, TransformerLM

CACHE_LEN = 64


def _top_k_sorts(hlo: str) -> int:
    """Sort ops that came from a `top_k` in compiled HLO text."""
    return len(re.findall(r" sort\(.*op_name=\"[^\"]*top_k\"", hlo))


def test_a_branching_tree_drafter_compiles_its_children_to_the_top_k_kernel():
    # Vocabulary 256: big enough that the full-sort lowering appeared without the barrier
    # (a level of two nodes below a root of two children, as on SmolLM2).
    cfg = TransformerConfig.gpt2(
        256, num_layers=2, embed_dim=32, num_heads=2, mlp_dim=64, max_len=CACHE_LEN
    )
    lm = TransformerLM(cfg)
    params = lm.init_params(jax.random.PRNGKey(0))
    tree = TokenTree.parse("-1/0/0/1/3")
    warper = make_warper(0)
    dec = TreeSpeculativeDecoder(lm, TreeDrafter(lm, warper, tree), tree, warper, cache_len=32)
    tokens, lengths = dec.prepare([np.arange(5)], 8)
    key = jax.random.PRNGKey(0)
    lowered = loop.generate_jit.lower(dec, (params, params), tokens, lengths, key, 8, -1)
    hlo = lowered.compile().as_text()
    assert hlo.count('custom_call_target="TopK"') >= 2  # the root's level and node 1's
    assert _top_k_sorts(hlo) == 0


def test_the_top_k_warper_compiles_to_the_top_k_kernel():
    # The warper reads the k-th value off `top_k`'s values: the simplifier merged that slice
    # with top_k's own, and every warped row was sorted whole (4 rows of 49,152 logits: 32 ms
    # against 0.4 with the kernel, measured under load).
    warper = make_warper(1.0, top_k=40)
    x = jax.random.normal(jax.random.key(0), (2, 256))
    hlo = jax.jit(warper.probs).lower(x).compile().as_text()
    assert hlo.count('custom_call_target="TopK"') == 1
    assert _top_k_sorts(hlo) == 0


def test_the_sort_counter_sees_a_top_k_lowered_to_a_sort():
    # Control: XLA:CPU rewrites only float32 sorts into its TopK kernel, so a bfloat16 top_k
    # stays a sort, which the counter must find in the same kind of text.
    x = jax.random.normal(jax.random.key(0), (2, 256)).astype(jnp.bfloat16)
    hlo = jax.jit(lambda x: jax.lax.top_k(x, 2)).lower(x).compile().as_text()
    assert _top_k_sorts(hlo) == 1


def test_top_k_equals_lax_top_k_with_ties_infinities_and_nan():
    grid = np.asarray([-np.inf, -1.0, -0.0, 0.0, 2.5, np.inf, np.nan], np.float32)
    x = jnp.asarray(np.random.default_rng(0).choice(grid, size=(3, 5, 40)))
    for k in (1, 3, 8):
        want_v, want_i = jax.lax.top_k(x, k)
        got_v, got_i = jax.jit(top_k, static_argnums=1)(x, k)
        np.testing.assert_array_equal(got_i, want_i)
        np.testing.assert_array_equal(got_v, want_v)  # NaN equals NaN here
