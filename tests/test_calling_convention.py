"""One calling convention for every decoder (issue #21): the models' params first, one pytree per
entry of `decoder.models` (target, then draft), then keywords —

    decoder.generate(*params, prompts=..., key=..., max_new_tokens=..., eos_id=None)

— for `AutoregressiveDecoder`, `SpeculativeDecoder`, `TreeSpeculativeDecoder`, their `stream`s
and `ShardedDecoder`; the older positional forms give identical results.
"""

import jax
import numpy as np
import pytest
from decoding_setup import (
    CACHE_LEN,
    GAMMA,
    MAX_NEW,
    PROMPTS,
    SAMPLING,
    TARGET,
    drafts,
    target_params,
)

from specjax import sharding
from specjax.decoding import (
    AutoregressiveDecoder,
    ShardedDecoder,
    SpeculativeDecoder,
    TokenTree,
    TreeSpeculativeDecoder,
    loop,
)

KEY = jax.random.PRNGKey(11)
EOS = 3


def _decoders():
    draft, draft_params = drafts()["noisy_self"]
    tp = target_params()
    tree = TokenTree.from_branching((2, 1))
    return {
        "autoregressive": (AutoregressiveDecoder(TARGET, SAMPLING, CACHE_LEN), (tp,)),
        "speculative": (
            SpeculativeDecoder(TARGET, draft, GAMMA, SAMPLING, CACHE_LEN),
            (tp, draft_params),
        ),
        "tree": (
            TreeSpeculativeDecoder(TARGET, draft, tree, SAMPLING, cache_len=CACHE_LEN),
            (tp, draft_params),
        ),
    }


def _same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("name", ["autoregressive", "speculative", "tree"])
def test_keyword_form_equals_positional_form(name):
    decoder, params = _decoders()[name]
    prompts = list(PROMPTS)
    positional = decoder.generate(*params, prompts, KEY, MAX_NEW, EOS)
    keywords = decoder.generate(
        *params, prompts=prompts, key=KEY, max_new_tokens=MAX_NEW, eos_id=EOS
    )
    _same(positional, keywords)
    # The loop driver's function takes the same params as a tuple.
    _same(
        loop.generate(decoder, params, prompts, key=KEY, max_new_tokens=MAX_NEW, eos_id=EOS),
        positional,
    )
    if name == "speculative":
        # ShardedDecoder (keywords only) on a one-device mesh: the same call, the same tokens.
        mesh = sharding.make_mesh((-1, 1))
        sharded = ShardedDecoder(decoder, mesh).generate(
            *params, prompts=prompts, key=KEY, max_new_tokens=MAX_NEW, eos_id=EOS
        )
        _same(sharded.tokens, positional.tokens)
        _same(sharded.lengths, positional.lengths)


def test_stream_takes_the_same_keywords():
    decoder, params = _decoders()["autoregressive"]
    stream = decoder.stream(*params, prompts=list(PROMPTS), key=KEY, max_new_tokens=MAX_NEW)
    while True:
        try:
            next(stream)
        except StopIteration as stop:
            streamed = stop.value
            break
    _same(streamed, decoder.generate(*params, list(PROMPTS), KEY, MAX_NEW))
