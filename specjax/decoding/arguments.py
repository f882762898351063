"""Host-side checks of a decoder's arguments, before any program runs.

What the loop driver (`loop.py`), the beam and sharded decoders, the drafters and the cost
benchmarks check the same way: a switch that must be a bool (`check_flag`), a decoder's
`cache_len` against its models' position limits (`resolve_cache_len`, at construction), prompts
padded and bucketed against the cache's capacity (`prepare`), the params pytrees against the
models (`check_decoder_params`), the EOS id (`eos_value`) and the PRNG key in the one form the
programs are compiled for (`canonical_key`). Each raises naming the argument. `decoder` is any
`loop.Decoder`.
"""

from __future__ import annotations

import jax
import numpy as np

from specjax import checks
from specjax.decoding import prompts as prompt_lib
from specjax.models.interface import check_params, warn_beyond_trained_context
from specjax.models.interface import position_limit as model_position_limit


def check_flag(value, name: str, *, none: bool = False) -> None:
    """Refuses a switch that is not True or False (or None, with `none=True`), naming it.

    A truthiness test would read the string "false" or "no" as True.
    """
    if (value is None and none) or isinstance(value, bool | np.bool_):
        return
    allowed = "None, True or False" if none else "True or False"
    raise TypeError(f"{name} must be {allowed}; got {value!r}")


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


def prepare(decoder, prompts, max_new_tokens):
    """Host-side validation and bucketing of prompts.

    The bucket is capped at `decoder.cache_len`, and capacity is checked with the real prompt
    lengths: the longest prompt + max_new_tokens + the decoder's lookahead must fit in the cache
    (padding is never attended, and what would fall past the buffer is never written). A decoder
    whose draft writes further than its lookahead says so with `cache_headroom` (an EAGLE-2
    dynamic tree's head writes its expanded candidates).

    Returns:
      (tokens int32 [batch, bucket], lengths int32 [batch]) as device arrays.
    """
    checks.check_count("min_bucket", decoder.min_bucket)
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


def params_names(decoder) -> tuple:
    """The params arguments' names, for messages: ("params",) or ("target_params", ...)."""
    n = len(decoder.models)
    if n == 1:
        return ("params",)
    return ("target_params", "draft_params") + tuple(f"params[{i}]" for i in range(2, n))


def check_decoder_params(decoder, params) -> tuple:
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
