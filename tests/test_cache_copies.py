"""The decode loops must update the KV cache in place: no cache-sized copies in the compiled HLO.

XLA:CPU copies every cache buffer once per step without
--xla_cpu_copy_insertion_use_region_analysis (set by `specjax.configure_cpu()`, which
tests/conftest.py calls before JAX starts; see specjax/runtime.py); this guards against that
regression structurally (counting HLO copy ops), not with a timing assertion.
"""

import re

import jax
import numpy as np
import pytest

import specjax
from specjax.decoding import (
    AdaptiveDrafter,
    AutoregressiveDecoder,
    EagleDrafter,
    EagleTreeDrafter,
    HeuristicGamma,
    ModelDrafter,
    SpeculativeDecoder,
    loop,
    make_warper,
)
from specjax.decoding.drafters.model import default_unroll
from specjax.models import EagleHead, NgramLM, TransformerConfig, TransformerLM, fit_ngram

# conftest.py set the flag before JAX started; this only confirms it is in effect.
assert specjax.configure_cpu(), "the XLA:CPU copy-insertion flag is off (see tests/conftest.py)"

CACHE_LEN = 128


def _cache_copies(hlo: str, shape: str) -> int:
    """Cache-sized copies inside loop bodies (every computation but the entry one).

    The entry computation copies the zero-initialised buffers once per call so that each layer's
    cache is its own buffer for the in-place scatter writes (`kv_cache.write_rows`): one cache's
    worth per call, like allocating it; what must not happen is a copy on every step.
    """
    body = re.split(r"^ENTRY .*$", hlo, flags=re.M)
    outside_entry = body[0] + re.split(r"^}$", body[1], maxsplit=1, flags=re.M)[1]
    return len(re.findall(rf"= f32\[{shape}\]\{{[^}}]*\}} copy\(", outside_entry))


def _model():
    cfg = TransformerConfig.gpt2(
        32, num_layers=2, embed_dim=32, num_heads=2, mlp_dim=64, max_len=CACHE_LEN
    )
    lm = TransformerLM(cfg)
    return lm, lm.init_params(jax.random.PRNGKey(0))


def test_autoregressive_loop_has_no_cache_copies():
    lm, params = _model()
    dec = AutoregressiveDecoder(lm, make_warper(0), cache_len=CACHE_LEN)
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
    dec = SpeculativeDecoder(lm, draft, 3, make_warper(0), cache_len=CACHE_LEN)
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
    dec = SpeculativeDecoder(
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


def test_copy_counter_sees_a_copy_in_a_loop_body():
    # Control: a loop that keeps the old buffer beside the updated one must copy it every step.
    def body(i, carry):
        cache, old = carry
        return cache.at[:, i].set(old[:, 0] + 1.0), cache

    cache = jax.numpy.zeros((1, CACHE_LEN, 2, 16))
    hlo = (
        jax.jit(lambda c, n: jax.lax.fori_loop(0, n, body, (c, c)))
        .lower(cache, 4)
        .compile()
        .as_text()
    )
    assert _cache_copies(hlo, f"1,{CACHE_LEN},2,16") > 0


def test_transformer_draft_scan_copies_nothing_rolled_or_unrolled():
    # A rolled draft scan (the default on CPU) carries the draft cache through a loop; with the
    # where-based cache write XLA:CPU copied it in each step; the scatter write updates it in
    # place either way.
    assert _cache_copies(_spec_hlo(True), f"1,{CACHE_LEN},2,16") == 0
    assert _cache_copies(_spec_hlo(False), f"1,{CACHE_LEN},2,16") == 0


def test_adaptive_draft_steps_copy_nothing_rolled_or_unrolled():
    # The adaptive drafter's early-stopping loop: a `lax.while_loop` (the default on CPU)
    # carries the cache (it copied it per step with the where-based cache write, not with the
    # scatter one), or unrolled `lax.cond`s.
    lm, params = _model()

    def hlo(unroll):
        dec = SpeculativeDecoder(
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

    assert _cache_copies(hlo(True), f"1,{CACHE_LEN},2,16") == 0
    assert _cache_copies(hlo(False), f"1,{CACHE_LEN},2,16") == 0


def test_default_unroll_rolls_on_cpu_and_unrolls_cached_drafts_elsewhere(monkeypatch):
    cache = {"keys": np.zeros((1, 8, 2, 4)), "lengths": np.zeros((1,), np.int32)}
    table = {"counts": np.zeros((4, 4))}  # an n-gram draft's state: no leaf of rank >= 3
    assert default_unroll(None, cache) is False  # this process runs on CPU
    assert default_unroll(True, table) is True and default_unroll(False, cache) is False
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert default_unroll(None, cache) is True
    assert default_unroll(None, table) is False
    assert default_unroll(False, cache) is False


@pytest.mark.parametrize("bad", ["false", 0, 1.0, np.int32(1)])
def test_an_unroll_other_than_none_true_or_false_is_refused_by_name(bad):
    # bool("false") is True: a truthiness test would unroll where the caller asked for a loop.
    lm, _ = _model()
    warper = make_warper(1.0)
    head = EagleHead(lm)
    makers = {
        "unroll_draft": lambda u: SpeculativeDecoder(lm, lm, 3, warper, unroll_draft=u),
        "ModelDrafter": lambda u: ModelDrafter(lm, warper, u),
        "AdaptiveDrafter": lambda u: AdaptiveDrafter(lm, warper, HeuristicGamma(), 4, u),
        "EagleDrafter": lambda u: EagleDrafter(head, warper, unroll=u),
        "EagleTreeDrafter": lambda u: EagleTreeDrafter(head, warper, unroll=u),
    }
    for where, make in makers.items():
        name = "unroll_draft" if where == "unroll_draft" else "unroll"
        with pytest.raises(TypeError, match=rf"^{name} must be None, True or False; got "):
            make(bad)
        for fine in (None, True, False, np.bool_(True)):
            if where != "EagleTreeDrafter":  # its tree is checked after unroll (None here)
                make(fine)
