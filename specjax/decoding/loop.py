"""One loop driver for every decoder: prepare, the jitted `lax.while_loop`, the Python twin.

A decoder (autoregressive, speculative, and every later one: trees, beams, hierarchies) supplies
only what is its own, through the `Decoder` protocol:

    models           tuple: one entry per params argument (target first), in params order
    cache_len        positions per row in caches and in the output buffer (a decoder's field;
                     None at construction means the models' position limit:
                     `arguments.resolve_cache_len`)
    min_bucket       smallest padded prompt width
    lookahead        positions a step may write past the tokens it emits (γ for speculation)
    tokens_per_step  most tokens one step emits per row (γ + 1 for speculation)
    vocab_size       the target's vocabulary
    init(params, prompts, prompt_lengths, key, max_new_tokens, eos_id) -> LoopState
    step(params, state) -> LoopState

`params` is a tuple with one pytree per entry of `models`. Every decoder's host-facing methods
take them the same way: `decoder.generate(*params, prompts=..., key=..., max_new_tokens=...,
eos_id=None)` (one params pytree per model, target first, then keywords; `stream` alike, and
`ShardedDecoder.generate` too). The older positional forms, `generate(params, prompts, key, n)`
and `generate(target_params, draft_params, prompts, key, n)`, are the same signatures.

This module then does the rest once: host-side argument checks (`arguments.py`: `prepare`
buckets the prompts), the device loop (`generate`), the Python loop that yields each step's
tokens (`stream`), and the jitted `init` / `step` / whole-loop programs that benchmarks, tests
and `ShardedDecoder` reuse. It takes decoders through the protocol and
never imports them (they import it).

`LoopState` is the one loop state: the bookkeeping every decoder shares, a tuple of model states
(in `models` order; a drafter's state stands in the draft's slot), and `extra` for what a
decoder needs beyond that (a γ policy's estimates, beam scores). Code that works with any
decoder (sharding, cost benchmarks) maps over these fields and never names a decoder's type.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import jax
import jax.numpy as jnp
from flax import struct
from jax.sharding import PartitionSpec

from specjax import runtime
from specjax.decoding.arguments import canonical_key, check_decoder_params, eos_value, prepare
from specjax.decoding.state import (
    DecodeStats,
    GenerationResult,
    Sequences,
    check_finite_result,
    init_sequences,
    init_stats,
)
from specjax.models.interface import state_logical_axes


@struct.dataclass
class LoopState:
    """The state of a decoding loop.

    Attributes:
      step: int32 [] loop iteration.
      key: PRNG key of the whole call (step keys are fold_in(key, step)).
      max_new_tokens: int32 [] budget per row (traced: new values do not recompile).
      eos_id: int32 [] end-of-sequence id (-1: none).
      seq: Sequences, prompt plus generated tokens per row.
      prompt_lengths: int32 [batch].
      stats: DecodeStats.
      model_states: tuple, one decoding state per entry of the decoder's `models` (a KV cache,
        an n-gram's lengths, a drafter's state), in that order.
      extra: anything else a decoder carries from step to step (None: nothing).
    """

    step: jax.Array
    key: jax.Array
    max_new_tokens: jax.Array
    eos_id: jax.Array
    seq: Sequences
    prompt_lengths: jax.Array
    stats: DecodeStats
    model_states: tuple
    extra: Any = None

    def logical_axes(self) -> LoopState:
        """PartitionSpecs of logical axes: per-row arrays on `batch`, the rest replicated."""
        whole = lambda tree: jax.tree.map(lambda x: PartitionSpec(*(None,) * x.ndim), tree)  # noqa: E731
        return LoopState(
            step=PartitionSpec(),
            key=whole(self.key),
            max_new_tokens=PartitionSpec(),
            eos_id=PartitionSpec(),
            seq=self.seq.logical_axes(),
            prompt_lengths=PartitionSpec("batch"),
            stats=self.stats.logical_axes(),
            model_states=tuple(state_logical_axes(s) for s in self.model_states),
            extra=None if self.extra is None else state_logical_axes(self.extra),
        )

    def result(self) -> GenerationResult:
        """What `generate` returns for this state."""
        return GenerationResult(self.seq.tokens, self.seq.lengths, self.prompt_lengths, self.stats)


class Decoder(Protocol):
    """What the loop driver needs of a decoder (see the module docstring)."""

    cache_len: int
    min_bucket: int

    @property
    def models(self) -> tuple: ...

    @property
    def lookahead(self) -> int: ...

    @property
    def tokens_per_step(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...

    def init(self, params, prompts, prompt_lengths, key, max_new_tokens, eos_id) -> LoopState: ...

    def step(self, params, state: LoopState) -> LoopState: ...


def new_state(
    prompts,
    prompt_lengths,
    key,
    max_new_tokens,
    eos_id,
    cache_len,
    gamma,
    model_states,
    extra=None,
    branch=None,
) -> LoopState:
    """A LoopState at step 0 for prefilled `model_states` (for decoders' `init`, jittable).

    Args:
      prompts: int32 [batch, P] right-padded prompts.
      prompt_lengths: int [batch].
      key: PRNG key of the call.
      max_new_tokens: int [] budget per row.
      eos_id: int [] (-1: none).
      cache_len: positions of the output buffer.
      gamma: draft positions counted in the statistics (0 for autoregressive decoding).
      model_states: tuple of prefilled model (or drafter) states.
      extra: the decoder's own carried state.
      branch: for token trees, the most children of a node (counts of accepted ranks).
    """
    return LoopState(
        step=jnp.zeros((), jnp.int32),
        key=key,
        max_new_tokens=jnp.asarray(max_new_tokens, jnp.int32),
        eos_id=jnp.asarray(eos_id, jnp.int32),
        seq=init_sequences(prompts, prompt_lengths, cache_len),
        prompt_lengths=prompt_lengths.astype(jnp.int32),
        stats=init_stats(prompts.shape[0], gamma, branch),
        model_states=tuple(model_states),
        extra=extra,
    )


def running(s: LoopState) -> jax.Array:
    """Loop condition: some row is still active (not at EOS, not out of budget)."""
    return ~jnp.all(s.seq.done)


@functools.partial(jax.jit, static_argnums=0)
def init_jit(decoder, params, tokens, lengths, key, max_new_tokens, eos_id) -> LoopState:
    """`decoder.init` jitted (one program per decoder, params structure and prompt bucket)."""
    return decoder.init(params, tokens, lengths, key, max_new_tokens, eos_id)


@functools.partial(jax.jit, static_argnums=0)
def step_jit(decoder, params, s: LoopState) -> LoopState:
    """`decoder.step` jitted: one loop iteration (what `stream` runs per yield)."""
    return decoder.step(params, s)


@functools.partial(jax.jit, static_argnums=0)
def generate_jit(decoder, params, tokens, lengths, key, max_new_tokens, eos_id):
    """The whole generation (prefill, then `lax.while_loop` over steps) as one program."""
    s = decoder.init(params, tokens, lengths, key, max_new_tokens, eos_id)
    s = jax.lax.while_loop(running, lambda s: decoder.step(params, s), s)
    return s.result()


def generate(
    decoder: Decoder, params: tuple, prompts, key, max_new_tokens: int, eos_id: int | None = None
) -> GenerationResult:
    """Generates up to `max_new_tokens` per prompt in one jitted call.

    Args:
      decoder: any decoder (see the module docstring).
      params: one params pytree per entry of `decoder.models`.
      prompts: list of 1-D token sequences (ragged), or int [batch, P].
      key: PRNG key, `jax.random.key` or `jax.random.PRNGKey` (one program serves both:
        `canonical_key`).
      max_new_tokens: >= 1; traced, so new values do not recompile.
      eos_id: stop a row after this token (None: never).

    Returns:
      GenerationResult with per-call statistics (`.summary()` for α, tokens/iteration).
    """
    runtime.check_process_settings()
    key = canonical_key(key)
    tokens, lengths = prepare(decoder, prompts, max_new_tokens)
    params = check_decoder_params(decoder, params)
    result = generate_jit(
        decoder, params, tokens, lengths, key, max_new_tokens, eos_value(eos_id, decoder.vocab_size)
    )
    check_finite_result(result)
    return result


def stream(
    decoder: Decoder,
    params: tuple,
    prompts,
    key,
    max_new_tokens: int,
    eos_id: int | None = None,
    view=None,
):
    """Python-loop twin of `generate`: yields each step's (tokens [batch, K], counts [batch]).

    Row b emitted tokens[b, :counts[b]] in that step (K = decoder.tokens_per_step). Same step
    function and keys as `generate`, so the output is identical; the generator's return value
    (`StopIteration.value`) is the GenerationResult.

    Args:
      decoder, params, prompts, key, max_new_tokens, eos_id: as for `generate`.
      view: optional function (tokens, counts) -> what to yield instead.
    """
    runtime.check_process_settings()
    key = canonical_key(key)
    tokens, lengths = prepare(decoder, prompts, max_new_tokens)
    params = check_decoder_params(decoder, params)
    s = init_jit(
        decoder, params, tokens, lengths, key, max_new_tokens, eos_value(eos_id, decoder.vocab_size)
    )
    width = decoder.tokens_per_step
    while bool(running(s)):
        before = s.seq.lengths
        s = step_jit(decoder, params, s)
        index = jnp.minimum(before[:, None] + jnp.arange(width)[None, :], decoder.cache_len - 1)
        emitted = jnp.take_along_axis(s.seq.tokens, index, axis=1)  # [batch, K]
        counts = s.seq.lengths - before  # [batch]
        yield (emitted, counts) if view is None else view(emitted, counts)
    result = s.result()
    check_finite_result(result)
    return result
