"""The timing harness's mechanics (what it runs, not how fast: speed is never asserted)."""

import jax
import numpy as np
import pytest
from decoding_setup import GAMMA, PROMPTS, SAMPLING, ar_decoder, drafts, spec_decoder, target_params

from specjax.benchmark import costs
from specjax.decoding import loop


def _start(decoder, params, prompts):
    budget = decoder.tokens_per_step
    tokens, lengths = loop.prepare(decoder, prompts, budget)
    return loop.init_jit(decoder, params, tokens, lengths, jax.random.PRNGKey(0), budget, -1)


def test_repeated_iterations_restart_from_the_same_position():
    draft, dparams = drafts()["noisy_self"]
    spec = spec_decoder(draft, SAMPLING)
    params = (target_params(), dparams)
    start = _start(spec, params, [PROMPTS[0]])
    # One repeated step is exactly one decoding step.
    tokens, emitted = costs._repeat_steps(spec, params, start, 1)
    once = loop.step_jit(spec, params, start)
    np.testing.assert_array_equal(tokens, once.seq.tokens)
    np.testing.assert_array_equal(emitted, once.stats.emitted)
    # Many: every iteration emits 1..γ+1 tokens at the same position, with fresh keys (the
    # counts differ between iterations, so they were not all the same computation).
    steps = 40
    _, emitted = costs._repeat_steps(spec, params, start, steps)
    assert steps <= int(emitted[0]) <= steps * (GAMMA + 1)
    per_step = [int(costs._repeat_steps(spec, params, start, k)[1][0]) for k in range(1, 6)]
    assert len(set(np.diff([0] + per_step))) > 1


def test_iteration_cost_times_both_decoders():
    ar = ar_decoder(SAMPLING)
    timing = costs.iteration_cost(ar, (target_params(),), [PROMPTS[0]], steps=4, repeats=2)
    assert timing.median > 0 and len(timing.samples) == 2
    _, emitted = costs._repeat_steps(
        ar, (target_params(),), _start(ar, (target_params(),), [PROMPTS[0]]), 7
    )
    assert int(emitted[0]) == 7  # autoregressive: one token per iteration


def test_iteration_cost_rejects_prompts_that_do_not_fit():
    ar = ar_decoder(SAMPLING)
    with pytest.raises(ValueError, match="cache_len"):
        costs.iteration_cost(ar, (target_params(),), [np.zeros(70, np.int32)], steps=2)


def test_tree_call_scores_a_chain_tree_like_a_chain_call():
    from decoding_setup import TARGET

    from specjax.decoding.tree import TokenTree

    params = target_params()
    state = costs.prefilled_state(TARGET, params, 1, 8, 32)
    tokens = jax.numpy.arange(4, dtype=jax.numpy.int32)[None, :]  # [1, 4]
    chain, _ = costs._repeat_calls(TARGET, params, state, tokens, 3)
    as_tree, _ = costs._repeat_calls(TARGET, params, state, tokens, 3, TokenTree.chain(3))
    np.testing.assert_allclose(as_tree, chain, rtol=1e-5)
    # A wide tree's nodes see only the root: other logits than the chain's.
    wide, _ = costs._repeat_calls(TARGET, params, state, tokens, 3, TokenTree.from_branching((3,)))
    assert not np.allclose(wide, chain, rtol=1e-5)
    timing = costs.tree_call_cost(
        TARGET,
        params,
        TokenTree.from_branching((2, 1)),
        context=8,
        cache_len=32,
        steps=2,
        repeats=2,
    )
    assert timing.median > 0 and len(timing.samples) == 2
    with pytest.raises(ValueError, match="cache_len"):
        costs.tree_call_cost(TARGET, params, TokenTree.chain(3), context=30, cache_len=32)
