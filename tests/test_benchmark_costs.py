"""The timing harness's mechanics (what it runs, not how fast: speed is never asserted)."""

import jax
import numpy as np
import pytest
from decoding_setup import GAMMA, PROMPTS, SAMPLING, ar_decoder, drafts, spec_decoder, target_params

from specjax.benchmark import costs
from specjax.decoding import loop


def test_repeated_iterations_restart_from_the_same_position():
    draft, dparams = drafts()["noisy_self"]
    spec = spec_decoder(draft, SAMPLING)
    params = (target_params(), dparams)
    start = costs.loop_start(spec, params, [PROMPTS[0]])
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
        ar, (target_params(),), costs.loop_start(ar, (target_params(),), [PROMPTS[0]]), 7
    )
    assert int(emitted[0]) == 7  # autoregressive: one token per iteration


def test_iteration_cost_rejects_prompts_that_do_not_fit():
    ar = ar_decoder(SAMPLING)
    with pytest.raises(ValueError, match="cache_len"):
        costs.iteration_cost(ar, (target_params(),), [np.zeros(70, np.int32)], steps=2)


def test_tree_call_scores_a_chain_tree_like_a_chain_call():
    from decoding_setup import TARGET

    from specjax.decoding import TokenTree

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


def test_ratio_interval_of_paired_repeats():
    from specjax.benchmark.timing import coefficient_of_variation, ratio_interval

    assert ratio_interval([1.0], [0.5]) is None  # one repeat: no interval
    low, high = ratio_interval([2.0, 2.0, 2.0], [1.0, 1.0, 1.0])
    assert low == pytest.approx(2.0) and high == pytest.approx(2.0)
    # Drift shared by a round cancels: both calls twice as slow in round 2.
    low, high = ratio_interval([2.0, 4.0, 2.0], [1.0, 2.0, 1.0])
    assert low == pytest.approx(2.0) and high == pytest.approx(2.0)
    low, high = ratio_interval([1.0, 1.2, 0.9], [1.0, 1.0, 1.0])
    assert low < 1.0 < high < 1.6
    with pytest.raises(ValueError, match="equal-length"):
        ratio_interval([1.0, 2.0], [1.0])
    assert coefficient_of_variation([1.0]) == 0.0
    assert coefficient_of_variation([1.0, 3.0]) == pytest.approx(2**0.5 / 2)


def test_costs_name_params_of_the_wrong_model():
    small, small_params = drafts()["transformer"]
    target = ar_decoder().model
    with pytest.raises(ValueError, match="params do not fit the model they are passed for"):
        costs.call_cost(target, small_params, 1, context=4, cache_len=16, steps=1, repeats=1)
    decoder = spec_decoder(small, SAMPLING)
    with pytest.raises(ValueError, match="target_params do not fit"):
        costs.iteration_cost(decoder, (small_params, target_params()), list(PROMPTS), steps=1)


def test_timed_loops_update_their_state_in_place():
    """The runners donate their state to each timed run, so the compiled loops take no copy of
    the KV caches (a per-run copy added 3-5 ms to each T(k) of the real target at 4 calls per
    run); the non-donating version copies every one (the count can fail), and the runner
    repeats the same calls."""
    from decoding_setup import TARGET

    import specjax
    from specjax.benchmark.hlo import count_cache_copies

    # Without XLA:CPU's copy-insertion flag (conftest.py sets it) every program copies the
    # caches inside its loop, donated or not.
    assert specjax.configure_cpu(), "the XLA:CPU copy-insertion flag is off (tests/conftest.py)"
    params = target_params()
    tokens = jax.numpy.zeros((1, 3), jax.numpy.int32)
    state = costs.prefilled_state(TARGET, params, 1, 8, 32)
    cache_shape = state.keys[0].shape
    lower = lambda f: f.lower(TARGET, params, state, tokens, 2).compile().as_text()  # noqa: E731
    assert count_cache_copies(lower(costs._repeat_calls), cache_shape) >= 2 * len(state.keys)
    assert count_cache_copies(lower(costs._repeat_calls_donated), cache_shape) == 0
    ar = ar_decoder(SAMPLING)
    start = costs.loop_start(ar, (params,), [PROMPTS[0]])
    ar_cache = [x.shape for x in jax.tree.leaves(start.model_states) if x.ndim == 4][0]
    steps_hlo = lambda f: f.lower(ar, (params,), start, 2).compile().as_text()  # noqa: E731
    assert count_cache_copies(steps_hlo(costs._repeat_steps), ar_cache) >= len(state.keys)
    assert count_cache_copies(steps_hlo(costs._repeat_steps_donated), ar_cache) == 0
    expected, _ = costs._repeat_calls(TARGET, params, state, tokens, 2)
    run = costs.call_runner(TARGET, params, 3, context=8, cache_len=32, steps=2)
    for _ in range(3):  # each run donates the state the last one returned
        np.testing.assert_array_equal(run(), expected)
