"""One loop driver for every decoder: prepare, the jitted `lax.while_loop`, the Python twin.

A decoder (autoregressive, speculative, and every later one: trees, beams, hierarchies) supplies
only what is its own, through the `Decoder` protocol:

    models           tuple: one entry per params argument (target first), in params order
    cache_len        positions per row in caches and in the output buffer (a decoder's field;
                     None at construction means the models' position limit: `resolve_cache_len`)
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

This module then does the rest once:
host-side prompt checks and bucketing (`prepare`), the device loop (`generate`), the Python loop
that yields each step's tokens (`stream`), and the jitted `init` / `step` / whole-loop programs
that benchmarks, tests and `ShardedDecoder` reuse. It takes decoders through the protocol and
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
import numpy as np
from flax import struct
from jax.sharding import PartitionSpec

from specjax import runtime
from specjax.decoding import prompts as prompt_lib
from specjax.decoding.state import (
    DecodeStats,
    GenerationResult,
    Sequences,
    check_finite_result,
    init_sequences,
    init_stats,
)
from specjax.models.interface import check_params, state_logical_axes, warn_beyond_trained_context
from specjax.models.interface import position_limit as model_position_limit


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


# A decoder's cache length when no model bounds positions (RoPE, n-gram tables, prompt lookup).
DEFAULT_CACHE_LEN = 512


def model_names(models) -> tuple:
    """What errors call each entry of `models`: ("model",) or ("target", "draft", ...)."""
    if len(models) == 1:
        return ("model",)
    return ("target",) + tuple("draft" if i == 1 else f"model {i}" for i in range(1, len(models)))


def position_limit(models) -> tuple:
    """(limit, name): the tightest position limit among `models` and which model has it, or
    (None, None) when none has one (see `models.interface.position_limit`)."""
    limits = [
        (limit, name)
        for model, name in zip(models, model_names(models), strict=True)
        if (limit := model_position_limit(model)) is not None
    ]
    return min(limits, key=lambda x: x[0]) if limits else (None, None)


def resolve_cache_len(decoder) -> None:
    """Checks a decoder's `cache_len` against its models, or sets it when None (at construction).

    None becomes the models' position limit (the smallest learned position table among target
    and draft), or DEFAULT_CACHE_LEN when no model has one. An explicit value must be an integer
    >= 2 that no model's position table is shorter than. A value past a model's trained context
    (RoPE: no table, but positions it never saw) is allowed, with a warning naming it.
    """
    limit, name = position_limit(decoder.models)
    cache_len = decoder.cache_len
    if cache_len is None:
        cache_len = DEFAULT_CACHE_LEN if limit is None else limit
        object.__setattr__(decoder, "cache_len", cache_len)
    if isinstance(cache_len, bool) or not isinstance(cache_len, int) or cache_len < 2:
        raise ValueError(f"cache_len must be an integer >= 2 (or None), got {cache_len!r}")
    if limit is not None and cache_len > limit:
        raise ValueError(
            f"cache_len={cache_len} exceeds the {name}'s position limit: its learned position "
            f"table has {limit} positions (max_len={limit}); pass cache_len <= {limit}, or "
            "leave cache_len unset (None: the models' limit)"
        )
    roles = {("target" if i == 0 else f"models[{i}]"): m for i, m in enumerate(decoder.models)}
    warn_beyond_trained_context(cache_len, **roles)


def prepare(decoder: Decoder, prompts, max_new_tokens):
    """Host-side validation and bucketing of prompts.

    The bucket is capped at `decoder.cache_len`, and capacity is checked with the real prompt
    lengths: the longest prompt + max_new_tokens + the decoder's lookahead must fit in the cache
    (padding is never attended, and what would fall past the buffer is never written). A decoder
    whose draft writes further than its lookahead says so with `cache_headroom` (an EAGLE-2
    dynamic tree's head writes its expanded candidates).

    Returns:
      (tokens int32 [batch, bucket], lengths int32 [batch]) as device arrays.
    """
    tokens, lengths = prompt_lib.pad_prompts(
        prompts, decoder.vocab_size, 0, decoder.min_bucket, max_width=decoder.cache_len
    )
    limit, name = position_limit(decoder.models)
    prompt_lib.check_capacity(
        int(lengths.max()),
        max_new_tokens,
        getattr(decoder, "cache_headroom", decoder.lookahead),
        decoder.cache_len,
        position_limit=limit,
        limited_by=name,
    )
    # device_put, not jnp.asarray: the latter stages a NumPy array through a compiled program
    # of its own, one per prompt shape (~30 ms each on a CPU) in the jax this targets.
    return jax.device_put(tokens), jax.device_put(lengths)


def params_names(decoder: Decoder) -> tuple:
    """The params arguments' names, for messages: ("params",) or ("target_params", ...)."""
    n = len(decoder.models)
    if n == 1:
        return ("params",)
    return ("target_params", "draft_params") + tuple(f"params[{i}]" for i in range(2, n))


def check_decoder_params(decoder: Decoder, params) -> tuple:
    """`params` as a tuple, checked against the decoder's models on the host.

    Raises ValueError naming the argument ("draft_params") and the first parameter whose path
    or shape differs from what its model expects (e.g. the draft's params in the target's
    place), instead of a scope error deep inside Flax. The expected shapes are computed once
    per model (`interface.expected_params`).
    """
    params = tuple(params)
    models = tuple(decoder.models)
    if len(params) != len(models):
        raise ValueError(
            f"{type(decoder).__name__} takes {len(models)} params pytrees "
            f"({', '.join(params_names(decoder))}); got {len(params)}"
        )
    check_params(models, params, params_names(decoder))
    return params


def eos_value(eos_id: int | None, vocab_size: int | None = None) -> int:
    """The traced EOS id: -1 for none; raises naming `eos_id` if it is no token of the vocab."""
    if eos_id is None:
        return -1
    if isinstance(eos_id, bool) or not isinstance(eos_id, (int, np.integer)):
        raise TypeError(f"eos_id must be None or an integer token id; got {eos_id!r}")
    if eos_id < 0 or (vocab_size is not None and eos_id >= vocab_size):
        raise ValueError(
            f"eos_id={eos_id} is not a token of the vocabulary [0, {vocab_size}): no row would "
            "ever stop at it (pass None for no EOS)"
        )
    return int(eos_id)


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


def canonical_key(key) -> jax.Array:
    """`key`, checked, in the one form the decoding programs are compiled for.

    A typed key (`jax.random.key`) of the default implementation becomes its raw uint32 data
    (what `jax.random.PRNGKey` gives for the same seed: the same bits, so the same draws), so a
    caller's choice of key style never compiles a second program. Keys of another
    implementation (`impl="rbg"`, ...) are returned as they are: their raw data would be read as
    the default implementation's.

    Raises naming `key` unless it is one PRNG key (`jax.random.key` or `jax.random.PRNGKey`).
    """
    try:
        data = jax.random.key_data(key)
    except TypeError:
        raise TypeError(
            "key must be a JAX PRNG key (jax.random.key(seed) or jax.random.PRNGKey(seed)); "
            f"got {key!r}"
        ) from None
    if data.ndim != 1:
        raise ValueError(
            f"key must be one PRNG key, not an array of them (key data of shape {data.shape})"
        )
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if str(jax.random.key_impl(key)) == str(jax.config.jax_default_prng_impl):
            return data
    return key


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
