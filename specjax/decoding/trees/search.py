"""Sequoia's optimal trees: the tree of n nodes that maximises the expected accepted tokens.

Sequoia (Chen et al. 2024, §3.1) describes a drafter/verifier pair by its positional acceptance
vector P: P[k] is the probability that the k-th child tried at a node is the one accepted
(unconditional, so sum(P) <= 1). Under the positional assumption (P depends on k only, not on the
node's depth or prefix), node v is reached with probability f(v) = prod of P[rank(u)] over the
nodes u on the path from the root to v (v included, the root excluded), and a verification call
accepts E[accepted] = sum of f(v) over the non-root nodes v (Prop. 3.4); it emits one token more.

`optimal_tree` maximises that sum over all trees whose siblings are ordered by rank, by dynamic
programming over (nodes, depth bound, number of root children):

    best(n, d)       = max over b of T(n, d, b)     (best(1, d) = 0: a lone root accepts nothing)
    T(n, d, 0)       = 0 if n == 1, else impossible
    T(n, d, b)       = max over m in 1..n-1 of  T(n - m, d, b - 1) + P[b] * (1 + best(m, d - 1))

i.e. the root's first b - 1 subtrees use n - m nodes, and its b-th child heads a subtree of m
nodes whose every node is reached through that child (probability P[b]). The recursion is exact
for this objective: the subtrees of different children are independent choices.

Acceptance by depth. A draft that drafts on its own outputs (an EAGLE head on its predicted
features) accepts less the deeper it drafts, so one vector describes it badly. Every function
here also takes a matrix P [D, K]: row j is the vector of the children of depth j + 1 (row 0:
the root's children), rows past the last repeat it. The recursion is then over the absolute
depth a of a subtree's root, for one depth bound at a time:

    best_a(n)        = max over b of T_a(n, b)     (best_a(1) = 0; best_bound(n > 1) impossible)
    T_a(n, b)        = max over m of  T_a(n - m, b - 1) + P[a][b] * (1 + best_{a+1}(m))

A matrix whose rows are all equal gives the vector's trees.
"""

from __future__ import annotations

import numpy as np

from specjax.decoding.trees.topology import TokenTree

_IMPOSSIBLE = -np.inf


def positional_from_conditional(rates) -> np.ndarray:
    """Sequoia's positional vector from conditional acceptance rates.

    Args:
      rates: a[k] = P(the (k+1)-th child tried is accepted | the ones before it were rejected),
        each in [0, 1].

    Returns:
      float64 [K]: P[k] = a[k] * prod_{j<k} (1 - a[j]), the unconditional probability that the
      (k+1)-th child is the one accepted (sum <= 1).
    """
    a = _vector("rates", rates)
    survive = np.concatenate([[1.0], np.cumprod(1.0 - a)[:-1]])
    return a * survive


def conditional_from_positional(acceptance) -> np.ndarray:
    """The inverse of `positional_from_conditional`: a[k] = P[k] / (1 - sum_{j<k} P[j]).

    A rank that is reached with probability 0 gets rate 0.
    """
    p = _vector("acceptance", acceptance)
    reached = 1.0 - np.concatenate([[0.0], np.cumsum(p)[:-1]])
    return np.where(reached > 1e-12, p / np.maximum(reached, 1e-300), 0.0)


def expected_accepted(tree: TokenTree, acceptance) -> float:
    """E[accepted tokens] of one verification of `tree` under the positional assumption.

    Args:
      tree: any TokenTree (a chain too).
      acceptance: the positional vector P (acceptance[0] = P_1, the first child tried), or a
        matrix [D, K] of one such vector per depth (module docstring); ranks past its end
        count as 0.

    Returns:
      sum over non-root nodes v of prod_{u on root->v, u != root} P[rank(u)] (with a matrix,
      the row of u's depth). With P = (alpha,) and the chain of gamma this is
      (1 - alpha^(gamma+1)) / (1 - alpha) - 1.
    """
    rows = _acceptance_rows(acceptance, check_sum=False)
    depths = tree.depths
    reach = np.zeros(tree.num_nodes)
    reach[0] = 1.0
    for i in range(1, tree.num_nodes):
        p = rows[min(depths[i] - 1, len(rows) - 1)]
        rank = tree.ranks[i]
        reach[i] = reach[tree.parents[i]] * (p[rank] if rank < len(p) else 0.0)
    return float(reach[1:].sum())


def optimal_tree(acceptance, num_nodes: int, max_depth: int | None = None) -> TokenTree:
    """Sequoia's dynamic program: the tree maximising `expected_accepted(tree, acceptance)`.

    Args:
      acceptance: the positional vector P (acceptance[0] = P_1); entries past its end count as 0.
        Each entry in [0, 1] and the sum at most 1 (up to 1e-6). Or a matrix [D, K], one such
        vector per depth (module docstring).
      num_nodes: n >= 1, the tokens the target scores, root included.
      max_depth: bound on the drafted tokens along any root-to-leaf path (the sequential draft
        steps); None: n - 1 (no bound). Must be >= 1 when n > 1.

    Returns:
      A TokenTree of exactly num_nodes nodes (breadth-first numbered, siblings by rank). Among
      equally good trees the one found first is returned (smaller later subtrees win ties), so
      the result is deterministic.

    Raises:
      ValueError: naming the argument, for a bad acceptance vector, num_nodes < 1 or a
        max_depth that cannot hold num_nodes.
    """
    rows = _acceptance_rows(acceptance)
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, (int, np.integer)):
        raise ValueError(f"num_nodes must be an int >= 1; got {num_nodes!r}")
    n_max = int(num_nodes)
    if n_max < 1:
        raise ValueError(f"num_nodes must be >= 1 (it counts the root); got {n_max}")
    depth = n_max - 1 if max_depth is None else max_depth
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 0:
        raise ValueError(f"max_depth must be None or an int >= 0; got {max_depth!r}")
    depth = min(int(depth), n_max - 1)
    if n_max > 1 and depth < 1:
        raise ValueError(f"max_depth={max_depth} cannot hold num_nodes={n_max} > 1 nodes")
    if _by_depth(acceptance):
        table, choice = _solve_by_depth(rows, n_max, depth)
        return tree_from_nested(_build(table, choice, n_max, 0, step=1))
    table, choice = _solve(rows[0], n_max, depth)
    return tree_from_nested(_build(table, choice, n_max, depth))


def _solve(p: np.ndarray, n_max: int, depth: int):
    """The DP tables for every size <= n_max and depth bound <= depth (module docstring).

    Returns:
      table: float64 [depth + 1, n_max + 1, n_max]: T(n, d, b), -inf where impossible.
      choice: int64, same shape: the size m of the b-th child's subtree in that optimum.
    """
    weights = np.zeros(n_max)  # weights[b - 1] = P_b for b = 1..n-1 (zero past the vector's end)
    weights[: min(len(p), n_max)] = p[:n_max]
    best = np.full((depth + 1, n_max + 1), _IMPOSSIBLE)  # best[d, n] = max over b of T(n, d, b)
    best[:, 1] = 0.0
    table = np.full((depth + 1, n_max + 1, n_max), _IMPOSSIBLE)
    table[:, 1, 0] = 0.0
    choice = np.zeros((depth + 1, n_max + 1, n_max), np.int64)
    for d in range(1, depth + 1):
        for n in range(2, n_max + 1):
            if d >= n:  # a subtree of n nodes is at most n - 1 deep: the bound no longer binds
                table[d, n], choice[d, n], best[d, n] = (
                    table[d - 1, n],
                    choice[d - 1, n],
                    best[d - 1, n],
                )
                continue
            best[d, n] = _fill(table[d], choice[d], best[d - 1], weights, n)
    return table, choice


def _fill(table, choice, best_below, weights, n: int) -> float:
    """Fills T(n, b) and its choices for b = 1..n-1 in place and returns best(n) = max over b.

    Args:
      table, choice: [n_max + 1, n_max] views of one level's tables (rows < n already filled).
      best_below: [n_max + 1] best(m) of a subtree one level deeper (-inf: impossible).
      weights: [n_max] P of the children by rank (weights[b - 1] = P_b).
    """
    m = np.arange(1, n)  # the b-th child's subtree size
    child = 1.0 + best_below[m]  # [n - 1]
    possible = np.isfinite(child)
    child = np.where(possible, child, 0.0)
    for b in range(1, n):
        rest = table[n - m, b - 1]
        ok = possible & np.isfinite(rest)
        value = np.where(ok, np.where(ok, rest, 0.0) + weights[b - 1] * child, _IMPOSSIBLE)
        k = int(np.argmax(value))
        table[n, b] = value[k]
        choice[n, b] = m[k]
    return table[n].max()


def _build(table, choice, n: int, d: int, step: int = -1) -> list:
    """The optimal subtree of n nodes at table row d, as nested child lists in rank order.

    `_solve`'s rows are depth bounds (a child's is d - 1, `step` -1); `_solve_by_depth`'s are
    absolute depths (a child's is d + 1, `step` +1)."""
    if n == 1:
        return []
    b = int(np.argmax(table[d, n]))
    kids = []
    while b > 0:
        m = int(choice[d, n, b])
        kids.append(_build(table, choice, m, d + step, step))
        n, b = n - m, b - 1
    return kids[::-1]


def _solve_by_depth(rows: np.ndarray, n_max: int, bound: int):
    """The DP tables of a per-depth acceptance matrix for one depth bound (module docstring).

    Returns:
      table: float64 [bound + 1, n_max + 1, n_max]: T_a(n, b) for a subtree rooted at absolute
        depth a (its nodes at most at depth `bound`), -inf where impossible.
      choice: int64, same shape: the size m of the b-th child's subtree in that optimum.
    """
    best = np.full((bound + 2, n_max + 1), _IMPOSSIBLE)  # best[a, n]; row bound + 1: none
    best[: bound + 1, 1] = 0.0
    table = np.full((bound + 1, n_max + 1, n_max), _IMPOSSIBLE)
    table[:, 1, 0] = 0.0
    choice = np.zeros((bound + 1, n_max + 1, n_max), np.int64)
    for a in range(bound - 1, -1, -1):  # a subtree at depth `bound` is a lone leaf
        weights = np.zeros(n_max)  # P of the children at depth a + 1, by rank
        p = rows[min(a, len(rows) - 1)]
        weights[: min(len(p), n_max)] = p[:n_max]
        for n in range(2, n_max + 1):
            best[a, n] = _fill(table[a], choice[a], best[a + 1], weights, n)
    return table, choice


def tree_from_nested(children: list) -> TokenTree:
    """A TokenTree from nested child lists (root's children in rank order, each a list of its own).

    Nodes are numbered breadth-first, so the result meets TokenTree's invariants.
    """
    parents, queue = [-1], [(0, children)]
    while queue:
        node, kids = queue.pop(0)
        for kid in kids:
            parents.append(node)
            queue.append((len(parents) - 1, kid))
    return TokenTree(tuple(parents))


def _vector(name: str, values) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0 or not np.all(np.isfinite(x)) or np.any(x < 0) or np.any(x > 1):
        raise ValueError(
            f"{name} must be a non-empty vector of probabilities in [0, 1]; got {values!r}"
        )
    return x


def _by_depth(acceptance) -> bool:
    """True for a per-depth matrix: a 2-D array, or a sequence of vectors (of any lengths)."""
    if isinstance(acceptance, (list, tuple)):
        return len(acceptance) > 0 and all(np.ndim(row) == 1 for row in acceptance)
    return np.ndim(acceptance) == 2


def _acceptance_rows(acceptance, check_sum: bool = True) -> np.ndarray:
    """float64 [D, K] from a positional vector (D = 1) or a per-depth matrix, each row checked
    as Sequoia's positional vector: entries in [0, 1] and (`check_sum`) a sum at most 1."""
    if _by_depth(acceptance):
        vectors = [_vector(f"acceptance[{j}]", row) for j, row in enumerate(acceptance)]
        if not vectors:
            raise ValueError("acceptance: a per-depth matrix needs at least one row; got none")
        rows = np.zeros((len(vectors), max(len(v) for v in vectors)))  # past a row's end: 0
        for j, v in enumerate(vectors):
            rows[j, : len(v)] = v
    else:
        rows = _vector("acceptance", acceptance)[None]
    sums = rows.sum(axis=1)
    if check_sum and float(sums.max()) > 1.0 + 1e-6:
        j = int(np.argmax(sums))
        where = f"row {j} " if len(rows) > 1 else ""
        raise ValueError(
            f"acceptance is Sequoia's positional vector (P[k] = P(the k-th child is the one "
            f"accepted)), so it sums to at most 1; got {where}sum {float(sums[j]):.6f}. Convert "
            "conditional rates with positional_from_conditional"
        )
    return rows


def draft_call_widths(tree: TokenTree) -> list:
    """Tokens fed by each draft call that drafts `tree` level by level (`TreeDrafter`).

    Call 0 feeds the root and gives q at it; call d feeds the nodes of depth d (d = 1 .. D - 1).
    A chain of gamma: [1] * gamma. A lone root: [] (nothing drafted).
    """
    return [1] + [end - first for first, end in tree.levels[1:-1]] if tree.max_depth else []


def hardware_aware_tree(
    acceptance,
    verify_cost,
    draft_cost,
    max_depths=None,
) -> tuple[TokenTree, list]:
    """Sequoia's hardware-aware choice of tree size and depth (paper §4.1).

    For every measured size n and depth bound d, takes `optimal_tree(acceptance, n, d)` and
    predicts its speedup over autoregressive decoding,

        speedup(n, d) = (1 + E[accepted]) * T(1) / (T(n) + sum over the draft's calls of
                        draft_cost(tokens fed by that call)),

    where the draft's calls are those `TreeDrafter` makes, one per depth: the root (1 token), then
    the nodes of depths 1 .. D - 1 (leaves are drawn, never fed); see `draft_call_widths`.

    It returns the best. On a CPU, T(n) grows with n and small trees win; on an accelerator
    T(n) is nearly flat up to a few hundred tokens and the same acceptance vector picks a big tree.

    Args:
      acceptance: the positional vector P, or a per-depth matrix (see `optimal_tree`).
      verify_cost: {n: T(n)}, the time of one target call scoring n tokens; must include n = 1
        (autoregressive decoding's cost per token).
      draft_cost: the time of one draft call: a number (the same for every width) or a callable
        width -> time (one call scores a whole level).
      max_depths: depth bounds to try (None: 1 .. 16).

    Returns:
      (the best tree, every candidate as a dict {nodes, max_depth, depth, expected_accepted,
      tokens_per_call, cost, speedup}, sorted best first).
    """
    costs = {int(n): float(t) for n, t in dict(verify_cost).items()}
    if 1 not in costs:
        raise ValueError(f"verify_cost must include n = 1 (the AR step); got sizes {sorted(costs)}")
    if any(not t > 0 for t in costs.values()):
        raise ValueError(f"verify_cost times must be > 0; got {costs}")
    draft = draft_cost if callable(draft_cost) else (lambda width, c=float(draft_cost): c)
    depths = tuple(range(1, 17)) if max_depths is None else tuple(int(d) for d in max_depths)
    rows = _acceptance_rows(acceptance)
    if any(d < 1 for d in depths):
        raise ValueError(f"max_depths must be >= 1; got {depths}")
    n_max, d_max = max(costs), max(depths)
    by_depth = _by_depth(acceptance)
    if not by_depth:
        table, choice = _solve(rows[0], n_max, max(1, min(d_max, n_max - 1)))
    candidates, seen = [], set()
    for n in sorted(costs):
        for d in depths if n > 1 else (0,):
            if by_depth:  # the optimum depends on the bound through every subtree's depth
                tree = optimal_tree(rows, n, min(d, n - 1))
            else:
                bound = min(d, n - 1, table.shape[0] - 1)
                tree = tree_from_nested(_build(table, choice, n, bound))
            if (tree, n) in seen:  # a looser bound that did not bind
                continue
            seen.add((tree, n))
            value = expected_accepted(tree, acceptance)
            cost = costs[n] + sum(draft(w) for w in draft_call_widths(tree))
            candidates.append(
                {
                    "tree": tree,
                    "nodes": n,
                    "max_depth": d,
                    "depth": tree.max_depth,
                    "expected_accepted": value,
                    "tokens_per_call": 1.0 + value,
                    "cost": cost,
                    "speedup": (1.0 + value) * costs[1] / cost,
                }
            )
    candidates.sort(key=lambda c: -c["speedup"])
    return candidates[0]["tree"], candidates
