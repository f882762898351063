"""Speculative beam search equals plain beam search: same hypotheses, same scores."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from decoding_setup import DRAFT_NAN, nan_params

from specjax.decoding import (
    AutoregressiveDecoder,
    BeamSearchDecoder,
    SpeculativeBeamDecoder,
    TokenTree,
    make_warper,
)
from specjax.decoding.decoders.beam import beam_jit
from specjax.models import UniformLM
from tests.beam_setup import CACHE_LEN, MAX_NEW, PROMPTS, TARGET, drafts, target_params


def hypotheses(result):
    return [[h.tolist() for h in row] for row in result.new_tokens()]


@functools.cache
def plain_decoder(num_beams, length_penalty):
    return BeamSearchDecoder(TARGET, num_beams, length_penalty, cache_len=CACHE_LEN)


def plain(num_beams, length_penalty, eos_id, max_new=MAX_NEW):
    dec = plain_decoder(num_beams, length_penalty)
    return dec.generate(target_params(), PROMPTS, max_new_tokens=max_new, eos_id=eos_id)


def speculative(draft, gamma, num_beams, length_penalty, eos_id, max_new=MAX_NEW, params=None):
    """gamma: an int (a chain) or a branching tuple (a top-k token tree below each beam);
    params: the draft's (default: its own)."""
    model, own = drafts()[draft]
    params = own if params is None else params
    tree = TokenTree.from_branching(gamma) if isinstance(gamma, tuple) else None
    dec = SpeculativeBeamDecoder(
        TARGET,
        model,
        tree.num_nodes - 1 if tree else gamma,
        num_beams,
        length_penalty,
        tree,
        cache_len=CACHE_LEN,
    )
    return dec.generate(target_params(), params, PROMPTS, max_new_tokens=max_new, eos_id=eos_id)


def assert_same(got, want):
    assert hypotheses(got) == hypotheses(want)
    np.testing.assert_array_equal(got.lengths, want.lengths)
    np.testing.assert_allclose(got.scores, want.scores, atol=1e-4)


def beam_steps(result):
    """Beam-search steps each batch row took (its loop iterations while going)."""
    return int(np.asarray(result.stats.emitted).sum())


# Every B in (1, 2, 4), γ in (1, 3) and a tree occur; the plain decoders are shared (3 programs).
# Drafts: a smaller random-weight transformer of another architecture, a bigram table, the
# uniform draft (knows nothing) and, below, the target itself.
@pytest.mark.parametrize(
    "draft, gamma, num_beams, length_penalty, eos_id",
    [
        ("small", 3, 4, -0.5, 2),
        ("small", (2, 2), 4, -0.5, 2),
        ("bigram", 1, 1, 0.0, 3),
        ("uniform", 3, 2, 1.0, 3),
    ],
)
def test_equals_plain_beam_search(draft, gamma, num_beams, length_penalty, eos_id):
    want = plain(num_beams, length_penalty, eos_id)
    got = speculative(draft, gamma, num_beams, length_penalty, eos_id)
    assert_same(got, want)
    assert int(got.stats.target_calls) <= int(want.stats.target_calls)


def test_eos_inside_the_lookahead_and_steps_saved():
    """The target drafting for itself (greedy chains), γ=3, B=2, EOS = the second token of row
    0's greedy continuation: the first iteration's best beam drafts EOS at depth 1 or 2, inside
    the lookahead. Same hypotheses as plain beam search, in fewer target calls summed over
    rows (iterations per row: a row whose beams branch saves nothing)."""
    ar = AutoregressiveDecoder(TARGET, make_warper(0), cache_len=CACHE_LEN)
    greedy = ar.generate(target_params(), PROMPTS[:1], jax.random.PRNGKey(0), 2).new_tokens()
    eos = int(greedy[0][1])
    want = plain(2, 1.0, eos)
    got = speculative("self", 3, 2, 1.0, eos)
    assert_same(got, want)
    assert any(eos in h for row in hypotheses(want) for h in row)
    assert beam_steps(got) == beam_steps(want)
    assert np.asarray(got.stats.iterations).sum() < np.asarray(want.stats.iterations).sum()


@pytest.mark.parametrize("gamma", [3, (2, 2)], ids=["chain", "tree"])
def test_a_nan_draft_is_named(gamma):
    """The draft's greedy chains and top-k trees carry no q: NaN logits are flagged
    (Proposal.draft_nan) and named, though the beams stay the target's (the programs above)."""
    nan = nan_params(drafts()["small"][1])
    with pytest.raises(ValueError, match=DRAFT_NAN):
        speculative("small", gamma, 4, -0.5, 2, params=nan)


def test_no_recompile():
    speculative("uniform", 3, 2, 1.0, 3)
    programs = beam_jit._cache_size()
    speculative("uniform", 3, 2, 1.0, 5, max_new=MAX_NEW - 2)
    speculative("uniform", 3, 2, 1.0, None)
    assert beam_jit._cache_size() == programs


@pytest.mark.parametrize("gamma", [0, 1.5, True])
def test_bad_gamma(gamma):
    with pytest.raises(ValueError, match="gamma"):
        SpeculativeBeamDecoder(TARGET, TARGET, gamma, 2)


def test_bad_tree():
    with pytest.raises(ValueError, match="tree"):
        SpeculativeBeamDecoder(TARGET, TARGET, 2, 2, tree=(2, 1))
    tree = TokenTree.parse("2,2")  # 6 drafted nodes
    with pytest.raises(ValueError, match="gamma=2 contradicts tree"):
        SpeculativeBeamDecoder(TARGET, TARGET, 2, 2, tree=tree)
    assert SpeculativeBeamDecoder(TARGET, TARGET, num_beams=2, tree=tree).gamma == 6
    # The draft's top-k below each beam: no more children per node than its vocabulary (found
    # by the audit failing inside jit, in jax.lax.top_k).
    crowded = TokenTree.from_branching((TARGET.vocab_size + 1,))
    with pytest.raises(ValueError, match=rf"tree: a node has {TARGET.vocab_size + 1} children"):
        SpeculativeBeamDecoder(TARGET, TARGET, num_beams=2, tree=crowded)


def test_bad_pair():
    with pytest.raises(ValueError, match="vocab"):
        SpeculativeBeamDecoder(TARGET, UniformLM(5), 2, 2)
    with pytest.raises(ValueError, match="num_beams"):
        SpeculativeBeamDecoder(TARGET, TARGET, 2, 0)
