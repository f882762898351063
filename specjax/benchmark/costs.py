"""Per-call costs measured inside a device loop: T_target(k), T_draft, and c.

A jitted call from Python pays ~0.3 ms of dispatch that the decoding `while_loop` does not (see
the perf notes), so costs are measured the way the loop pays them: `steps` calls of the model
inside one `lax.fori_loop`, each scoring k tokens at the same cache position (the length is
rolled back after every call), divided by `steps`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from specjax.benchmark.timing import Timing, time_call


@functools.partial(jax.jit, static_argnums=(0, 4))
def _repeat_calls(model, params, state, tokens, steps):
    """Runs `steps` forward calls of tokens [batch, k] from the same cache position."""
    num_new = jnp.full((tokens.shape[0],), tokens.shape[1], jnp.int32)
    start = state.lengths

    def body(i, carry):
        state, acc = carry
        logits, new_state = model.apply(params, state, (tokens + i) % model.vocab_size, num_new)
        # Consume the logits so the call is not dead code; roll back to the same position.
        return new_state.replace(lengths=start), acc + logits[:, -1, 0].sum()

    state, acc = jax.lax.fori_loop(0, steps, body, (state, jnp.zeros((), jnp.float32)))
    return acc, state.lengths


def prefilled_state(model, params, batch: int, context: int, cache_len: int, seed: int = 0):
    """A model state holding `context` random tokens per row."""
    tokens = jax.random.randint(jax.random.PRNGKey(seed), (batch, context), 0, model.vocab_size)
    state = model.init_state(batch, cache_len)
    _, state = jax.jit(model.apply)(params, state, tokens, jnp.full((batch,), context, jnp.int32))
    return state


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

    Returns:
      Timing whose median is seconds per single call.
    """
    if k < 1 or context + k > cache_len:
        raise ValueError(
            f"need 1 <= k and context + k <= cache_len; got k={k}, "
            f"context={context}, cache_len={cache_len}"
        )
    state = prefilled_state(model, params, batch, context, cache_len)
    tokens = jnp.zeros((batch, k), jnp.int32)
    t = time_call(lambda: _repeat_calls(model, params, state, tokens, steps), repeats=repeats)
    return Timing(t.median / steps, tuple(s / steps for s in t.samples))


def cost_curve(model, params, max_k: int, **kwargs) -> dict:
    """T(k) in seconds for k = 1..max_k (see `call_cost` for kwargs)."""
    return {k: call_cost(model, params, k, **kwargs).median for k in range(1, max_k + 1)}


def _rewind(state, start):
    """`state` with every length put back to `start`'s: the next step repeats the same position.

    The token buffer and the caches' contents are carried (so their writes are real work, as in
    the decoding loop); only the lengths, budgets and done flags go back.
    """
    state = state.replace(seq=start.seq.replace(tokens=state.seq.tokens))
    for name in ("model_state", "target_state", "draft_state"):
        if hasattr(state, name):
            lengths = getattr(start, name).lengths
            state = state.replace(**{name: getattr(state, name).replace(lengths=lengths)})
    return state


@functools.partial(jax.jit, static_argnums=(0, 3))
def _repeat_steps(decoder, params, state, steps):
    """Runs `steps` loop iterations of `decoder` from the same position (fresh keys each)."""

    def body(i, s):
        del i
        return _rewind(decoder.step(*params, s), state)

    out = jax.lax.fori_loop(0, steps, body, state)
    return out.seq.tokens, out.stats.emitted


def iteration_cost(decoder, params: tuple, prompts, *, steps: int = 32, repeats: int = 5) -> Timing:
    """Seconds per decoding-loop iteration of `decoder` (its whole `step`), measured in-loop.

    Where `call_cost` times the model calls an iteration makes, this times everything the
    loop does per iteration: the model calls plus sampling, warping, acceptance, the sequence
    update, rollback and statistics. The difference is the loop's overhead, which the paper's
    cost model (and `theory.measured_speedup`) leaves out.

    Args:
      decoder: an `AutoregressiveDecoder` or `SpeculativeDecoder`.
      params: the positional parameter arguments of its `step`: (target_params,) or
        (target_params, draft_params).
      prompts: the prompts the iterations continue (as for `generate`).
      steps: iterations per timed loop; each starts from the same prefilled state with a new
        PRNG key (the step counter advances), so no iteration repeats another's work.
      repeats: timed loops.

    Returns:
      Timing whose median is seconds per iteration.
    """
    budget = getattr(decoder, "gamma", 0) + 1  # one iteration's tokens fit: nothing truncates
    tokens, lengths = decoder.prepare(prompts, budget)
    state = jax.jit(decoder.init)(*params, tokens, lengths, jax.random.PRNGKey(0), budget, -1)
    t = time_call(lambda: _repeat_steps(decoder, params, state, steps), repeats=repeats)
    return Timing(t.median / steps, tuple(s / steps for s in t.samples))
