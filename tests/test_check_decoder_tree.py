"""`testing.check_decoder` on token-tree decoders, and a biased tree decoder it must flag.

Set-up as test_check_decoder.py (`tiny_bigram_pair(5, seed=0)`, 2^14 rows, one prompt, first
L = max(3, depth + 1) tokens against the exact law, p < 1e-6 per check): chain-shaped and
branching trees, with and without replacement, must pass (<= 6 checks each, 4 decoders: false
failure <= 2.4e-5, Bonferroni). The negative control keeps r = p after a rejected sibling
(ALGORITHMS.md §1, bug (a)), through the independent rule of tests/tree_reference.py; with
these seeds it fails its joint check at p ~ 5e-217 (statistic 1284 on 79 dof), and the same
plumbing with the bug off passes, so the failure is the bug's.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import pytest
from check_decoder_setup import PAIR, T1, check
from tree_reference import make_switches, reference_accept

from specjax.decoding import TokenTree, TreeSpeculativeDecoder

# Bigram pairs, four calls per program: level 1 costs more than it saves (tests/conftest.py).
pytestmark = pytest.mark.compile_bound


def _tree(branching, replacement=True, cls=TreeSpeculativeDecoder):
    target, _, draft, _ = PAIR
    tree = TokenTree.from_branching(branching)
    return cls(target, draft, tree, T1, replacement=replacement, cache_len=32)


@pytest.mark.parametrize(
    ("make", "greedy"),
    [
        (lambda: _tree((1, 1, 1)), False),
        (lambda: _tree((2, 2), replacement=True), True),
        (lambda: _tree((3, 1), replacement=False), False),
    ],
    ids=["chain_shaped", "2x2_with_replacement", "3x1_without_replacement"],
)
def test_lossless_tree_decoders_pass(make, greedy):
    decoder = make()
    report = check(decoder, greedy=greedy)
    assert report.passed, str(report)
    assert report.num_checks == max(3, decoder.tokens_per_step) + 1 + greedy


@dataclasses.dataclass(frozen=True)
class NoSiblingResidualTree(TreeSpeculativeDecoder):
    """A tree decoder whose verifier keeps r = p after a rejected sibling (ALGORITHMS.md §1,
    bug (a)): the independent reference rule of tests/tree_reference.py with that bug on
    (`bug=None`: the reference rule without a bug)."""

    bug: str | None = "no_residual_update"

    def verify(self, key, proposal, p):
        tree = self.tree
        batch = proposal.tokens.shape[0]
        nodes = jnp.concatenate([jnp.zeros((batch, 1), jnp.int32), proposal.tokens], axis=1)
        q = jnp.concatenate([jnp.zeros_like(proposal.probs[:, :1]), proposal.probs], axis=1)
        switches = make_switches(self.bug)
        tokens, n = reference_accept(
            key, tree.parents, nodes, q, p, replacement=self.replacement, switches=switches
        )
        # The accepted path: at each depth the first child of the last node holding the token.
        slots = jnp.asarray(tree.child_slots())  # [N, branch], -1 padded
        node = jnp.zeros((batch,), jnp.int32)
        path = [node]
        for d in range(tree.max_depth):
            kids = slots[node]  # [batch, branch]
            kid_tokens = jnp.take_along_axis(nodes, jnp.maximum(kids, 0), axis=1)
            hit = (kids >= 0) & (kid_tokens == tokens[:, d : d + 1])
            node = jnp.take_along_axis(kids, jnp.argmax(hit, axis=1)[:, None], axis=1)[:, 0]
            path.append(jnp.where(d < n, node, -1))
            node = jnp.maximum(node, 0)
        tokens = jnp.where(tokens < 0, 0, tokens)
        return tokens, n, jnp.stack(path, axis=1)


def test_stopped_rows_of_prompts_side_by_side_pass():
    """A tree without replacement with EOS (`eos_id=3`: the stopped stream's law) and two
    prompts in every call (`mixed=True`). 2 x 4 checks at 1e-6: false failure <= 8e-6."""
    tree = _tree((3, 1), replacement=False)
    report = check(tree, ((1, 2), (4, 0)), greedy=False, eos_id=3, mixed=True)
    assert report.passed and report.num_checks == 8, str(report)


def test_a_tree_without_the_residual_update_between_siblings_fails():
    report = check(_tree((3, 2), cls=NoSiblingResidualTree), greedy=False)
    assert not report.passed and report.min_pvalue < 1e-20, str(report)


def test_the_biased_tree_plumbing_without_its_bug_passes():
    # The negative control's plumbing (reference rule, recovered path) is lossless with the bug
    # off, so the failure above is the bug's.
    target, _, draft, _ = PAIR
    tree = TokenTree.from_branching((3, 2))
    decoder = NoSiblingResidualTree(target, draft, tree, T1, cache_len=32, bug=None)
    report = check(decoder, greedy=False)
    assert report.passed, str(report)
