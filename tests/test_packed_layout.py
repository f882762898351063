"""The packed weight layout (`TransformerConfig.matmul="packed"`): same model, kernel-friendly.

Conversions are exact; the packed model's logits equal the "xla" model's to float32 accuracy
(bound 1e-5 of each row's max |logit|, measured 2e-7 to 8e-7); decoding with it is greedy-
identical to itself whatever the verification width (its rows do not depend on the batch).
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import kernels
from specjax.decoding import (
    AutoregressiveDecoder,
    LookupDrafter,
    SpeculativeDecoder,
    loop,
    make_warper,
)
from specjax.models import TransformerConfig, TransformerLM
from specjax.models.interface import params_mismatch
from specjax.models.layout import convert_params, with_matmul

CONFIGS = {
    "llama_gqa": TransformerConfig.llama(
        300, num_layers=2, embed_dim=64, num_heads=4, num_kv_heads=2, mlp_dim=96
    ),
    "qwen_tied": TransformerConfig.llama(
        300,
        num_layers=2,
        embed_dim=60,
        num_heads=3,
        num_kv_heads=1,
        mlp_dim=90,
        tie_embeddings=True,
        qkv_bias=True,
    ),  # fmt: skip
    "gpt2": TransformerConfig.gpt2(259, num_layers=2, embed_dim=32, num_heads=2, max_len=64),
}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request):
    model = TransformerLM(CONFIGS[request.param])
    params = model.init_params(jax.random.PRNGKey(0))
    packed, packed_params = with_matmul(model, params, "packed")
    return model, params, packed, packed_params


def _rel_rows(a, b):
    return float((jnp.abs(a - b).max(-1) / jnp.abs(b).max(-1)).max())


def test_conversion_is_exact_and_fits_the_model(pair):
    model, params, packed, packed_params = pair
    assert params_mismatch(packed, packed_params) is None
    back = convert_params(packed_params, packed, model)
    same = jax.tree.map(lambda a, b: bool((np.asarray(a) == np.asarray(b)).all()), params, back)
    assert jax.tree.all(same)


def test_logits_match_the_xla_layout(pair):
    model, params, packed, packed_params = pair
    vocab = model.vocab_size
    tokens = jax.random.randint(jax.random.PRNGKey(1), (2, 24), 0, vocab)
    state = model.init_state(2, 64)
    # A ragged prefill longer than the kernel attention's width (XLA attention), then a
    # verification-sized call (the cache_attention kernel) from each row's own length.
    lengths = jnp.array([20, 13])
    ref, ref_state = model.apply(params, state, tokens[:, :20], lengths)
    got, got_state = packed.apply(packed_params, state, tokens[:, :20], lengths)
    mask = np.arange(20)[None, :] < np.asarray(lengths)[:, None]
    assert _rel_rows(got[mask], ref[mask]) < 1e-5
    ref, _ = model.apply(params, ref_state, tokens[:, 16:21], jnp.array([5, 5]))
    got, _ = packed.apply(packed_params, got_state, tokens[:, 16:21], jnp.array([5, 5]))
    assert _rel_rows(got, ref) < 1e-5


@pytest.mark.skipif(not kernels.available(), reason=f"kernels not built: {kernels.status()}")
def test_a_verification_gives_the_decode_steps_logits():
    """Rows do not depend on the call's width: scoring 6 tokens at once or one at a time gives
    bit-identical logits (the kernels sum each output in one fixed order; XLA's reference path,
    used where the optional extension did not build, does not promise that)."""
    model = TransformerLM(CONFIGS["llama_gqa"].replace(matmul="packed"))
    params = model.init_params(jax.random.PRNGKey(2))
    tokens = jax.random.randint(jax.random.PRNGKey(3), (1, 16), 0, model.vocab_size)
    _, state = model.apply(params, model.init_state(1, 64), tokens[:, :10], jnp.array([10]))
    wide, _ = model.apply(params, state, tokens[:, 10:16], jnp.array([6]))
    steps = []
    for i in range(10, 16):
        logits, state = model.apply(params, state, tokens[:, i : i + 1], jnp.array([1]))
        steps.append(logits[:, 0])
    np.testing.assert_array_equal(np.asarray(wide[0]), np.asarray(jnp.stack(steps, 1)[0]))


def test_greedy_decoding_matches_and_speculation_is_exact():
    model = TransformerLM(CONFIGS["llama_gqa"])
    params = model.init_params(jax.random.PRNGKey(4))
    packed, packed_params = with_matmul(model, params, "packed")
    greedy, key = make_warper(0.0), jax.random.PRNGKey(5)
    prompts = [np.arange(7) + 3, np.asarray([5, 9, 5, 9, 5, 9, 5])]
    kw = dict(prompts=prompts, key=key, max_new_tokens=24)
    ar_xla = AutoregressiveDecoder(model, greedy, cache_len=64).generate(params, **kw)
    ar = AutoregressiveDecoder(packed, greedy, cache_len=64).generate(packed_params, **kw)
    spec = SpeculativeDecoder(packed, LookupDrafter(model.vocab_size), 4, greedy, cache_len=64)
    out = spec.generate(packed_params, {}, **kw)
    for row in range(2):
        np.testing.assert_array_equal(ar.new_tokens()[row], ar_xla.new_tokens()[row])
        np.testing.assert_array_equal(out.new_tokens()[row], ar.new_tokens()[row])


def test_packed_decode_loop_has_no_cache_copies():
    model = TransformerLM(CONFIGS["llama_gqa"].replace(matmul="packed"))
    params = model.init_params(jax.random.PRNGKey(0))
    dec = AutoregressiveDecoder(model, make_warper(0.0), cache_len=64)
    tokens, lengths = dec.prepare([np.arange(5)], 8)
    hlo = (
        loop.generate_jit.lower(dec, (params,), tokens, lengths, jax.random.PRNGKey(0), 8, -1)
        .compile()
        .as_text()
    )
    body = re.split(r"^ENTRY .*$", hlo, flags=re.M)
    outside_entry = body[0] + re.split(r"^}$", body[1], maxsplit=1, flags=re.M)[1]
    shape = "1,64,2,16"  # [batch, cache_len, kv_heads, head_dim]
    # Copies of a broadcast materialise the zero-initialised cache once per call (an
    # allocation); what must not happen is a copy of a live cache on every step.
    copies = re.findall(rf"= f32\[{shape}\]\{{[^}}]*\}} copy\((?!%broadcast)", outside_entry)
    assert len(copies) == 0
    if kernels.available():
        assert "custom-call" in hlo  # the kernels, not the XLA fallback


def test_bad_layouts_are_refused():
    with pytest.raises(ValueError, match="TransformerConfig.matmul"):
        TransformerConfig.llama(10, matmul="fast")
    model = TransformerLM(CONFIGS["gpt2"])
    other = TransformerLM(CONFIGS["gpt2"].replace(num_layers=1, matmul="packed"))
    with pytest.raises(ValueError, match="changes only the weight layout"):
        convert_params({}, model, other)
    with pytest.raises(ValueError, match="matmul must be one of"):
        with_matmul(model, {}, "fast")


def test_sharded_decoder_refuses_the_packed_layout_and_takes_the_converted_model():
    """The kernels run on one device: ShardedDecoder says how to convert, and takes the xla
    layout of the same model."""
    from specjax import sharding as sh
    from specjax.decoding import ShardedDecoder

    packed = TransformerLM(CONFIGS["llama_gqa"].replace(matmul="packed"))
    mesh = sh.make_mesh((1, 1))
    with pytest.raises(ValueError, match=r"models\[0\] uses matmul='packed'.*with_matmul"):
        ShardedDecoder(AutoregressiveDecoder(packed, make_warper(0.0), 32), mesh)
    xla = TransformerLM(packed.config.replace(matmul="xla"))
    ShardedDecoder(AutoregressiveDecoder(xla, make_warper(0.0), 32), mesh)
