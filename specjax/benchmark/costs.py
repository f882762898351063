"""Per-call costs measured inside a device loop: T_target(k), T_draft, and c.

A jitted call from Python pays ~0.3 ms of dispatch that the decoding `while_loop` does not
(measured on the 2-core CPU the project is developed on: 6.9 vs 8.2 ms per token for a 25.6M
target, 0.22 vs 0.50 ms for a 0.5M draft), so costs are measured the way the loop pays them:
`steps` calls of the model inside one `lax.fori_loop`, each scoring k tokens at the same cache
position (the length is rolled back after every call), divided by `steps`.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp

from specjax.benchmark.timing import Timing, time_call
from specjax.checks import check_count
from specjax.decoding import arguments, loop
from specjax.decoding.prefill import prefill
from specjax.decoding.trees.topology import tree_inputs
from specjax.models.interface import check_params


def _calls_loop(model, params, state, tokens, steps, tree=None):
    """Runs `steps` forward calls of tokens [batch, k] from the same cache position; returns
    (the logits' checksum, the state after the last call with its lengths rolled back).

    With a `tree` (k = tree.num_nodes), each call scores the nodes with the tree's positions and
    ancestor mask (`tree_inputs`, the root at the current length), as a tree verification does.
    """
    num_new = jnp.full((tokens.shape[0],), tokens.shape[1], jnp.int32)
    start = state.lengths
    inputs = {}
    if tree is not None:
        max_len = jax.tree.leaves(state)[0].shape[1]  # cache slots per row
        positions, mask = tree_inputs(tree, start, max_len)
        inputs = dict(positions=positions, mask=mask)

    def body(i, carry):
        state, acc = carry
        toks = (tokens + i) % model.vocab_size
        logits, new_state = model.apply(params, state, toks, num_new, **inputs)
        # Consume the logits so the call is not dead code; roll back to the same position.
        return new_state.replace(lengths=start), acc + logits[:, -1, 0].sum()

    state, acc = jax.lax.fori_loop(0, steps, body, (state, jnp.zeros((), jnp.float32)))
    return acc, state


@functools.partial(jax.jit, static_argnums=(0, 4, 5))
def _repeat_calls(model, params, state, tokens, steps, tree=None):
    """`_calls_loop` -> (checksum, lengths); `state` stays valid (it is copied into the loop)."""
    acc, state = _calls_loop(model, params, state, tokens, steps, tree)
    return acc, state.lengths


# The timed version: the state is donated, so the loop updates its buffers in place as the
# decoding loop does. Without donation XLA copies every buffer of the state into the loop at
# each run, a cost the decoding loop never pays per call (the real target's 60 KV-cache arrays
# on the 2-core CPU: 3.4 ms added to T(1), 4.9 ms to T(8), at 4 calls per run).
_repeat_calls_donated = jax.jit(_calls_loop, static_argnums=(0, 4, 5), donate_argnums=2)


def _donating_runner(run, state):
    """A zero-argument callable: `run(state) -> (output, new state)` with `state` donated each
    time and the returned one kept for the next run; returns the output."""
    cell = [state]

    def call():
        out, cell[0] = run(cell[0])
        return out

    return call


@functools.partial(jax.jit, static_argnums=0)
def _apply(model, params, state, tokens, num_new):
    # One jitted function for every prefill: a fresh `jax.jit(model.apply)` per call would be
    # a new cache each time, recompiling the same program for every width and round.
    return model.apply(params, state, tokens, num_new)


def prefilled_state(model, params, batch: int, context: int, cache_len: int, seed: int = 0):
    """A model state holding `context` random tokens per row."""
    check_count("batch", batch)
    check_count("context", context, low=0)
    check_params((model,), (params,), ("params",))
    tokens = jax.random.randint(jax.random.PRNGKey(seed), (batch, context), 0, model.vocab_size)
    state = model.init_state(batch, cache_len)
    _, state = _apply(model, params, state, tokens, jnp.full((batch,), context, jnp.int32))
    return state


def call_runner(
    model,
    params,
    k: int,
    *,
    batch: int = 1,
    context: int = 64,
    cache_len: int = 512,
    steps: int = 16,
    tree=None,
):
    """A zero-argument callable running `steps` in-loop calls that score k tokens per row
    (for timing alongside other calls, e.g. `timing.interleaved`); see `call_cost`.

    With a `tree`, k must be tree.num_nodes and the calls score it as a tree verification.
    Every run repeats the same calls at the same position; it returns the logits' checksum.
    The state is donated to each run (updated in place, as in the decoding loop) and the
    returned one kept for the next.
    """
    check_count("k", k)
    check_count("batch", batch)
    check_count("context", context, low=0)
    check_count("cache_len", cache_len)
    check_count("steps", steps)  # per-call times divide by it
    if context + k > cache_len:
        raise ValueError(
            f"need context + k <= cache_len; got k={k}, context={context}, cache_len={cache_len}"
        )
    state = prefilled_state(model, params, batch, context, cache_len)
    tokens = jnp.zeros((batch, k), jnp.int32)
    return _donating_runner(
        lambda s: _repeat_calls_donated(model, params, s, tokens, steps, tree), state
    )


def call_cost(
    model,
    params,
    k: int,
    *,
    batch: int = 1,
    context: int = 64,
    cache_len: int = 512,
    steps: int = 16,
    repeats: int = 5,
    clock=time.perf_counter,
) -> Timing:
    """Seconds per forward call scoring k tokens per row (median over repeats).

    Args:
      model: a specjax model.
      params: its parameters.
      k: tokens per call (1 = a decode step; γ + 1 = a verification).
      batch: rows.
      context: cached tokens before the call (attention cost grows with it).
      cache_len: cache positions (what the decoders would allocate).
      steps: calls per timed loop.
      repeats: timed loops.
      clock: wall time (default) or `time.process_time` (see `timing.time_call`).

    Returns:
      Timing whose median is seconds per single call.
    """
    check_count("repeats", repeats)  # before the prefill compiles
    run = call_runner(
        model, params, k, batch=batch, context=context, cache_len=cache_len, steps=steps
    )
    t = time_call(run, repeats=repeats, clock=clock)
    return Timing(t.median / steps, tuple(s / steps for s in t.samples))


def tree_call_cost(
    model,
    params,
    tree,
    *,
    batch: int = 1,
    context: int = 64,
    cache_len: int = 512,
    steps: int = 16,
    repeats: int = 5,
) -> Timing:
    """Seconds per target call verifying a token tree: T(N) for N = tree.num_nodes (median).

    The same in-loop measurement as `call_cost` with k = N, except that the N tokens are the
    tree's nodes: node i at position context + depth(i), attending to the cached context and
    to its own ancestors (SpecInfer's tree mask, `tree_inputs`). `tree_call_cost(m, p, tree)`
    over `call_cost(m, p, tree.num_nodes)` is what the tree mask adds to a chain of equal width.

    Args:
      model: a specjax model that takes `positions` and `mask` (every model kind does).
      params: its parameters.
      tree: a `TokenTree`.
      batch, context, cache_len, steps, repeats: as for `call_cost`.

    Returns:
      Timing whose median is seconds per single call.
    """
    n = tree.num_nodes
    check_count("repeats", repeats)
    check_count("context", context)
    if context + n > cache_len:
        raise ValueError(
            f"need context + num_nodes <= cache_len; got num_nodes={n}, "
            f"context={context}, cache_len={cache_len}"
        )
    run = call_runner(
        model, params, n, batch=batch, context=context, cache_len=cache_len, steps=steps, tree=tree
    )
    t = time_call(run, repeats=repeats)
    return Timing(t.median / steps, tuple(s / steps for s in t.samples))


@functools.partial(jax.jit, static_argnums=(0, 4))
def _prefill(model, params, tokens, lengths, cache_len):
    return prefill(model, params, model.init_state(tokens.shape[0], cache_len), tokens, lengths)


def prefill_cost(
    model, params, tokens, lengths, *, cache_len: int, repeats: int = 5, clock=time.perf_counter
) -> Timing:
    """Seconds of one prefill of `model` (`decoding.prefill`: every prompt token but the last).

    Args:
      model, params: the model and its parameters.
      tokens: int32 [batch, P] right-padded prompts (`arguments.prepare` buckets them as a decoder
        would).
      lengths: int32 [batch] their lengths.
      cache_len: cache positions.
      repeats: timed calls (after one compiling call).
      clock: wall time (default) or `time.process_time` (see `timing.time_call`).
    """
    return time_call(
        lambda: _prefill(model, params, tokens, lengths, cache_len), repeats=repeats, clock=clock
    )


def cost_curve(model, params, max_k: int, **kwargs) -> dict:
    """T(k) in seconds for k = 1..max_k (see `call_cost` for kwargs)."""
    check_count("max_k", max_k)  # 0 or less: an empty curve
    return {k: call_cost(model, params, k, **kwargs).median for k in range(1, max_k + 1)}


def _rewind(state: loop.LoopState, start: loop.LoopState) -> loop.LoopState:
    """`state` with every length put back to `start`'s: the next step repeats the same position.

    Works for any decoder's LoopState without naming its fields: in the sequences and in every
    model state, buffers (arrays of rank >= 2: the token buffer, KV caches, histories) are
    carried, so their writes are real work as in the decoding loop, while lengths, budgets and
    done flags (rank <= 1) go back to `start`'s. The step counter advances (fresh keys) and the
    statistics accumulate.
    """
    carry_buffers = lambda new, old: new if new.ndim >= 2 else old  # noqa: E731
    return state.replace(
        seq=jax.tree.map(carry_buffers, state.seq, start.seq),
        model_states=jax.tree.map(carry_buffers, state.model_states, start.model_states),
    )


def _steps_loop(decoder, params, state, steps):
    """Runs `steps` loop iterations of `decoder` from the same position (fresh keys each);
    returns the state after the last, rewound (`_rewind`)."""

    def body(i, s):
        del i
        return _rewind(decoder.step(params, s), state)

    return jax.lax.fori_loop(0, steps, body, state)


@functools.partial(jax.jit, static_argnums=0)
def _repeat_steps(decoder, params, state, steps):
    """`_steps_loop` -> (tokens, emitted); `state` stays valid.

    One program per decoder: `steps` is traced, so every count runs the same compiled loop.
    """
    out = _steps_loop(decoder, params, state, steps)
    return out.seq.tokens, out.stats.emitted


@functools.partial(jax.jit, static_argnums=0, donate_argnums=2)
def _repeat_steps_donated(decoder, params, state, steps):
    """The timed version of `_repeat_steps` (see `_repeat_calls_donated`): (emitted, state)."""
    out = _steps_loop(decoder, params, state, steps)
    return out.stats.emitted, out


def iteration_runner(decoder, params: tuple, prompts, *, steps: int = 32):
    """A zero-argument callable running `steps` in-loop iterations of `decoder` from the same
    prefilled position (fresh keys each); see `iteration_cost`.

    The state is donated to each run and the rewound one it returns kept for the next, so the
    step counter (the keys) and the statistics carry on across runs: a run returns the tokens
    emitted per row since the runner was made.
    """
    check_count("steps", steps)  # per-iteration times divide by it
    params = arguments.check_decoder_params(decoder, tuple(params))
    state = loop_start(decoder, params, prompts)
    return _donating_runner(lambda s: _repeat_steps_donated(decoder, params, s, steps), state)


def loop_start(decoder, params: tuple, prompts) -> loop.LoopState:
    """The decoder's loop state after prefilling `prompts`, with room for one iteration's
    tokens (nothing truncates): where `iteration_runner` and the overhead pieces start."""
    budget = decoder.tokens_per_step
    tokens, lengths = arguments.prepare(decoder, prompts, budget)
    return loop.init_jit(decoder, params, tokens, lengths, jax.random.PRNGKey(0), budget, -1)


def iteration_cost(decoder, params: tuple, prompts, *, steps: int = 32, repeats: int = 5) -> Timing:
    """Seconds per decoding-loop iteration of `decoder` (its whole `step`), measured in-loop.

    Where `call_cost` times the model calls an iteration makes, this times everything the
    loop does per iteration: the model calls plus sampling, warping, acceptance, the sequence
    update, rollback and statistics. The difference is the loop's overhead, which the paper's
    cost model (and `theory.measured_speedup`) leaves out.

    Args:
      decoder: any decoder of the loop driver (`decoding/loop.py`).
      params: one params pytree per entry of `decoder.models`: (target_params,) or
        (target_params, draft_params).
      prompts: the prompts the iterations continue (as for `generate`).
      steps: iterations per timed loop; each starts from the same prefilled state with a new
        PRNG key (the step counter advances), so no iteration repeats another's work.
      repeats: timed loops.

    Returns:
      Timing whose median is seconds per iteration.
    """
    check_count("repeats", repeats)  # before the prefill compiles
    run = iteration_runner(decoder, params, prompts, steps=steps)
    t = time_call(run, repeats=repeats)
    return Timing(t.median / steps, tuple(s / steps for s in t.samples))
