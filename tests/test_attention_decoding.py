"""Greedy decoding with "blockwise" attention equals "xla" token for token (autoregressive and
speculative, GPT-2 and Llama/GQA targets), and the blockwise loop compiles once for any length.

Block 16 in a 64-slot cache, so the prompts (1-13 tokens) and their continuations span one to four
blocks and the trip count changes while a row decodes.
"""

import jax
import numpy as np
from decoding_setup import (
    LLAMA_TARGET,
    MAX_NEW,
    PROMPTS,
    SMALL_DRAFT,
    TARGET,
    ar_decoder,
    as_lists,
    llama_params,
    random_params,
    spec_decoder,
    target_params,
)

from specjax.decoding import loop


def _with(model, attention):
    return type(model)(model.config.replace(attention=attention, attention_block=16))


def _generate(decoder, params, prompts=PROMPTS, max_new=MAX_NEW):
    """params: one model's, or a tuple (target's, draft's) for a speculative decoder."""
    params = params if isinstance(params, tuple) else (params,)
    return as_lists(decoder.generate(*params, list(prompts), jax.random.PRNGKey(0), max_new))


def test_autoregressive_greedy_blockwise_equals_xla():
    for target, params in ((TARGET, target_params()), (LLAMA_TARGET, llama_params())):
        got = {
            name: _generate(ar_decoder(target=_with(target, name)), params)
            for name in ("xla", "blockwise")
        }
        assert got["blockwise"] == got["xla"]
        assert len(set(map(tuple, got["xla"]))) > 1  # rows differ: the outputs carry information


def test_speculative_greedy_blockwise_equals_xla():
    draft_params = random_params(SMALL_DRAFT, seed=4)
    got = {}
    for name in ("xla", "blockwise"):
        decoder = spec_decoder(_with(SMALL_DRAFT, name), target=_with(TARGET, name))
        got[name] = _generate(decoder, (target_params(), draft_params))
    assert got["blockwise"] == got["xla"]
    # The target's own greedy continuation (speculation is lossless).
    assert got["xla"] == _generate(ar_decoder(target=_with(TARGET, "xla")), target_params())


def test_blockwise_decoding_compiles_once_for_prompts_of_different_lengths():
    decoder = ar_decoder(target=_with(TARGET, "blockwise"))
    short = [np.array([3, 1], np.int32)]
    long = [np.arange(14, dtype=np.int32)]  # same 16-token bucket, four blocks by the end
    _generate(decoder, target_params(), short, 8)
    programs = loop.generate_jit._cache_size()
    _generate(decoder, target_params(), long, 40)
    assert loop.generate_jit._cache_size() == programs
