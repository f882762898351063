"""`tree_accept` is lossless: the first max_depth + 1 emitted tokens follow the target's exact law.

What it proves. With the harness of tests/tree_harness.py (prefix-dependent p and q over a
4-token vocabulary, so a node's p and q depend on every token on its path; children drawn the
way each rule assumes; rows continued by chained calls until they have emitted D + 1 tokens), the
law of the first D + 1 emitted tokens matches the exact target joint over 4^(D+1) sequences by a
Pearson chi-square (cells expecting < 5 pooled; any zero-probability sequence fails at once), on
2^20 rows per case with a fixed seed. The cases cover both sibling rules, deterministic (top-k)
children, duplicate siblings with replacement, children beyond the support of q (the
without-replacement fallback to uniform over untried tokens, drawn by `draw_children`), disjoint
supports, one-hot p, p == q, bfloat16 target_probs, a wide, a deep and an unbalanced topology.
Chain equivalence: `TokenTree.chain(3)` through `tree_accept` and `speculative_accept` on the same
configuration (independent seeds) agree in the joint law of a call's output tokens and in the law
of num_accepted (two-sample chi-square), and both follow the exact target law.

Power. tests/tree_reference.py is an independent implementation of the rule with switches that
plant one bug each; every bug is run through the same harness at the same sample size and must
be rejected at p < 1e-12, while the reference with no bug passes (so it is the bug that is
detected, and the reference itself is validated). Bug (g), an empty residual falling back to p
instead of r, is not observable: the residual norm((r - Q)+) is empty only when r <= Q everywhere,
i.e. r == Q (both sum to 1), and a trial then rejects with probability sum (r - Q)+ = 0. Its test
shows the fallback never fires (the streams are identical to the honest reference's) instead.

False failures: 19 checks at P_THRESHOLD = 1e-6 (14 law cases, 3 honest-reference cases, 2
two-sample chain checks), each within a factor ~2 of nominal after pooling (>= 1e6 samples, every
bin expecting >= 5): a correct tree_accept fails this file with probability below
19 x 2e-6 = 3.8e-5 (Bonferroni). Seeds are fixed, so a pass is reproducible. The negative controls
sit far past their threshold: the smallest measured statistic, 16,286 at dof 146 (bug d), is
~60 standard deviations (sd = sqrt(2 (dof + 2 lambda)) ~ 255 for lambda ~ 16,100) above the
1e-12 critical value 300; scipy's p-value underflows to 0 for every one of them.

Runtime: 12 compilations (one per topology, rule and dtype; tables, seeds, the draw mode within
a program and the reference's bug switches are traced) of ~5-9 s CPU and 24 sampling runs of
~5 s CPU. The harness calls the verifier on rows that still need tokens only (a queue, see
tree_harness._sample): ~1.6x fewer verifier rows than calling every row until its chunk's
slowest row is done. Measured on 2 cores shared with other jobs (load average ~6): 324 s CPU
(368 s before the queue). Blocks of CHUNK // 4 rows per verifier call, not CHUNK // 8: the file
alone 87.1 -> 74.4 s (-n 0, quiet, 2026-11-28); the draws change with the block shape, so every
p-value and statistic recorded here was measured again with it. Every case's streams are cached
(int8, ~9 MB each) under one key however the test passes its arguments: before, `_law(name)`
and `_streams(name)` were two keys of one `functools.cache`, so every law case was sampled
twice (40 runs, not 24): the file alone at -n 0, quiet, 2026-12-06: 78.7 -> 62.4 s, with the
same streams (same seeds).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tree_harness as th
from tree_harness import NUM_STATES, TokenTree, Verifier

pytestmark = [pytest.mark.slow, pytest.mark.runtime_bound]  # tests/conftest.py

P_THRESHOLD = 1e-6
DETECTION_PVALUE = 1e-12
V = 4

UNBALANCED = TokenTree((-1, 0, 0, 0, 1, 1, 2, 4))  # 8 nodes, depth 3, branching 3 / 2,1 / 1
WIDE = TokenTree.from_branching((4, 2))  # 13 nodes, depth 2
DEEP = TokenTree.from_branching((2, 1, 1))  # two chains of depth 3
CHAIN = TokenTree.chain(3)


def _tables():
    rng = np.random.default_rng(2024)
    p = rng.dirichlet(np.ones(V), NUM_STATES)
    # Zero p's smallest token in every third state: impossible sequences exist and are checked.
    for s in range(0, NUM_STATES, 3):
        p[s, np.argmin(p[s])] = 0.0
    q = rng.dirichlet(np.ones(V), NUM_STATES)
    peaked = rng.dirichlet(np.full(V, 0.5), NUM_STATES)  # frequent duplicate siblings
    # Support of size 1 or 2: three or four children exceed it (the uniform fallback).
    sparse = rng.dirichlet(np.ones(V), NUM_STATES)
    for s in range(NUM_STATES):
        keep = rng.permutation(V)[: 1 + s % 2]
        sparse[s, np.setdiff1d(np.arange(V), keep)] = 0.0
    # Disjoint supports in odd states: p on {0, 1}, q on {2, 3} (state 0, the root of every
    # first call, overlaps, so rows still reach depth 2 and 3).
    p_disjoint, q_disjoint = p.copy(), q.copy()
    p_disjoint[1::2, 2:] = 0.0
    q_disjoint[1::2, :2] = 0.0
    # One-hot p in every third state.
    one_hot = p.copy()
    one_hot[::3] = np.eye(V)[np.arange(0, NUM_STATES, 3) % V]

    def f32(x):
        return (x / x.sum(-1, keepdims=True)).astype(np.float32)

    return {
        "p": f32(p),
        "q": f32(q),
        "peaked": f32(peaked),
        "sparse": f32(sparse),
        "p_disjoint": f32(p_disjoint),
        "q_disjoint": f32(q_disjoint),
        "one_hot": f32(one_hot),
        "p_bf16": np.asarray(jnp.asarray(f32(p), jnp.bfloat16)),
    }


T = _tables()
WITH = Verifier("library", replacement=True)
WITHOUT = Verifier("library", replacement=False)
TOPK = Verifier("library", replacement=True, deterministic=True)
CHAIN_SPEC = Verifier("chain")
REF_WITH = Verifier("reference", replacement=True)
REF_WITHOUT = Verifier("reference", replacement=False)
BOTH_WITHOUT = ("without", "gumbel")  # compiled together: one program serves both samplers
REF_MODES = ("with", "topk")

# name: (tree, p, q, mode, verifier, modes, seed)
CASES = {
    # Measured p-values of the law check (seeds as given) in the comment above each case.
    # p = 0.89
    "unbalanced-with": (UNBALANCED, "p", "q", "with", WITH, None, 1),
    # p = 0.85
    "unbalanced-with-disjoint-supports": (
        UNBALANCED,
        "p_disjoint",
        "q_disjoint",
        "with",
        WITH,
        None,
        2,
    ),
    # p = 0.64
    "unbalanced-with-one-hot-p": (UNBALANCED, "one_hot", "q", "with", WITH, None, 3),
    # p = 0.26
    "unbalanced-with-p-equals-q": (UNBALANCED, "p", "p", "with", WITH, None, 4),
    # p = 0.67
    "unbalanced-with-bf16-p": (UNBALANCED, "p_bf16", "q", "with", WITH, None, 5),
    # p = 0.65
    "unbalanced-without": (UNBALANCED, "p", "q", "without", WITHOUT, BOTH_WITHOUT, 6),
    # p = 0.84
    "unbalanced-without-draw_children-sparse-q": (
        UNBALANCED,
        "p",
        "sparse",
        "gumbel",
        WITHOUT,
        BOTH_WITHOUT,
        7,
    ),
    # p = 0.62
    "unbalanced-topk": (UNBALANCED, "p", "q", "topk", TOPK, None, 8),
    # p = 0.48
    "wide-with-duplicate-siblings": (WIDE, "p", "peaked", "with", WITH, None, 9),
    # p = 0.32
    "wide-without-draw_children-sparse-q": (WIDE, "p", "sparse", "gumbel", WITHOUT, None, 10),
    # p = 0.34
    "deep-without": (DEEP, "p", "q", "without", WITHOUT, None, 11),
    # p = 0.025
    "deep-with": (DEEP, "p", "peaked", "with", WITH, None, 12),
    # p = 0.46
    "chain-tree_accept": (CHAIN, "p", "q", "with", WITH, None, 13),
    # p = 0.41
    "chain-speculative_accept": (CHAIN, "p", "q", "with", CHAIN_SPEC, None, 14),
    # The reference (tests/tree_reference.py), honest and with planted bugs.
    # p = 0.67
    "reference-with": (UNBALANCED, "p", "peaked", "with", REF_WITH, REF_MODES, 21),
    # p = 0.98
    "reference-topk": (UNBALANCED, "p", "peaked", "topk", REF_WITH, REF_MODES, 21),
    # p = 0.29
    "reference-without": (UNBALANCED, "p", "peaked", "without", REF_WITHOUT, None, 22),
}
LAW_CASES = [name for name in CASES if not name.startswith("reference")]


def _streams(name, bug=None, point_mass=None) -> th.Streams:
    """One case's streams, sampled once per process (`_law` and the tests share them)."""
    return _sampled(name, bug, point_mass)  # one cache key, however the caller passes them


@functools.cache
def _sampled(name, bug, point_mass) -> th.Streams:
    tree, p, q, mode, verifier, modes, seed = CASES[name]
    return th.sample_stream(
        tree, T[p], T[q], mode, verifier, seed, bug=bug, point_mass=point_mass, modes=modes
    )


def _law(name, bug=None, point_mass=None) -> th.Chi2:
    return th.law_chi2(_streams(name, bug, point_mass), T[CASES[name][1]])


@pytest.mark.parametrize("name", LAW_CASES + ["reference-with", "reference-without"])
def test_first_tokens_follow_the_exact_target_law(name):
    result = _law(name)
    assert result.pvalue > P_THRESHOLD, result
    # The case exercises acceptance below the root's children (a test that cannot fail is none).
    n = _streams(name).num_accepted
    tree = CASES[name][0]
    assert (n >= 2).mean() > 0.05, np.bincount(n)
    assert (n == tree.max_depth).any(), np.bincount(n)


def test_duplicate_siblings_are_frequent_in_the_duplicate_case():
    # Four i.i.d. root children drawn by the harness from the peaked q at state 0: P(some two are
    # equal) = 1 - 4! prod(q) = 0.990, so the multiset rule (a duplicate still updates the
    # residual) is exercised on most rows. Measured on the harness's own draws, so a sampler that
    # drew without replacement (no duplicates) fails here.
    q0 = np.broadcast_to(th.normalised(T["peaked"][0]), (4096, V)).astype(np.float32)
    drawn = np.asarray(th._draw(jax.random.key(0), jnp.asarray(q0), 4, 0, ("with",)))
    duplicated = np.array([len(set(row)) < 4 for row in drawn.tolist()])
    assert duplicated.mean() > 0.9, duplicated.mean()


def test_sparse_q_has_fewer_tokens_than_children():
    support = (T["sparse"] > 0).sum(-1)
    assert support.max() < 3 and support.min() >= 1


def test_chain_tree_matches_speculative_accept():
    # Two independent samples (seeds 13 and 14) of one call on TokenTree.chain(3): the joint law
    # of its four output tokens (fill -1 included) and of num_accepted agree. 2 checks at 1e-6.
    tree_out = _streams("chain-tree_accept")
    chain_out = _streams("chain-speculative_accept")
    codes = [th.encode(s.first_call + 1, V + 1) for s in (tree_out, chain_out)]
    joint = th.two_sample_chi2(*codes)
    assert joint.pvalue > P_THRESHOLD, joint
    # Measured: joint p = 0.47 (dof 140), num_accepted p = 0.037 (dof 3).
    accepted = th.two_sample_chi2(tree_out.num_accepted, chain_out.num_accepted)
    assert accepted.pvalue > P_THRESHOLD, accepted
    assert accepted.dof == CHAIN.max_depth  # every count 0..3 occurs


# ----------------------------------------------------------------------------- power


@pytest.mark.parametrize(
    "name, bug",
    [
        # Measured chi-square statistics (dof 146; the 1e-12 critical value is 300).
        ("reference-with", "no_residual_update"),  # (a) 1,843,314
        ("reference-without", "keep_rejected_in_q"),  # (b) 166,835
        ("reference-with", "test_against_p"),  # (c) 925,382
        ("reference-with", "merge_duplicates"),  # (d) 16,286
        ("reference-without", "remove_before_residual"),  # (f) 12,592,048
    ],
)
def test_planted_bug_is_detected(name, bug):
    result = _law(name, bug)
    assert result.pvalue < DETECTION_PVALUE, result


def test_topk_children_verified_with_q_is_detected():
    # (e) Deterministic top-k children verified as if drawn from q (SpecInfer's p / q ratio).
    # Measured statistic 1,870,980 at dof 146 (critical value 300).
    result = _law("reference-topk", point_mass=False)
    assert result.pvalue < DETECTION_PVALUE, result
    # Control: the same children verified as point masses. 1 check at 1e-6 (counted above as
    # an honest-reference case together with reference-with / reference-without).
    assert _law("reference-topk").pvalue > P_THRESHOLD


def test_empty_residual_fallback_is_unobservable():
    # (g) The fallback for an empty residual is reached only on a trial whose rejection has
    # probability sum (r - Q)+ = 0: with p at the fallback instead of r, the same seed gives
    # the same streams, row for row (measured: identical on all 2^20 rows). The exact test
    # test_tree_accept_exact.py::test_empty_residual_falls_back_to_the_current_residual_not_p
    # forces the fallback with a q that misses the child's token and checks that r is kept.
    honest = _streams("reference-with")
    planted = _streams("reference-with", "empty_residual_to_p")
    np.testing.assert_array_equal(planted.tokens, honest.tokens)
    np.testing.assert_array_equal(planted.first_call, honest.first_call)
