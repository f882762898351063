"""Decoder behaviour beyond greedy equality: streaming twins, cache rollback, recompilation,
EOS and token budgets, statistics, and argument checking. Sampling mode (temperature 1)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from decoding_setup import (
    CACHE_LEN,
    GAMMA,
    MAX_NEW,
    PROMPTS,
    SAMPLING,
    SMALL_DRAFT,
    TARGET,
    V,
    ar_decoder,
    as_lists,
    drafts,
    spec_decoder,
    target_params,
)

from specjax.decoding import (
    AutoregressiveDecoder,
    LookupTreeDrafter,
    SpeculativeDecoder,
    TokenTree,
    arguments,
    loop,
    make_warper,
)
from specjax.decoding.state import NAN_DRAFT, NAN_TARGET, nan_flags, nan_message
from specjax.models import NgramLM, TransformerConfig, TransformerLM

KEY = jax.random.PRNGKey(7)


@pytest.fixture(scope="module")
def ar():
    return ar_decoder(SAMPLING)


@pytest.fixture(scope="module")
def spec():
    """Sampling-mode speculative decoder with a noisy-copy draft (α ≈ 0.6) and its params."""
    draft, draft_params = drafts()["noisy_self"]
    return spec_decoder(draft, SAMPLING), draft_params


@pytest.fixture(scope="module")
def ar_result(ar):
    return ar.generate(target_params(), list(PROMPTS), KEY, MAX_NEW)


@pytest.fixture(scope="module")
def spec_result(spec):
    decoder, draft_params = spec
    return decoder.generate(target_params(), draft_params, list(PROMPTS), KEY, MAX_NEW)


def _same_result(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


# -- streaming twins ---------------------------------------------------------------------------


def test_autoregressive_stream_equals_generate(ar, ar_result):
    stream = ar.stream(target_params(), list(PROMPTS), KEY, MAX_NEW)
    rows = [[] for _ in PROMPTS]
    while True:
        try:
            step_tokens = np.asarray(next(stream))  # [batch], -1 for finished rows
        except StopIteration as stop:
            final = stop.value
            break
        for b, token in enumerate(step_tokens):
            if token >= 0:
                rows[b].append(int(token))
    assert rows == as_lists(ar_result)
    assert len(set(rows[0])) > 5  # sampling, not a constant stream
    _same_result(final, ar_result)


def test_speculative_stream_equals_generate_and_stats(spec, spec_result):
    decoder, draft_params = spec
    stream = decoder.stream(target_params(), draft_params, list(PROMPTS), KEY, MAX_NEW)
    rows = [[] for _ in PROMPTS]
    counts = []
    while True:
        try:
            tokens, count = jax.device_get(next(stream))  # [batch, gamma + 1], [batch]
        except StopIteration as stop:
            final = stop.value
            break
        counts.append(count)
        for b in range(len(PROMPTS)):
            rows[b].extend(tokens[b, : count[b]].tolist())
    assert rows == as_lists(spec_result)
    _same_result(final, spec_result)

    # Statistics agree with what the stream saw, iteration by iteration.
    counts = np.stack(counts)  # [iterations, batch]
    s = jax.device_get(spec_result.stats)
    assert counts.shape[0] == int(s.target_calls)
    np.testing.assert_array_equal((counts > 0).sum(0), s.iterations)
    np.testing.assert_array_equal(counts.sum(0), s.emitted)
    assert counts.max() <= GAMMA + 1
    # accepted drafts = count - 1 in every iteration except a row's last (cut by the budget).
    accepted = np.maximum(counts - 1, 0)
    observed = np.array([(accepted > i).sum() for i in range(GAMMA)])  # [gamma]
    assert (observed <= s.accepted_at).all()
    assert s.accepted_at.sum() - observed.sum() <= len(PROMPTS) * GAMMA
    # Every branch is exercised: iterations that reject the first draft, accept some drafts, and
    # accept all GAMMA (plus the bonus token). Counted, not as 1.5 < tokens per iteration < GAMMA
    # + 1 (measured 1.88, within 30% of the lower bound): 31, 16 and 4 of the 51 row-iterations
    # (each >= 3x its bound).
    emitting = counts[counts > 0]
    assert (emitting == 1).sum() >= 10
    assert ((emitting > 1) & (emitting < GAMMA + 1)).sum() >= 5
    assert (emitting == GAMMA + 1).any()


# -- cache rollback ----------------------------------------------------------------------------

_forward = jax.jit(lambda m, p, s, t, n: m.apply(p, s, t, n), static_argnums=0)

# The rolled-back caches and a fresh prefill compute the same keys, values and logits with float32
# sums in a different order (chunked vs whole sequence): a reordered sum of n terms errs by at most
# ~n * eps (eps = 6e-8) of the summed magnitudes, ~4e-6 for the 64-wide contractions here, so after
# two layers 1e-5 of the tensor's own scale bounds it; a stale entry is off by O(1) of that scale
# (a wrong token at each row's last cached position: >= 0.5 in every cache tensor, measured). The
# entries are ~10 in size (float32 spacing ~1e-6 there), so an absolute 1e-5 sat at the edge of
# rounding (measured 6.7e-6). Measured relative: caches 8.5e-7, logits 9.5e-7 of their max |value|
# (>= 10x below).
ROLLBACK_REL = 1e-5


def _assert_close_to_scale(mine, ref) -> None:
    """|mine - ref| <= ROLLBACK_REL * max |ref|, elementwise."""
    ref = np.asarray(ref)
    scale = float(np.abs(ref).max(initial=0.0))
    np.testing.assert_allclose(np.asarray(mine), ref, rtol=0, atol=ROLLBACK_REL * scale)


def _fresh_forward(model, params, tokens, lengths):
    """Uncached forward of tokens [batch, 48] (lengths real per row): (logits, cache)."""
    state = model.init_state(tokens.shape[0], CACHE_LEN)
    return _forward(model, params, state, tokens[:, :48], lengths)


def test_rollback_leaves_caches_equal_to_a_fresh_prefill(spec):
    """After every iteration, each row's target cache holds exactly its first L - 1 tokens and the
    draft cache its first L - 1 or L - 2, equal to a fresh prefill of the sequence so far (stale
    rejected drafts are past the lengths); and the rolled-back cache predicts what a full forward
    pass over the sequence predicts."""
    decoder, draft_params = spec
    params = target_params()
    tokens, lengths = decoder.prepare(list(PROMPTS), MAX_NEW)
    pair = (params, draft_params)
    s = loop.init_jit(decoder, pair, tokens, lengths, KEY, MAX_NEW, -1)
    rejected_somewhere = False
    for _ in range(4):
        before = s.seq.lengths
        s = loop.step_jit(decoder, pair, s)
        seq_len = np.asarray(s.seq.lengths)
        rejected_somewhere |= bool((np.asarray(s.seq.lengths - before) < GAMMA + 1).any())
        target_state, draft_state = s.model_states
        t_len, d_len = np.asarray(target_state.lengths), np.asarray(draft_state.lengths)
        np.testing.assert_array_equal(t_len, seq_len - 1)
        assert set((seq_len - d_len).tolist()) <= {1, 2}

        fresh_logits, fresh = _fresh_forward(TARGET, params, s.seq.tokens, s.seq.lengths)
        _, fresh_draft = _fresh_forward(TARGET, draft_params, s.seq.tokens, s.seq.lengths)
        # On the host, once per step: device slices would compile a program per length.
        host = lambda state: [np.asarray(x) for x in state.keys + state.values]  # noqa: E731
        target_caches, fresh_caches = host(target_state), host(fresh)
        draft_caches, fresh_draft_caches = host(draft_state), host(fresh_draft)
        for b in range(len(PROMPTS)):
            for mine, ref in zip(target_caches, fresh_caches, strict=True):
                _assert_close_to_scale(mine[b, : t_len[b]], ref[b, : t_len[b]])
            for mine, ref in zip(draft_caches, fresh_draft_caches, strict=True):
                _assert_close_to_scale(mine[b, : d_len[b]], ref[b, : d_len[b]])

        # Feeding each row's last token to the rolled-back cache = the full pass at L - 1.
        last = jnp.take_along_axis(s.seq.tokens, s.seq.lengths[:, None] - 1, axis=1)  # [b, 1]
        logits, _ = _forward(TARGET, params, target_state, last, jnp.ones((4,), jnp.int32))
        expected = np.take_along_axis(
            np.asarray(fresh_logits), (seq_len - 1)[:, None, None], axis=1
        )
        _assert_close_to_scale(logits, expected)
    assert rejected_somewhere  # the check covered rolled-back drafts


# -- recompilation -----------------------------------------------------------------------------


def test_no_recompilation_for_new_prompts_in_bucket_or_new_budget(ar, spec, ar_result, spec_result):
    decoder, draft_params = spec
    params = target_params()
    programs = loop.generate_jit._cache_size()  # one jit cache serves every decoder
    other_prompts = [  # same batch size and bucket, other lengths and tokens
        np.array([3, 1, 4, 1, 5, 9, 2, 6]),
        np.arange(16) % V,
        np.array([2, 7]),
        np.array([60, 61, 62]),
    ]
    for max_new in (3, 11, MAX_NEW - 1):
        decoder.generate(params, draft_params, other_prompts, KEY, max_new, eos_id=5)
        ar.generate(params, other_prompts, KEY, max_new)
    assert loop.generate_jit._cache_size() == programs
    # The counter does see new programs: a 17-token prompt falls into the 32-token bucket (shown
    # with a bigram "target", which compiles in a fraction of the transformer's time).
    cheap = AutoregressiveDecoder(NgramLM(V), SAMPLING, cache_len=CACHE_LEN)
    bigram_params = drafts()["bigram"][1]
    cheap.generate(bigram_params, [np.arange(16) % V], KEY, 5)
    before = loop.generate_jit._cache_size()
    cheap.generate(bigram_params, [np.arange(15) % V], KEY, 7)
    assert loop.generate_jit._cache_size() == before
    cheap.generate(bigram_params, [np.arange(17) % V], KEY, 5)
    assert loop.generate_jit._cache_size() == before + 1


def test_a_typed_key_draws_what_its_raw_data_draws_in_the_same_program(spec, spec_result):
    # arguments.canonical_key: jax.random.key and jax.random.PRNGKey of one seed are the same bits,
    # so they must give the same tokens, and one program must serve both.
    decoder, draft_params = spec
    programs = loop.generate_jit._cache_size()
    typed = jax.random.wrap_key_data(KEY)
    result = decoder.generate(target_params(), draft_params, list(PROMPTS), typed, MAX_NEW)
    assert loop.generate_jit._cache_size() == programs
    _same_result(result, spec_result)


def test_canonical_key_keeps_keys_of_other_implementations():
    rbg = jax.random.key(0, impl="rbg")  # its raw data would be read as threefry's: kept typed
    assert arguments.canonical_key(rbg) is rbg
    np.testing.assert_array_equal(arguments.canonical_key(jax.random.key(3)), jax.random.PRNGKey(3))
    raw = jax.random.PRNGKey(3)
    assert arguments.canonical_key(raw) is raw


# -- EOS and token budgets ---------------------------------------------------------------------


def _pick_eos(rows):
    """A token some row emits early (so it stops) and some other row never emits."""
    for position in range(1, 8):
        for row in rows:
            token = row[position]
            if token not in row[:position] and any(token not in other for other in rows):
                return token
    raise AssertionError("no suitable EOS token in these continuations")


def test_eos_stops_rows_independently(ar, spec, ar_result, spec_result):
    decoder, draft_params = spec
    params = target_params()
    for result, run in (
        (ar_result, lambda eos: ar.generate(params, list(PROMPTS), KEY, MAX_NEW, eos_id=eos)),
        (
            spec_result,
            lambda eos: decoder.generate(
                params, draft_params, list(PROMPTS), KEY, MAX_NEW, eos_id=eos
            ),
        ),
    ):
        rows = as_lists(result)
        eos = _pick_eos(rows)
        # Each row's randomness depends only on the iteration counter and its own tokens, so a
        # row's output is the run without EOS cut after its first EOS; other rows are untouched.
        expected = [r[: r.index(eos) + 1] if eos in r else r for r in rows]
        assert any(len(e) < MAX_NEW for e in expected) and any(len(e) == MAX_NEW for e in expected)
        stopped = run(eos)
        assert as_lists(stopped) == expected
        np.testing.assert_array_equal(stopped.stats.emitted, [len(e) for e in expected])


def test_max_new_tokens_is_respected_exactly(ar, spec):
    decoder, draft_params = spec
    params = target_params()
    for max_new in (1, 2, GAMMA + 1, 13):
        a = ar.generate(params, list(PROMPTS), KEY, max_new)
        b = decoder.generate(params, draft_params, list(PROMPTS), KEY, max_new)
        for result in (a, b):
            assert [len(r) for r in as_lists(result)] == [max_new] * len(PROMPTS)
            np.testing.assert_array_equal(result.stats.emitted, [max_new] * len(PROMPTS))
            # The output buffer past each row's end is untouched (zeros from the prompt padding).
            tokens, lengths = jax.device_get((result.tokens, result.lengths))
            for row, length in zip(tokens, lengths, strict=True):
                assert not row[length:].any()
    assert a.stats.iterations.max() == 13 and b.stats.iterations.max() < 13


# -- bad inputs --------------------------------------------------------------------------------


def test_bad_prompts_and_budgets_raise_naming_the_argument(ar, spec):
    decoder, draft_params = spec
    params = target_params()

    def both(prompts, max_new=4):
        yield lambda: ar.generate(params, prompts, KEY, max_new)
        yield lambda: decoder.generate(params, draft_params, prompts, KEY, max_new)

    cases = [
        ([], 4, ValueError, "prompts is empty"),
        ([np.array([1, 2]), np.array([], np.int32)], 4, ValueError, r"prompts\[1\] is empty"),
        ([np.array([1.0, 2.0])], 4, TypeError, r"prompts\[0\] must hold integer"),
        ([np.array([1, V])], 4, ValueError, r"prompts\[0\] has token ids in \[1, 64\]"),
        ([np.array([-1, 3])], 4, ValueError, r"prompts\[0\] has token ids"),
        (np.zeros((2, 3, 4), np.int32), 4, ValueError, r"prompts as an array must have shape"),
        ([np.array([1, 2])], 0, ValueError, "max_new_tokens must be >= 1"),
        ([np.array([1, 2])], -3, ValueError, "max_new_tokens must be >= 1"),
        ([np.array([1, 2])], 2.5, TypeError, "max_new_tokens must be an integer"),
        ([np.array([1, 2])], None, TypeError, "max_new_tokens must be an integer"),
        ([np.array([1, 2])], "4", TypeError, "max_new_tokens must be an integer"),
        # Real lengths count, not the 64-token bucket: 61 + 4 (+ 4 lookahead) > 64.
        ([np.arange(61) % V], 4, ValueError, "exceeds cache_len=64"),
        ([np.array([1, 2])], 63, ValueError, "max_new_tokens"),  # 2 + 63 > 64
    ]
    for prompts, max_new, error, match in cases:
        for call in both(prompts, max_new):
            with pytest.raises(error, match=match):
                call()
    # The key: one JAX PRNG key (raw or typed), named when it is not.
    for key, error, match in (
        (0, TypeError, "key must be a JAX PRNG key"),
        (None, TypeError, "key must be a JAX PRNG key"),
        (jax.random.split(KEY, 2), ValueError, "key must be one PRNG key"),
    ):
        with pytest.raises(error, match=match):
            ar.generate(params, [np.array([1, 2])], key, 4)
        with pytest.raises(error, match=match):
            decoder.generate(params, draft_params, [np.array([1, 2])], key, 4)
    # The speculative decoder reserves gamma positions of lookahead; the autoregressive does not.
    ar.generate(params, list(PROMPTS), KEY, CACHE_LEN - 16)
    with pytest.raises(ValueError, match=r"gamma lookahead \(4\)"):
        decoder.generate(params, draft_params, list(PROMPTS), KEY, CACHE_LEN - 16)


def test_params_of_the_wrong_model_raise_naming_the_argument_and_the_parameter(ar):
    """Checked on the host against each model's expected shapes, before anything compiles."""
    params = target_params()
    small, small_params = drafts()["transformer"]
    bigram, bigram_params = drafts()["bigram"]
    spec = spec_decoder(small, SAMPLING)
    prompts, swapped = list(PROMPTS), r"were the draft's params passed as target_params\?"
    cases = [
        # The draft's params in the target's place (and the other way round): both named.
        (lambda: spec.generate(small_params, params, prompts, KEY, 3), r"target_params do not fit"),
        (lambda: spec.generate(small_params, params, prompts, KEY, 3), swapped),
        (lambda: spec.generate(params, params, prompts, KEY, 3), r"draft_params do not fit"),
        (
            lambda: spec.generate(params, params, prompts, KEY, 3),
            r"'block_0/attn/key/kernel' of shape \(64, 4, 16\) where the model has \(32, 2, 16\)",
        ),
        (lambda: ar.generate(small_params, prompts, KEY, 3), r"params do not fit .*gpt2 d=64"),
        (lambda: ar.generate({"params": params}, prompts, KEY, 3), r"variables\['params'\]"),
        (lambda: ar.generate(bigram_params, prompts, KEY, 3), r"params do not fit.*lack 'block_0"),
        (lambda: next(ar.stream(small_params, prompts, KEY, 3)), r"params do not fit"),
        (
            lambda: spec_decoder(bigram).generate(params, small_params, prompts, KEY, 3),
            r"draft_params do not fit the model they are passed for \(NgramLM\)",
        ),
        (
            lambda: spec_decoder(bigram).generate(
                params, {"log_probs": np.zeros(V)}, prompts, KEY, 3
            ),
            r"draft_params .* 'log_probs' of shape \(64,\) where the model has \(64, 64\)",
        ),
        # Integer weights of the right shapes (raw quantized ones) decoded to garbage before.
        (
            lambda: ar.generate(
                jax.tree.map(lambda x: x.astype(jnp.int8), params), prompts, KEY, 3
            ),
            r"params do not fit .* of dtype int8 where the model computes in floating point",
        ),
        (
            lambda: spec.generate(
                params, jax.tree.map(lambda x: x > 0, small_params), prompts, KEY, 3
            ),
            r"draft_params do not fit .* of dtype bool",
        ),
    ]
    for call, match in cases:
        with pytest.raises(ValueError, match=match):
            call()
    # Params in another dtype fit (bfloat16 weights for a float32 model).
    from specjax.models.interface import params_mismatch

    assert params_mismatch(TARGET, jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)) is None
    assert params_mismatch(bigram, bigram_params) is None


def test_a_bad_min_bucket_raises_naming_it(ar):
    # It only pads prompts (results do not change), but -1, 2.5 or True were taken silently.
    params = target_params()
    for bad, error in ((0, ValueError), (-1, ValueError), (2.5, TypeError), (True, TypeError)):
        with pytest.raises(error, match="min_bucket must be an integer"):
            dataclasses.replace(ar, min_bucket=bad).generate(params, list(PROMPTS), KEY, 2)


def test_eos_outside_the_vocabulary_raises(ar, spec):
    decoder, draft_params = spec
    params = target_params()
    with pytest.raises(ValueError, match=r"eos_id=64 is not a token of the vocabulary \[0, 64\)"):
        ar.generate(params, list(PROMPTS), KEY, 3, eos_id=V)
    with pytest.raises(ValueError, match=r"eos_id=-2 is not a token"):
        decoder.generate(params, draft_params, list(PROMPTS), KEY, 3, eos_id=-2)
    with pytest.raises(TypeError, match="eos_id must be None or an integer"):
        ar.generate(params, list(PROMPTS), KEY, 3, eos_id=1.5)


def test_bad_decoder_construction_raises():
    with pytest.raises(ValueError, match="gamma must be an integer >= 1"):
        SpeculativeDecoder(TARGET, SMALL_DRAFT, 0, SAMPLING)
    with pytest.raises(ValueError, match="gamma must be an integer >= 1"):
        SpeculativeDecoder(TARGET, SMALL_DRAFT, 2.0, SAMPLING)
    # A numpy integer is an integer: the same decoder (and compiled program) as the Python int.
    numpy_gamma = SpeculativeDecoder(TARGET, SMALL_DRAFT, np.int64(2), SAMPLING)
    assert numpy_gamma == SpeculativeDecoder(TARGET, SMALL_DRAFT, 2, SAMPLING)
    assert type(numpy_gamma.gamma) is int
    # A tree drafter in a chain decoder would have its tree verified as one chain.
    tree = TokenTree.from_branching((2, 1))
    with pytest.raises(TypeError, match="drafts a token tree.*TreeSpeculativeDecoder"):
        SpeculativeDecoder(TARGET, LookupTreeDrafter(V, tree), 2, SAMPLING)
    with pytest.raises(ValueError, match="vocab mismatch"):
        SpeculativeDecoder(TARGET, NgramLM(V + 1), 2, SAMPLING)
    with pytest.raises(ValueError, match='verify_widths must be "auto", "static" or a tuple'):
        SpeculativeDecoder(TARGET, SMALL_DRAFT, 2, SAMPLING, verify_widths=np.array([1, 2]))
    with pytest.raises(TypeError, match="warper"):
        SpeculativeDecoder(TARGET, SMALL_DRAFT, 2, lambda x: x)
    with pytest.raises(TypeError, match="warper"):
        AutoregressiveDecoder(TARGET, "greedy")
    with pytest.raises(ValueError, match="cache_len"):
        AutoregressiveDecoder(TARGET, SAMPLING, cache_len=1)
    with pytest.raises(ValueError, match="temperature"):
        make_warper(temperature=-1.0)
    # A cache longer than a learned-position table is caught when the decoder first runs.
    short = TransformerLM(
        TransformerConfig.gpt2(V, num_layers=1, embed_dim=16, num_heads=2, mlp_dim=16, max_len=32)
    )
    with pytest.raises(ValueError, match="max_len"):
        AutoregressiveDecoder(short, SAMPLING, cache_len=64).generate(
            short.init_params(KEY), [np.array([1])], KEY, 2
        )


def test_nan_params_raise_from_check_finite_result(ar, spec):
    decoder, draft_params = spec
    params = target_params()
    poisoned = jax.tree.map(lambda x: x, params)
    poisoned["final_norm"] = dict(
        params["final_norm"], scale=params["final_norm"]["scale"] * np.nan
    )
    # The message names the model whose numbers went NaN, and the params to check.
    target_nan = (
        r"^the target's logits contained NaN for batch rows \[0, 1, 2, 3\] \(check target_params"
    )
    with pytest.raises(ValueError, match=target_nan):
        ar.generate(poisoned, list(PROMPTS), KEY, 3)
    with pytest.raises(ValueError, match=target_nan):
        decoder.generate(poisoned, draft_params, list(PROMPTS), KEY, 3)
    # NaN in the draft alone is caught too (its q enters the acceptance rule), and named.
    with pytest.raises(ValueError, match="draft's logits or probabilities contained NaN") as caught:
        decoder.generate(params, poisoned, list(PROMPTS), KEY, 3)
    assert "check draft_params" in str(caught.value)


def test_nan_flags_name_each_model_and_row():
    # Hand-written flags: rows 1, 3 target NaN; rows 2, 3 draft NaN (bits NAN_TARGET, NAN_DRAFT).
    flags = nan_flags(jnp.array([False, True, False, True]), jnp.array([False, False, True, True]))
    assert flags.dtype == jnp.int32
    np.testing.assert_array_equal(flags, [0, NAN_TARGET, NAN_DRAFT, NAN_TARGET | NAN_DRAFT])
    np.testing.assert_array_equal(nan_flags(jnp.array([True, False])), [NAN_TARGET, 0])
    assert nan_message(np.zeros(4, np.int32)) is None
    assert nan_message(np.asarray(flags)) == (
        "the target's logits contained NaN for batch rows [1, 3] (check target_params and the "
        "prompts); the draft's logits or probabilities contained NaN for batch rows [2, 3] "
        "(check draft_params): the generated tokens of those rows are meaningless"
    )
