"""Exact outputs of `tree_accept` on hand-written distributions, bad input, no retracing.

Every outcome case is built so that it does not depend on the key (each trial accepts or rejects
with probability 0 or 1 and each drawn token comes from a one-hot distribution), and is checked
for several keys under jit and once eagerly, for both sibling rules with draft_probs given and
for deterministic children (draft_probs=None) where the case allows. No statistics: a correct
tree_accept fails nothing here.

The tree of most cases, UNBALANCED (parents -1, 0, 0, 0, 1, 1, 2, 4), written with node i
holding token i:

    0 ─┬─ 1 ─┬─ 4 ── 7
       │     └─ 5
       ├─ 2 ── 6
       └─ 3
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decoding import TokenTree, tree_accept

UNBALANCED = TokenTree((-1, 0, 0, 0, 1, 1, 2, 4))
N = UNBALANCED.num_nodes
V = 8
BATCH = 8  # every call has 8 rows
KEYS = [jax.random.key(seed) for seed in (0, 1, 2, 12345)]
TOKENS = np.arange(N, dtype=np.int32)  # node i holds token i
UNIFORM = np.full((N, V), 1.0 / V, np.float32)  # q of every child: any token is possible

# One jitted function per variant (the tree, the rule and fill_value are static).
_jit = jax.jit(tree_accept, static_argnums=1, static_argnames=("replacement", "fill_value"))

# (draft_probs given?, replacement) combinations an outcome is checked under.
RULES = [(True, True), (True, False), (False, True)]


def _one_hot(tokens) -> np.ndarray:
    return np.eye(V, dtype=np.float32)[np.asarray(tokens)]


def _p(**rows) -> np.ndarray:
    """[N, V] target probs: uniform rows, except node i's row one-hot on rows[f"n{i}"]."""
    p = UNIFORM.copy()
    for name, value in rows.items():
        p[int(name[1:])] = _one_hot(value) if np.ndim(value) == 0 else value
    return p


def _assert_outcome(
    p, tokens, num_accepted, path, *, q=UNIFORM, rules=RULES, keys=KEYS, eager=False, **kw
):
    """Checks the exact output for every key and rule, jitted (and once eagerly if `eager`).

    p, q, node_tokens and valid are one row ([N, V], [N]), broadcast to BATCH identical rows, or
    BATCH rows already; the expected outputs likewise. All inputs have the same shapes in every
    test (valid is always passed), so the jitted variants compile once for the whole file.
    """

    def rows(x, rank):
        x = np.asarray(x)
        return np.broadcast_to(x, (BATCH,) + x.shape) if x.ndim == rank else x

    node_tokens = rows(kw.pop("node_tokens", TOKENS), 1)
    valid = rows(kw.pop("valid", np.ones(N, bool)), 1)
    p = jnp.asarray(rows(p, 2))
    expected = [rows(tokens, 1), rows(num_accepted, 0), rows(path, 1)]
    for with_q, replacement in rules:
        draft = jnp.asarray(rows(q, 2)) if with_q else None
        calls = [(_jit, key) for key in keys] + ([(tree_accept, keys[0])] if eager else [])
        for fn, key in calls:
            out = fn(
                key,
                UNBALANCED,
                jnp.asarray(node_tokens),
                draft,
                p,
                replacement=replacement,
                valid=jnp.asarray(valid),
                **kw,
            )
            what = f"draft_probs given: {with_q}, replacement={replacement}"
            for got, want in zip(out, expected, strict=True):
                assert got.dtype == jnp.int32, what
                np.testing.assert_array_equal(np.asarray(got), want, err_msg=what)


# ----------------------------------------------------------------------------- outcomes


def test_one_hot_p_on_a_child_accepts_it_and_skips_to_its_subtree():
    # p at the root is one-hot on token 2: node 1 (token 1) is rejected with certainty (r(1) = 0),
    # node 2 accepted with certainty (r(2) = 1 >= Q(2)); at node 2 p is one-hot on its only child
    # 6, a leaf, whose p gives the bonus token 5.
    _assert_outcome(_p(n0=2, n2=6, n6=5), [2, 6, 5, -1], 2, [0, 2, 6, -1], eager=True)


def test_full_depth_path_and_bonus_from_the_leaf():
    _assert_outcome(_p(n0=1, n1=4, n4=7, n7=3), [1, 4, 7, 3], 3, [0, 1, 4, 7], eager=True)


def test_leaf_at_depth_one_emits_its_bonus():
    _assert_outcome(_p(n0=3, n3=7), [3, 7, -1, -1], 1, [0, 3, -1, -1])


def test_no_mass_on_any_child_emits_from_the_residual():
    # p(root) on {4, 5}; node 1's q puts half its mass on token 4, so rejecting node 1 (certain:
    # r(1) = 0) leaves the residual norm(max(0, p - q)) = one-hot 5, which nodes 2 and 3 (also
    # certain rejections) keep. Without the residual update, token 4 would be emitted half the
    # time. draft_probs=None has no q to subtract: there the residual stays p, tested below.
    q = UNIFORM.copy()
    q[1] = 0.0
    q[1, [1, 4]] = 0.5
    q[2:4] = _one_hot([2, 3])
    p = _p(n0=np.eye(V, dtype=np.float32)[[4, 5]].mean(0))
    _assert_outcome(p, [5, -1, -1, -1], 0, [0, -1, -1, -1], q=q, rules=RULES[:1])
    # Sequoia's rule: the siblings share the parent's q (draft_probs of node 1 for all three);
    # Q then loses token 1 but not its mass on 4, and the residual is one-hot 5 as well.
    q_shared = np.broadcast_to(q[1], (N, V))
    _assert_outcome(p, [5, -1, -1, -1], 0, [0, -1, -1, -1], q=q_shared, rules=RULES[1:2])


def test_disjoint_supports_reject_every_child():
    # q of every child on {1, 2, 3}, p on {6}: every child is rejected, (p - q)+ = p.
    q = np.zeros((N, V), np.float32)
    q[:, 1:4] = 1.0 / 3
    _assert_outcome(_p(n0=6), [6, -1, -1, -1], 0, [0, -1, -1, -1], q=q)


def test_invalid_nodes_are_never_tried():
    # p(root) one-hot on token 2, but node 2 was not proposed: nodes 1 and 3 are rejected and
    # the residual emits 2 as the correction token (0 accepted), not as an accepted node.
    valid = np.ones(N, bool)
    valid[2] = False
    _assert_outcome(_p(n0=2, n2=6), [2, -1, -1, -1], 0, [0, -1, -1, -1], valid=valid)
    # The same one level down: node 4 invalid, p(node 1) one-hot on its token.
    valid = np.ones(N, bool)
    valid[4] = False
    _assert_outcome(_p(n0=1, n1=4, n4=7), [1, 4, -1, -1], 1, [0, 1, -1, -1], valid=valid)


@pytest.mark.parametrize("fill_value", [-1, 0, 99])
def test_fill_value(fill_value):
    f = fill_value
    p = _p(n0=3, n3=7)
    _assert_outcome(p, [3, 7, f, f], 1, [0, 3, -1, -1], fill_value=fill_value, rules=RULES[:1])


def test_batch_rows_are_independent():
    # One call, eight rows, four outcomes: 0, 1, 2 and 3 accepted (each twice, interleaved).
    p = np.concatenate(
        2
        * [
            np.stack(
                [
                    _p(n0=0),
                    _p(n0=3, n3=5),
                    _p(n0=2, n2=6, n6=1),
                    _p(n0=1, n1=4, n4=7, n7=2),
                ]
            )
        ]
    )
    tokens = 2 * [[0, -1, -1, -1], [3, 5, -1, -1], [2, 6, 1, -1], [1, 4, 7, 2]]
    paths = 2 * [[0, -1, -1, -1], [0, 3, -1, -1], [0, 2, 6, -1], [0, 1, 4, 7]]
    _assert_outcome(p, tokens, 2 * [0, 1, 2, 3], paths)


def test_root_token_is_ignored():
    node_tokens = TOKENS.copy()
    node_tokens[0] = 12345  # outside the vocabulary: the root's token is never read
    _assert_outcome(_p(n0=3, n3=7), [3, 7, -1, -1], 1, [0, 3, -1, -1], node_tokens=node_tokens)


def test_duplicate_deterministic_siblings():
    # Children tokens 5, 5, 6 at the root; p(root) one-hot 6: both 5s rejected, 6 accepted.
    node_tokens = TOKENS.copy()
    node_tokens[1:4] = [5, 5, 6]
    p = _p(n0=6, n3=2)
    _assert_outcome(p, [6, 2, -1, -1], 1, [0, 3, -1, -1], node_tokens=node_tokens)


def test_residual_equal_to_q_accepts_the_first_child():
    # p == q at every node on the first-child path: r(x) = Q(x), accepted with certainty, so the
    # residual norm((r - Q)+), which would have no mass, is never needed (and no NaN appears).
    half = np.zeros(V, np.float32)
    half[:2] = 0.5
    p = _p(n0=half, n1=half, n4=half, n7=3)
    q = np.broadcast_to(half, (N, V))
    node_tokens = np.array([0, 0, 1, 1, 1, 0, 0, 0], np.int32)
    _assert_outcome(p, [0, 1, 0, 3], 3, [0, 1, 4, 7], q=q, node_tokens=node_tokens, rules=RULES[:1])


def test_empty_residual_falls_back_to_the_current_residual_not_p():
    # ALGORITHMS.md §1e. For consistent inputs an empty residual (r <= Q everywhere, so r == Q)
    # comes with a rejection probability of 0; it is forced here by telling the verifier a q
    # that does not contain the child's token. Root p = [.5, .5]; node 1 (token 3, q = .5 on 0
    # and on 3) is rejected surely and leaves r = one-hot 1; node 2 (token 2, q = one-hot 1) is
    # rejected surely (r(2) = 0) with r - q = 0 everywhere: r must stay one-hot 1. Falling back
    # to p would emit token 0 with probability 1/2 in each of 8 rows x 8 keys (miss: 2^-64).
    half = np.zeros(V, np.float32)
    half[:2] = 0.5
    q = UNIFORM.copy()
    q[1] = 0.0
    q[1, [0, 3]] = 0.5
    q[2] = _one_hot(1)
    q[3] = _one_hot(3)
    node_tokens = np.array([0, 3, 2, 3, 0, 0, 0, 0], np.int32)
    keys = [jax.random.key(seed) for seed in range(8)]
    p = _p(n0=half)
    _assert_outcome(
        p,
        [1, -1, -1, -1],
        0,
        [0, -1, -1, -1],
        q=q,
        node_tokens=node_tokens,
        keys=keys,
        rules=RULES[:1],
    )


def test_bfloat16_inputs():
    p = _p(n0=1, n1=4, n4=7, n7=3)
    q = UNIFORM.astype(jnp.bfloat16)
    rules = [RULES[0], RULES[2]]
    _assert_outcome(p.astype(jnp.bfloat16), [1, 4, 7, 3], 3, [0, 1, 4, 7], q=q, rules=rules)


def test_bfloat16_rows_are_renormalised():
    # Root p [1.5, 1.5 on tokens 1, 2] and node 1's q [2, 2 on 1, 2]: as distributions p(1) =
    # q(1) = 1/2, so node 1 is always accepted; read as given (u * 2 < 1.5) it would be rejected
    # a quarter of the time (all 8 rows x 16 keys accepted: 0.75^128 ~ 1e-16 without). At node
    # 1, p is one-hot on token 0, which neither child (4, 5) holds: the residual emits 0.
    p = _p(n0=np.where(np.isin(np.arange(V), [1, 2]), 1.5, 0.0), n1=0)
    q = UNIFORM.copy()
    q[1] = np.where(np.isin(np.arange(V), [1, 2]), 2.0, 0.0)
    keys = [jax.random.key(seed) for seed in range(16)]
    bf16 = jnp.bfloat16
    p, q = p.astype(bf16), q.astype(bf16)
    _assert_outcome(p, [1, 0, -1, -1], 1, [0, 1, -1, -1], q=q, keys=keys, rules=RULES[:1])


def test_root_only_tree_samples_p():
    root = TokenTree((-1,))
    p = jnp.asarray(_one_hot([[5], [2]]))  # [2, 1, V]
    for key in KEYS:
        tokens, n, path = tree_accept(key, root, jnp.zeros((2, 1), jnp.int32), None, p)
        np.testing.assert_array_equal(np.asarray(tokens), [[5], [2]])
        np.testing.assert_array_equal(np.asarray(n), [0, 0])
        np.testing.assert_array_equal(np.asarray(path), [[0], [0]])


# ----------------------------------------------------------------------------- bad input


def _valid_args(batch=2):
    tokens = jnp.zeros((batch, N), jnp.int32)
    q = jnp.full((batch, N, V), 1.0 / V)
    p = jnp.full((batch, N, V), 1.0 / V)
    return tokens, q, p


def _bad_cases():
    t, q, p = _valid_args()
    valid = jnp.ones((2, N), bool)
    shape = r"node_tokens must have shape \[batch, num_nodes\] = \[2, 8\]"
    return [
        ("tokens_rank", (t[0], q, p), {}, ValueError, "node_tokens must have shape"),
        ("tokens_nodes", (t[:, :7], q[:, :7], p[:, :7]), {}, ValueError, shape),
        ("target_nodes", (t, q, p[:, :7]), {}, ValueError, r"target_probs must have shape.*2, 8"),
        ("draft_nodes", (t, q[:, :7], p), {}, ValueError, r"draft_probs must have shape.*2, 8"),
        ("target_rank", (t, q, p[0]), {}, ValueError, "target_probs must have shape"),
        ("batch", (t, q, p[:1]), {}, ValueError, "target_probs must have shape"),
        ("vocab", (t, q[..., :7], p), {}, ValueError, "vocab mismatch: draft_probs has vocab 7"),
        ("nan_target", (t, q, p.at[1, 2, 3].set(jnp.nan)), {}, ValueError, "target_probs .*NaN"),
        ("nan_draft", (t, q.at[0, 4, 5].set(jnp.nan), p), {}, ValueError, "draft_probs .*NaN"),
        ("float_tokens", (t.astype(jnp.float32), q, p), {}, TypeError, "node_tokens must be an"),
        ("int_target", (t, q, p.astype(jnp.int32)), {}, TypeError, "target_probs must be a float"),
        ("token_high", (t.at[1, 7].set(V), q, p), {}, ValueError, r"node_tokens must lie in"),
        ("token_low", (t.at[0, 1].set(-1), None, p), {}, ValueError, r"node_tokens must lie in"),
        ("valid_shape", (t, q, p), {"valid": valid[:, :7]}, ValueError, "valid must have shape"),
        ("valid_rank", (t, q, p), {"valid": valid[0]}, ValueError, "valid must have shape"),
        ("negative_target", (t, q, p.at[0, 3, 1].set(-0.5)), {}, ValueError, _NEG),
        (
            "negative_draft",
            (t, q.at[1, 2, 0].set(-0.5), p),
            {},
            ValueError,
            "draft_probs has a neg",
        ),
        ("zero_target_row", (t, q, p.at[1, 5].set(0.0)), {}, ValueError, _ZERO),
    ]


_NEG = r"target_probs has a negative entry \(-0.5 at index \[0, 3, 1\]\)"
_ZERO = r"target_probs row \[1, 5\] is all zero"


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [c[1:] for c in _bad_cases()],
    ids=[c[0] for c in _bad_cases()],
)
def test_bad_input_raises_naming_the_argument(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        tree_accept(jax.random.key(0), UNBALANCED, *args, **kwargs)


def test_tree_must_be_a_token_tree():
    t, q, p = _valid_args()
    with pytest.raises(TypeError, match="tree must be a TokenTree"):
        tree_accept(jax.random.key(0), (-1, 0, 0, 0, 1, 1, 2, 4), t, q, p)


def test_shape_errors_also_raise_under_jit():
    t, q, p = _valid_args()
    with pytest.raises(ValueError, match="vocab mismatch"):
        _jit(jax.random.key(0), UNBALANCED, t, q[..., :7], p)


def test_constant_node_tokens_inside_jit_are_checked_not_staged():
    # Node tokens held as a constant of the traced function (only the key is traced): the token
    # range check reads them on the host instead of slicing them into the trace (which raised
    # TracerArrayConversionError), and the outcome is the eager one.
    tokens = jnp.asarray(np.tile(TOKENS, (2, 1)))
    probs = jnp.asarray(np.broadcast_to(_p(n0=1, n1=4, n4=7, n7=3), (2, N, V)))

    @jax.jit
    def fn(key):
        return tree_accept(key, UNBALANCED, tokens, None, probs)

    eager = tree_accept(KEYS[0], UNBALANCED, tokens, None, probs)
    for got, want in zip(fn(KEYS[0]), eager, strict=True):
        np.testing.assert_array_equal(got, want)
    bad = tokens.at[0, 3].set(V)

    @jax.jit
    def bad_fn(key):
        return tree_accept(key, UNBALANCED, bad, None, probs)

    with pytest.raises(ValueError, match="node_tokens must lie in"):
        bad_fn(KEYS[0])


# ----------------------------------------------------------------------------- no retrace


def test_jit_does_not_retrace_on_new_values():
    chex.clear_trace_counter()

    @jax.jit
    @chex.assert_max_traces(n=1)
    def fn(key, tokens, q, p, valid):
        return tree_accept(key, UNBALANCED, tokens, q, p, replacement=False, valid=valid)

    rng = np.random.default_rng(0)
    for i in range(4):  # new key, tokens, probabilities and mask, same shapes: one trace
        tokens = jnp.asarray(rng.integers(0, V, (3, N)), jnp.int32)
        q = jnp.asarray(rng.dirichlet(np.ones(V), (3, N)), jnp.float32)
        p = jnp.asarray(rng.dirichlet(np.ones(V), (3, N)), jnp.float32)
        valid = jnp.asarray(rng.random((3, N)) < 0.8)
        jax.block_until_ready(fn(jax.random.key(i), tokens, q, p, valid))


def test_one_program_per_tree():
    fn = jax.jit(lambda *args: tree_accept(*args), static_argnums=1)  # a cache of its own
    t, q, p = _valid_args()
    fn(jax.random.key(0), UNBALANCED, t, q, p)
    fn(jax.random.key(1), TokenTree((-1, 0, 0, 0, 1, 1, 2, 4)), t + 1, q * 2, p)  # an equal tree
    assert fn._cache_size() == 1
    chain = TokenTree.chain(N - 1)  # another tree with as many nodes: a new program
    fn(jax.random.key(2), chain, t, q, p)
    assert fn._cache_size() == 2
