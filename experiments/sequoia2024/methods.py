"""The trees Sequoia compares, built for an exact size n (tokens scored per call, root included).

  chain    a single chain of n - 1 drafts (Leviathan et al.);
  kchains  k independent chains hanging from the root (SpecInfer's "k sequences"), their
           lengths as equal as possible, the longer ones first;
  binary   a fixed tree: two children per node, filled breadth-first;
  sequoia  `optimal_tree` for a positional acceptance vector;
  kchains_wo, binary_wo  the same fixed trees verified without replacement (Sequoia's rule;
           the draft's top-k at t = 0): the contrast of experiment 2.

Each method comes with the sibling rule it is verified by (`REPLACEMENT`) and the rank-acceptance
rule whose vector predicts it (`ACCEPTANCE_RULE`), and `method_decoder` builds the decoder that
verifies it.
"""

from __future__ import annotations

from specjax.decoding import SpeculativeDecoder, TokenTree, TreeSpeculativeDecoder, optimal_tree

# Sampled siblings drawn independently (SpecInfer) or without replacement (Sequoia).
REPLACEMENT = {
    "chain": True,
    "kchains": True,
    "binary": True,
    "sequoia": False,
    "kchains_wo": False,
    "binary_wo": False,
}
# specjax.rank_acceptance rule whose positional vector describes each method's verification.
ACCEPTANCE_RULE = {m: "with" if r else "without" for m, r in REPLACEMENT.items()}


def chain(n: int) -> TokenTree:
    """n - 1 drafts in a row."""
    return TokenTree.chain(n - 1)


def k_chains(n: int, k: int) -> TokenTree:
    """min(k, n - 1) chains from the root with n - 1 nodes in all (longer chains first)."""
    k = max(1, min(k, n - 1))
    lengths = [(n - 1) // k + (1 if i < (n - 1) % k else 0) for i in range(k)]
    parents = [-1] + [0] * k  # the chains' heads: the root's children, ranks 0..k-1
    tails = list(range(1, k + 1))
    for depth in range(1, max(lengths)):
        for i, length in enumerate(lengths):
            if length > depth:
                parents.append(tails[i])
                tails[i] = len(parents) - 1
    return TokenTree(tuple(parents))


def binary(n: int) -> TokenTree:
    """Two children per node, breadth-first: node i's parent is (i - 1) // 2."""
    return TokenTree(tuple([-1] + [(i - 1) // 2 for i in range(1, n)]))


def build(method: str, n: int, acceptance=None, k: int = 4, max_depth: int | None = None):
    """The tree of `method` with n nodes (n >= 2); `acceptance` is needed by "sequoia"."""
    if n < 2:
        raise ValueError(f"n must be >= 2 (n = 1 is autoregressive decoding); got {n}")
    if method == "chain":
        return chain(n)
    if method in ("kchains", "kchains_wo"):
        return k_chains(n, k)
    if method in ("binary", "binary_wo"):
        return binary(n)
    if method == "sequoia":
        if acceptance is None:
            raise ValueError("method 'sequoia' needs the positional acceptance vector")
        return optimal_tree(acceptance, n, max_depth)
    raise ValueError(f"method must be one of {tuple(REPLACEMENT)}; got {method!r}")


def method_decoder(config, target, draft, warper, method: str, tree):
    """The decoder of one method's tree (the chain decoder for chains)."""
    if tree.max_branch == 1:  # a chain, whatever the method: the chain decoder
        return SpeculativeDecoder(
            target, draft, tree.num_nodes - 1, warper, cache_len=config.cache_len
        )
    replacement = REPLACEMENT[method]
    # With replacement, children are sampled even from a greedy draft (SpecInfer's rule: at
    # t = 0 they repeat one token); without, a greedy draft gives its top-k.
    children = "sample" if replacement else "auto"
    return TreeSpeculativeDecoder(
        target,
        draft,
        tree,
        warper,
        replacement=replacement,
        children=children,
        cache_len=config.cache_len,
    )
