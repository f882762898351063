"""The decode loops must update the KV cache in place: no cache-sized copies in the compiled HLO.

XLA:CPU copies every cache buffer once per step without
--xla_cpu_copy_insertion_use_region_analysis (set by `specjax.configure_cpu()`, which
tests/conftest.py calls before JAX starts; see specjax/runtime.py); this guards against that
regression structurally (counting HLO copy ops), not with a timing assertion.
"""

import re

import jax
import numpy as np

import specjax
from specjax.decoding import autoregressive, loop, speculative
from specjax.decoding.gamma_policy import HeuristicGamma
from specjax.decoding.sampling import make_warper
from specjax.models import NgramLM, TransformerConfig, TransformerLM, fit_ngram

# conftest.py set the flag before JAX started; this only confirms it is in effect.
assert specjax.configure_cpu(), "the XLA:CPU copy-insertion flag is off (see tests/conftest.py)"

CACHE_LEN = 128


def _cache_copies(hlo: str, shape: str) -> int:
    return len(re.findall(rf"= f32\[{shape}\]\{{[^}}]*\}} copy\(", hlo))


def _model():
    cfg = TransformerConfig.gpt2(
        32, num_layers=2, embed_dim=32, num_heads=2, mlp_dim=64, max_len=CACHE_LEN
    )
    lm = TransformerLM(cfg)
    return lm, lm.init_params(jax.random.PRNGKey(0))


def test_autoregressive_loop_has_no_cache_copies():
    lm, params = _model()
    dec = autoregressive.AutoregressiveDecoder(lm, make_warper(0), cache_len=CACHE_LEN)
    tokens, lengths = dec.prepare([np.arange(5)], 16)
    hlo = (
        loop.generate_jit.lower(dec, (params,), tokens, lengths, jax.random.PRNGKey(0), 16, -1)
        .compile()
        .as_text()
    )
    assert "while" in hlo
    assert _cache_copies(hlo, f"1,{CACHE_LEN},2,16") == 0


def test_speculative_loop_has_no_cache_copies():
    lm, params = _model()
    draft = NgramLM(32, 2)
    dparams = fit_ngram(np.arange(100) % 32, 32, 2)
    dec = speculative.SpeculativeDecoder(lm, draft, 3, make_warper(0), cache_len=CACHE_LEN)
    tokens, lengths = dec.prepare([np.arange(5)], 16)
    hlo = (
        loop.generate_jit.lower(
            dec, (params, dparams), tokens, lengths, jax.random.PRNGKey(0), 16, -1
        )
        .compile()
        .as_text()
    )
    assert "while" in hlo
    assert _cache_copies(hlo, f"1,{CACHE_LEN},2,16") == 0


def _spec_hlo(unroll_draft):
    lm, params = _model()
    dec = speculative.SpeculativeDecoder(
        lm, lm, 3, make_warper(1.0), cache_len=CACHE_LEN, unroll_draft=unroll_draft
    )
    tokens, lengths = dec.prepare([np.arange(5)], 16)
    return (
        loop.generate_jit.lower(
            dec, (params, params), tokens, lengths, jax.random.PRNGKey(0), 16, -1
        )
        .compile()
        .as_text()
    )


def test_transformer_draft_scan_is_unrolled_by_default_and_copies_nothing():
    # A rolled draft scan carries the draft cache through a loop and XLA:CPU copies it in each
    # step; the default (unroll for cached drafts) must leave no cache copies at all.
    assert _cache_copies(_spec_hlo(None), f"1,{CACHE_LEN},2,16") == 0
    # The control shows the check can fail: forcing the rolled scan brings the copies back.
    assert _cache_copies(_spec_hlo(False), f"1,{CACHE_LEN},2,16") > 0


def test_adaptive_draft_steps_are_unrolled_by_default_and_copy_nothing():
    # The adaptive drafter's early-stopping loop: unrolled `lax.cond`s by default for a cached
    # draft (no copies); the `lax.while_loop` variant carries the cache and copies it (control).
    lm, params = _model()

    def hlo(unroll):
        dec = speculative.SpeculativeDecoder(
            lm,
            lm,
            3,
            make_warper(1.0),
            cache_len=CACHE_LEN,
            unroll_draft=unroll,
            gamma_policy=HeuristicGamma(),
        )
        tokens, lengths = dec.prepare([np.arange(5)], 16)
        key = jax.random.PRNGKey(0)
        lowered = loop.generate_jit.lower(dec, (params, params), tokens, lengths, key, 16, -1)
        return lowered.compile().as_text()

    assert _cache_copies(hlo(None), f"1,{CACHE_LEN},2,16") == 0
    assert _cache_copies(hlo(False), f"1,{CACHE_LEN},2,16") > 0
