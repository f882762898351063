"""The tree shapes the trees experiment measures, each built for an exact node count N.

N counts the nodes the target scores in one call, the root (the last committed token)
included, so a chain of γ drafts is N = γ + 1 and T(N) compares a tree with the chain of the
same verification width.
"""

from __future__ import annotations

import heapq

from specjax.decoding import TokenTree


def _from_paths(paths) -> TokenTree:
    """The TokenTree of a set of rank paths (() is the root; (0, 1) = rank 1 under rank 0).

    Every prefix of a path must be in the set, and a node of rank r > 0 needs its sibling of
    rank r - 1: siblings are then exactly ranks 0..k - 1, numbered breadth-first.
    """
    paths = set(paths) | {()}
    for p in paths:
        if p and (p[:-1] not in paths or (p[-1] > 0 and p[:-1] + (p[-1] - 1,) not in paths)):
            raise ValueError(f"path {p} lacks its parent or its previous sibling")
    index, parents = {(): 0}, [-1]
    level = [()]
    while level:
        nxt = []
        for parent in level:  # parents in index order, children in rank order
            r = 0
            while parent + (r,) in paths:
                child = parent + (r,)
                index[child] = len(parents)
                parents.append(index[parent])
                nxt.append(child)
                r += 1
        level = nxt
    return TokenTree(tuple(parents))


def wide(n: int) -> TokenTree:
    """The root's n - 1 children: depth 1, the widest tree of n nodes."""
    return TokenTree.from_branching((n - 1,))


def spine(n: int) -> TokenTree:
    """A rank-0 path of depth ceil((n - 1) / 2), each of its top depths with a rank-1 sibling.

    n = 8: the path has depth 4 and depths 1..3 carry a second child (4 + 3 = 7 nodes).
    """
    depth = -(-(n - 1) // 2)
    extra = n - 1 - depth
    paths = {(0,) * d for d in range(1, depth + 1)}
    paths |= {(0,) * (d - 1) + (1,) for d in range(1, extra + 1)}
    return _from_paths(paths)


def best_first(n: int, rank_prior) -> TokenTree:
    """The n - 1 nodes most likely to be reached when the rank-r child is accepted w.p. prior[r].

    A node is reached with the product of its path's priors (Sequoia's positional acceptance
    model). That score never grows from a node to its child or its next sibling, so the top
    n - 1 scores form a valid tree, and taking them best-first maximises the expected number of
    accepted tokens for this prior.

    Args:
      n: nodes including the root.
      rank_prior: prior[r] for ranks 0..len - 1 (non-increasing); no node of higher rank.
    """
    prior = [float(x) for x in rank_prior]
    if any(b > a for a, b in zip(prior[:-1], prior[1:], strict=True)) or not prior:
        raise ValueError(f"rank_prior must be non-empty and non-increasing; got {rank_prior}")
    chosen = set()
    heap = [(-prior[0], (0,))]
    while len(chosen) < n - 1:
        neg, path = heapq.heappop(heap)
        chosen.add(path)
        heapq.heappush(heap, (neg * prior[0], path + (0,)))  # its first child
        if path[-1] + 1 < len(prior):  # its next sibling
            sib = path[:-1] + (path[-1] + 1,)
            heapq.heappush(heap, (neg / prior[path[-1]] * prior[path[-1] + 1], sib))
    return _from_paths(chosen)


def build(shape: str, n: int, rank_prior=None) -> TokenTree:
    """The tree of a named shape ("wide", "spine", "best", "chain") with n nodes."""
    if n < 2:
        raise ValueError(f"a tree needs n >= 2 nodes (the root and a child); got {n}")
    if shape == "wide":
        return wide(n)
    if shape == "spine":
        return spine(n)
    if shape == "best":
        return best_first(n, rank_prior)
    if shape == "chain":
        return TokenTree.chain(n - 1)
    raise ValueError(f"unknown tree shape {shape!r}; one of wide, spine, best, chain")


def describe(tree: TokenTree) -> str:
    """Nodes per depth, e.g. "1-3-2-1" (root first)."""
    return "-".join(str(hi - lo) for lo, hi in tree.levels)
