"""Sampling harness for the token-tree losslessness tests (tests/test_tree_accept_stats.py).

The target and the draft are prefix-dependent tables over a tiny vocabulary: the state after a
prefix is a rolling hash of its tokens, s' = (7 s + token + 1) mod NUM_STATES from s = 0, and p, q
after the prefix are rows P[s], Q[s]. A node's p and q therefore depend on every token on its
path, so a bug confined to depth >= 2 changes the law of the third emitted token.

For each of `num_samples` rows (batched, in chunks under `lax.map`, one jit per configuration;
within a chunk, each verifier call takes the next block of rows that still need tokens)
`sample_stream` repeats, until the row has emitted at least D + 1 tokens (D = max depth):
  1. build a tree from the row's current prefix: children drawn from Q at their parent's state,
     the way the rule assumes ("with": independent draws, "without": sequentially without
     replacement, uniform over untried tokens once supp Q is exhausted, "gumbel": the library's
     `draw_children`, "topk": the top-k of Q, deterministic);
  2. look up p at every node and q (the parent's) at every child, call the verifier;
  3. append the emitted tokens and advance the row's state over them.
The first D + 1 tokens of a lossless sampler follow the exact target joint
prod_k P[s(y_<k)](y_k) over V^(D+1) sequences (`exact_joint`).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import tree_reference
from scipy import stats
from tree_reference import reference_accept

from specjax.decoding import TokenTree, speculative_accept, tree_accept
from specjax.decoding.trees.topology import draw_children

NUM_STATES = 23
NUM_SAMPLES = 1 << 20
CHUNK = 1 << 16
BLOCK = CHUNK // 4  # rows per verifier call, taken from the rows still needing tokens (`_sample`)
MIN_EXPECTED = 5.0


def step(state, token):
    """The state after appending `token` (works on ints and int arrays)."""
    return (state * 7 + token + 1) % NUM_STATES


@dataclasses.dataclass(frozen=True)
class Verifier:
    """Which rule verifies the tree (hashable: a static jit argument).

    Attributes:
      kind: "library" (tree_accept), "reference" (tests/tree_reference.py, its bug and its
        point-mass switch traced: one compilation serves every bug) or "chain"
        (speculative_accept on a chain tree's drafts).
      replacement: the sibling rule the verifier is told.
      deterministic: library and chain: pass draft_probs=None (children are point masses).
    """

    kind: str = "library"
    replacement: bool = True
    deterministic: bool = False

    def __call__(self, key, tree, node_tokens, draft_probs, target_probs, switches):
        if self.kind == "reference":
            return reference_accept(
                key,
                tree.parents,
                node_tokens,
                draft_probs,
                target_probs,
                replacement=self.replacement,
                switches=switches,
            )
        q = None if self.deterministic else draft_probs
        if self.kind == "library":
            return tree_accept(
                key, tree, node_tokens, q, target_probs, replacement=self.replacement
            )[:2]
        assert self.kind == "chain" and tree == TokenTree.chain(tree.max_depth), tree
        q = None if q is None else q[:, 1:]
        return speculative_accept(key, node_tokens[:, 1:], q, target_probs)


def _inverse_cdf(key, weights, shape):
    """Draws int32 `shape` + () from rows weights [..., V] (normalised here) by inverse CDF."""
    cdf = jnp.cumsum(weights, -1)
    cdf = cdf / cdf[..., -1:]
    u = jax.random.uniform(key, shape)  # [..., k]
    # The number of CDF entries <= u: zero-weight tokens have an empty interval.
    token = jnp.sum(u[..., None] >= cdf[..., None, :], -1)
    return jnp.minimum(token, weights.shape[-1] - 1).astype(jnp.int32)


def _draw(key, q, num, mode, modes):
    """num children [C, num] from q [C, V]: modes[mode] (a traced index) says how.

    Only the samplers named in the static tuple `modes` are compiled.
    """

    def with_replacement():
        return _inverse_cdf(key, q, q.shape[:-1] + (num,))

    def top_k():
        return jax.lax.top_k(q, num)[1].astype(jnp.int32)

    def gumbel():
        return draw_children(key, q, num, replacement=False)

    def without_replacement():
        vocab = q.shape[-1]
        tried = jnp.zeros(q.shape, bool)
        out = []
        for k in jax.random.split(key, num):
            w = jnp.where(tried, 0.0, q)
            w = jnp.where(w.sum(-1, keepdims=True) > 0, w, (~tried).astype(q.dtype))
            x = _inverse_cdf(k, w, q.shape[:-1] + (1,))[:, 0]
            tried = tried | (jnp.arange(vocab) == x[:, None])
            out.append(x)
        return jnp.stack(out, -1)

    samplers = {
        "with": with_replacement,
        "without": without_replacement,
        "gumbel": gumbel,
        "topk": top_k,
    }
    if len(modes) == 1:
        return samplers[modes[0]]()
    return jax.lax.switch(mode, [samplers[m] for m in modes])


def _one_call(key, state, p_table, q_table, mode, switches, tree, verifier, modes):
    """Builds a tree from each row's state and verifies it: tokens [C, D + 1], n [C]."""
    n = tree.num_nodes
    k_draw, k_accept = jax.random.split(key)
    states = [state] + [None] * (n - 1)
    tokens = [jnp.zeros_like(state)] + [None] * (n - 1)
    qs = [jnp.zeros(state.shape + q_table.shape[-1:], q_table.dtype)] + [None] * (n - 1)
    for u, kids in enumerate(tree.children):
        if not kids:
            continue
        q_u = q_table[states[u]]  # [C, V]
        drawn = _draw(jax.random.fold_in(k_draw, u), q_u, len(kids), mode, modes)  # [C, k]
        for rank, c in enumerate(kids):
            tokens[c] = drawn[:, rank]
            states[c] = step(states[u], drawn[:, rank])
            qs[c] = q_u
    node_tokens = jnp.stack(tokens, 1)  # [C, N]
    target = p_table[jnp.stack(states, 1)]  # [C, N, V]
    draft = jnp.stack(qs, 1)  # [C, N, V]
    return verifier(k_accept, tree, node_tokens, draft, target, switches)


def _append(out, count, state, tokens, n, width):
    """Appends each row's emitted tokens[:n + 1] to its stream, as far as `width` reaches.

    out int [R, width] (-1 where not yet emitted), count int [R] tokens emitted so far, state int
    [R]; tokens int [R, D + 1] and n int [R] one call's output. Returns (out, count, state).
    """
    index = jnp.arange(width)
    for j in range(tokens.shape[1]):  # emitted token j lands at position count + j
        put = (j <= n) & (count + j < width)
        out = jnp.where((index == (count + j)[:, None]) & put[:, None], tokens[:, j : j + 1], out)
        state = jnp.where(j <= n, step(state, tokens[:, j]), state)
    return out, count + n + 1, state


@functools.partial(
    jax.jit, static_argnames=("tree", "verifier", "modes", "num_chunks", "chunk", "block")
)
def _sample(
    key, p_table, q_table, mode, switches, *, tree, verifier, modes, num_chunks, chunk, block
):
    """Streams of `num_chunks` x `chunk` rows; see `sample_stream`.

    A row needs between 1 and D + 1 calls. Rather than call the verifier on every row of a
    chunk until its slowest row is done (D + 1 calls on every row, every time), each iteration
    of the loop gathers the first `block` rows that still need tokens and makes one call on
    them. A row's place in that queue depends only on the past, and every iteration draws fresh
    randomness, so each row still follows the chained-call law, independently of the others;
    a chunk costs about its rows' mean number of calls.
    """
    width = tree.max_depth + 1
    call_args = (p_table, q_table, mode, switches, tree, verifier, modes)

    def run_chunk(key):
        def cond(carry):
            return jnp.any(carry[2] < width)

        def body(carry):
            it, out, count, state, first, n_first = carry
            # The first `block` unfinished rows; index `chunk` (out of bounds) pads the block.
            rows = jnp.nonzero(count < width, size=block, fill_value=chunk)[0]  # [block]
            tokens, n = _one_call(jax.random.fold_in(key, it), state[rows], *call_args)
            is_first = count[rows] == 0  # [block] the row's first call: recorded
            new = (
                *_append(out[rows], count[rows], state[rows], tokens, n, width),
                jnp.where(is_first[:, None], tokens, first[rows]),
                jnp.where(is_first, n, n_first[rows]),
            )
            old = (out, count, state, first, n_first)
            return (
                it + 1,
                *(x.at[rows].set(y, mode="drop") for x, y in zip(old, new, strict=True)),
            )

        zeros = jnp.zeros((chunk,), jnp.int32)
        blank = jnp.full((chunk, width), -1, jnp.int32)
        init = (jnp.int32(0), blank, zeros, zeros, blank, zeros)
        _, out, _, _, first, n_first = jax.lax.while_loop(cond, body, init)
        return out, first, n_first

    out, first, n_first = jax.lax.map(run_chunk, jax.random.split(key, num_chunks))
    return out.reshape(-1, width), first.reshape(-1, width), n_first.reshape(-1)


@dataclasses.dataclass(frozen=True)
class Streams:
    """What `sample_stream` returns (numpy).

    Attributes:
      tokens: int [num_samples, D + 1] the first D + 1 emitted tokens of each row.
      first_call: int [num_samples, D + 1] the first call's output (fill -1).
      num_accepted: int [num_samples] the first call's accepted count.
    """

    tokens: np.ndarray
    first_call: np.ndarray
    num_accepted: np.ndarray


def sample_stream(
    tree,
    p_table,
    q_table,
    mode,
    verifier,
    seed,
    bug=None,
    point_mass=None,
    modes=None,
    num_samples=NUM_SAMPLES,
):
    """The first D + 1 emitted tokens of `num_samples` independent rows (see the module doc).

    Args:
      tree: the TokenTree every call verifies.
      p_table, q_table: [NUM_STATES, V] p and q per state (p float32 or bfloat16).
      mode: how children are drawn: "with", "without", "gumbel" or "topk".
      verifier: a `Verifier`.
      seed: fixed seed.
      bug: the reference's planted bug (tree_reference.BUGS) or None.
      point_mass: the reference verifies children as point masses (default: mode == "topk").
      modes: the modes compiled into one program (default: (mode,)); configurations that share
        it share one compilation.
      num_samples: a multiple of CHUNK.
    """
    point_mass = mode == "topk" if point_mass is None else point_mass
    switches = tree_reference.make_switches(bug, point_mass=point_mass)
    modes = (mode,) if modes is None else tuple(modes)
    out, first, n = _sample(
        jax.random.key(seed),
        jnp.asarray(p_table),
        jnp.asarray(q_table, jnp.float32),
        jnp.int32(modes.index(mode)),
        jnp.asarray(switches),
        tree=tree,
        verifier=verifier,
        modes=modes,
        num_chunks=num_samples // CHUNK,
        chunk=CHUNK,
        block=BLOCK,
    )
    # int8 (tokens < 128, fill -1): 9 MB per case, so the tests can cache every case's streams.
    return Streams(*(np.asarray(x).astype(np.int8) for x in (out, first, n)))


def normalised(table) -> np.ndarray:
    x = np.asarray(table).astype(np.float64)
    return x / x.sum(-1, keepdims=True)


def exact_joint(p_table, length) -> np.ndarray:
    """[V] * length: the target's law of the first `length` tokens from state 0 (float64)."""
    p = normalised(p_table)
    vocab = p.shape[-1]
    probs, states = np.ones(1), np.zeros(1, np.int64)
    for _ in range(length):
        probs = (probs[:, None] * p[states]).ravel()
        states = step(states[:, None], np.arange(vocab)[None, :]).ravel()
    return probs.reshape((vocab,) * length)


def encode(tokens, vocab) -> np.ndarray:
    """Row-wise base-vocab code of int [n, L] tokens in [0, vocab)."""
    tokens = np.asarray(tokens, np.int64)
    return (tokens * vocab ** np.arange(tokens.shape[1])[::-1]).sum(1)


@dataclasses.dataclass(frozen=True)
class Chi2:
    statistic: float
    dof: int
    pvalue: float


def _pool(expected, *observed):
    """Merges the categories of smallest expectation until each bin expects >= MIN_EXPECTED."""
    order = np.argsort(expected)
    expected = expected[order]
    observed = [o[order] for o in observed]
    cut = int(np.searchsorted(expected, MIN_EXPECTED))
    while cut < len(expected) and 0 < expected[:cut].sum() < MIN_EXPECTED:
        cut += 1
    if cut > 0:
        expected = np.concatenate([[expected[:cut].sum()], expected[cut:]])
        observed = [np.concatenate([[o[:cut].sum()], o[cut:]]) for o in observed]
    return expected, observed


def law_chi2(streams: Streams, p_table) -> Chi2:
    """Pearson chi-square of the first D + 1 tokens against the exact joint (sparse cells pooled).

    A zero-probability sequence that occurs at all fails at once (p-value 0).
    """
    vocab = np.asarray(p_table).shape[-1]
    width = streams.tokens.shape[1]
    assert (streams.tokens >= 0).all() and (streams.tokens < vocab).all()
    probs = exact_joint(p_table, width).ravel()
    counts = np.bincount(encode(streams.tokens, vocab), minlength=probs.size).astype(np.float64)
    if (counts[probs == 0] > 0).any():
        return Chi2(np.inf, 0, 0.0)
    keep = probs > 0
    expected, (counts,) = _pool(counts.sum() * probs[keep], counts[keep])
    if len(expected) < 2:
        return Chi2(0.0, 0, 1.0)
    statistic = float(np.sum((counts - expected) ** 2 / expected))
    dof = len(expected) - 1
    return Chi2(statistic, dof, float(stats.chi2.sf(statistic, dof)))


def two_sample_chi2(a: np.ndarray, b: np.ndarray) -> Chi2:
    """Chi-square test that two samples of category codes (equal sizes) share one law."""
    cats, inverse = np.unique(np.concatenate([a, b]), return_inverse=True)
    ca = np.bincount(inverse[: len(a)], minlength=len(cats)).astype(np.float64)
    cb = np.bincount(inverse[len(a) :], minlength=len(cats)).astype(np.float64)
    # Pool categories whose expected count per sample is small (pooled total < 2 MIN_EXPECTED).
    total, (ca, cb) = _pool((ca + cb) / 2, ca, cb)
    if len(total) < 2:
        return Chi2(0.0, 0, 1.0)
    statistic, pvalue, dof, _ = stats.chi2_contingency(np.stack([ca, cb]), correction=False)
    return Chi2(float(statistic), int(dof), float(pvalue))
