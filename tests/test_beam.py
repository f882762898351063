"""Beam search (decoding/decoders/beam.py) against hand-computed answers and a Python reference."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decoding import AutoregressiveDecoder, BeamSearchDecoder, make_warper
from specjax.decoding.decoders.beam import beam_jit
from specjax.models import NgramLM
from tests.beam_reference import beam_search
from tests.beam_setup import CACHE_LEN, MAX_NEW, PROMPTS, TARGET, V, reference_logp, target_params


def hypotheses(result):
    """[[generated tokens as a list, per hypothesis] per row]."""
    return [[h.tolist() for h in row] for row in result.new_tokens()]


# A bigram table over 4 tokens, token 0 the EOS. Next-token probabilities after each token:
TABLE = np.array(
    [
        [0.05, 0.05, 0.05, 0.85],  # after 0 (unused when 0 is the EOS)
        [0.10, 0.40, 0.30, 0.20],  # after 1
        [0.02, 0.03, 0.05, 0.90],  # after 2
        [0.45, 0.50, 0.04, 0.01],  # after 3
    ]
)
TABLE_MODEL = NgramLM(4, 2)
TABLE_PARAMS = {"log_probs": jnp.asarray(np.log(TABLE), jnp.float32)}


def test_hand_written_beats_greedy():
    """No EOS, B=2, two tokens after [3], length_penalty 0.

    Greedy takes 1 (0.5), then 1 (0.4): 0.20. Beam search also keeps 0 (0.45), whose 3 (0.85)
    gives 0.3825. Step 2's candidates: [0, 3] 0.3825, [1, 1] 0.20, [1, 2] 0.15, [1, 3] 0.10, ...
    """
    dec = BeamSearchDecoder(TABLE_MODEL, num_beams=2, length_penalty=0.0, cache_len=16)
    result = dec.generate(TABLE_PARAMS, [np.array([3])], max_new_tokens=2)
    assert hypotheses(result) == [[[0, 3], [1, 1]]]
    np.testing.assert_allclose(result.scores[0], np.log([0.45 * 0.85, 0.5 * 0.4]), atol=1e-6)


def test_hand_written_eos_and_length_penalty():
    """EOS = 0, B=2, prompt [3], 2 tokens, length_penalty 1.

    Step 1 candidates (best first): 1 (0.5), EOS (0.45), 2 (0.04), 3 (0.01). EOS has rank 1 < B,
    so [0] is finished with score log(0.45) / 1; the live beams are [1] and [2].
    Step 2: from [1]: 1 (0.20), 2 (0.15), 3 (0.10), EOS (0.05); from [2]: 3 (0.036), ...
    The top 2B = 4 are all children of [1]; its EOS child has rank 3 >= B: not kept. The live
    beams [1, 1] and [1, 2] reach the budget and finish with log(0.2) / 2 and log(0.15) / 2.
    Kept (B=2): [0] (-0.799) and [1, 1] (-0.805); [1, 2] (-0.949) is dropped.
    """
    dec = BeamSearchDecoder(TABLE_MODEL, num_beams=2, length_penalty=1.0, cache_len=16)
    result = dec.generate(TABLE_PARAMS, [np.array([3])], max_new_tokens=2, eos_id=0)
    assert hypotheses(result) == [[[0], [1, 1]]]
    np.testing.assert_allclose(result.scores[0], [math.log(0.45), math.log(0.2) / 2], atol=1e-6)
    assert result.lengths.tolist() == [[2, 3]]


@pytest.mark.parametrize(
    "num_beams, length_penalty, eos_id",
    [(1, 0.0, None), (2, 1.0, 3), (4, -0.5, 2), (4, 2.0, 3)],
)
def test_matches_reference(num_beams, length_penalty, eos_id):
    """Tokens exactly and scores within 1e-4 of the Python reference, ragged prompts."""
    dec = BeamSearchDecoder(TARGET, num_beams, length_penalty, cache_len=CACHE_LEN)
    result = dec.generate(target_params(), PROMPTS, max_new_tokens=MAX_NEW, eos_id=eos_id)
    got = hypotheses(result)
    for b, prompt in enumerate(PROMPTS):
        want = beam_search(reference_logp(), prompt, num_beams, length_penalty, eos_id, MAX_NEW)
        assert got[b] == [list(toks) for _, toks in want], f"row {b}"
        np.testing.assert_allclose(result.scores[b], [s for s, _ in want], atol=1e-4)
        assert (result.lengths[b] == len(prompt) + np.array([len(t) for _, t in want])).all()


def test_early_stopping_stops_rows_and_changes_nothing():
    """B=2, EOS 3, length_penalty 0 (the reference never stops early): some row stops before
    the budget (fewer steps than MAX_NEW), and the hypotheses still equal the reference's."""
    max_new = 12
    dec = BeamSearchDecoder(TARGET, 2, 0.0, cache_len=CACHE_LEN)
    result = dec.generate(target_params(), PROMPTS, max_new_tokens=max_new, eos_id=3)
    steps = np.asarray(result.stats.iterations).reshape(len(PROMPTS), 2)[:, 0]
    assert steps.min() < max_new
    for b, prompt in enumerate(PROMPTS):
        want = beam_search(reference_logp(), prompt, 2, 0.0, 3, max_new)
        assert hypotheses(result)[b] == [list(toks) for _, toks in want]


def test_one_beam_is_greedy():
    """B=1 without length penalty: the greedy autoregressive continuation, EOS included."""
    eos = 3
    ar = AutoregressiveDecoder(TARGET, make_warper(0), cache_len=CACHE_LEN)
    want = ar.generate(
        target_params(), PROMPTS, jax.random.PRNGKey(0), MAX_NEW, eos_id=eos
    ).new_tokens()
    dec = BeamSearchDecoder(TARGET, 1, 0.0, cache_len=CACHE_LEN)
    result = dec.generate(target_params(), PROMPTS, max_new_tokens=MAX_NEW, eos_id=eos)
    assert [row[0] for row in hypotheses(result)] == [w.tolist() for w in want]
    assert any(w[-1] == eos for w in want)  # some row really ended at EOS


def test_no_recompile():
    """New max_new_tokens and eos_id values reuse the compiled loop."""
    dec = BeamSearchDecoder(TARGET, 2, 1.0, cache_len=CACHE_LEN)
    dec.generate(target_params(), PROMPTS, max_new_tokens=MAX_NEW, eos_id=3)
    programs = beam_jit._cache_size()
    dec.generate(target_params(), PROMPTS, max_new_tokens=MAX_NEW - 3, eos_id=5)
    dec.generate(target_params(), PROMPTS, max_new_tokens=MAX_NEW, eos_id=None)
    assert beam_jit._cache_size() == programs


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(num_beams=0), "num_beams"),
        (dict(num_beams=2.0), "num_beams"),
        (dict(num_beams=True), "num_beams"),
        (dict(length_penalty=float("nan")), "length_penalty"),
        (dict(length_penalty=float("inf")), "length_penalty"),
        (dict(length_penalty="1"), "length_penalty"),
    ],
)
def test_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        BeamSearchDecoder(TARGET, **kwargs)


def test_bad_call_arguments():
    dec = BeamSearchDecoder(TARGET, 2, 1.0, cache_len=CACHE_LEN)
    with pytest.raises(ValueError, match="eos_id"):
        dec.generate(target_params(), PROMPTS, max_new_tokens=4, eos_id=V)
    with pytest.raises(ValueError, match="max_new_tokens"):
        dec.generate(target_params(), PROMPTS, max_new_tokens=0)
    with pytest.raises(TypeError, match="key must be a JAX PRNG key"):
        dec.generate(target_params(), PROMPTS, key=0, max_new_tokens=4)
    with pytest.raises(ValueError, match="vocabulary"):
        BeamSearchDecoder(NgramLM(1, 1))


def test_nan_logits_are_named():
    # The table model with one NaN row: rows whose beams read it are rejected, naming the target.
    table = TABLE.copy()
    table[3] = np.nan  # next-token law after token 3
    dec = BeamSearchDecoder(TABLE_MODEL, num_beams=2, length_penalty=0.0, cache_len=16)
    params = {"log_probs": jnp.asarray(np.log(table), jnp.float32)}
    with pytest.raises(ValueError, match=r"^the target's logits contained NaN .* target_params"):
        dec.generate(params, [np.array([1, 3])], max_new_tokens=2)
