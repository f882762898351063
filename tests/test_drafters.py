"""The proposer and acceptance-rule seams: drafters and rules plug into the one decoder.

`LookupDrafter` is a second drafter written against the `Drafter` protocol alone: it proposes up
to γ tokens in one shot and fewer, or none, when its match runs out (`num_drafted`). It proves the
seam: greedy decoding with it equals autoregressive greedy token for token, sampled decoding
matches the target's exact joint law, and the sharded decoder runs it unchanged. A custom
acceptance rule passed as `accept=` is really the one used.

False failures: the one statistical check (chi-square of the first three sampled tokens against
their exact enumerated joint, 100,000 samples) fails below p = 1e-6; with the chi-square
approximation accurate within a factor of 2 at that tail, a correct decoder fails this file with
probability <= 2e-6. The seed is fixed, so the outcome is deterministic.
"""

from __future__ import annotations

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
    TARGET,
    V,
    ar_decoder,
    as_lists,
    drafts,
    random_params,
    spec_decoder,
    target_params,
)

from specjax import sharding as sh
from specjax.decoding import (
    LookupDrafter,
    LookupTreeDrafter,
    ModelDrafter,
    ShardedDecoder,
    SpeculativeDecoder,
    TokenTree,
    Verdict,
    speculative_accept,
)
from specjax.decoding.drafters.base import is_drafter
from specjax.decoding.state import init_sequences
from specjax.models import PromptLookupLM

KEY = jax.random.PRNGKey(11)


def _propose(drafter, rows, gamma, cache_len=16):
    prompts = np.zeros((len(rows), cache_len), np.int32)
    for b, row in enumerate(rows):
        prompts[b, : len(row)] = row
    lengths = jnp.asarray([len(r) for r in rows], jnp.int32)
    seq = init_sequences(jnp.asarray(prompts), lengths, cache_len)
    state = drafter.init({}, jnp.asarray(prompts), lengths, cache_len)
    return drafter.propose({}, state, seq, KEY, gamma)


def test_lookup_drafter_proposes_the_continuation_of_the_latest_match():
    rows = [
        [1, 2, 3, 9, 1, 2],  # suffix (1, 2) matched at 0: propose 3 9 1
        [5, 6, 7],  # no earlier occurrence of any suffix: nothing
        [4, 4],  # suffix (4) matched at 0: only one follower is known (the 4 itself)
        [7, 8, 7, 8, 7],  # (8, 7) latest earlier match at 1, followers 8 7: two of three
        [2, 5, 1, 2, 6, 1, 2],  # (1, 2) latest earlier match at 2 (not 5: that is the suffix)
    ]
    proposal = _propose(LookupDrafter(V, max_ngram=2), rows, gamma=3)
    assert proposal.probs is None and proposal.calls == 0
    np.testing.assert_array_equal(proposal.num_drafted, [3, 0, 1, 2, 3])
    tokens = np.asarray(proposal.tokens)
    want = [[3, 9, 1], [0, 0, 0], [4, 0, 0], [8, 7, 0], [6, 1, 2]]
    np.testing.assert_array_equal(tokens, want)


def test_lookup_drafter_prefers_the_longest_suffix():
    # (3) alone last occurred at 4 (-> 0), but (2, 3) occurred at 1 (-> 7): the longer match wins.
    proposal = _propose(LookupDrafter(V, max_ngram=2), [[1, 2, 3, 7, 3, 0, 2, 3]], gamma=1)
    np.testing.assert_array_equal(proposal.tokens, [[7]])


def test_lookup_drafter_rejects_bad_ngram_range():
    with pytest.raises(ValueError, match="min_ngram <= max_ngram"):
        LookupDrafter(V, max_ngram=1, min_ngram=2)
    # max_ngram=1000 used to hang the first generate in tracing (the search is unrolled);
    # 2.5 failed there without a name, True was read as 1, "5" as a vocabulary.
    for cls in (LookupDrafter, LookupTreeDrafter, PromptLookupLM):
        extra = (TokenTree.chain(2),) if cls is LookupTreeDrafter else ()
        cases = [
            (dict(max_ngram=1000), ValueError, r"max_ngram must be an integer in \[1, 32\]"),
            (dict(max_ngram=2.5), TypeError, "max_ngram must be an integer; got 2.5"),
            (dict(max_ngram=True), TypeError, "max_ngram must be an integer; got True"),
            (dict(min_ngram=0), ValueError, r"min_ngram must be an integer >= 1"),
        ]
        for kwargs, error, match in cases:
            with pytest.raises(error, match=match):
                cls(V, *extra, **kwargs)
        for vocab in ("5", 5.0, 0):
            with pytest.raises((TypeError, ValueError), match="vocab_size must be an integer"):
                cls(vocab, *extra)
        cls(np.int64(V), *extra, max_ngram=np.int64(32))  # NumPy integers are integers


def test_model_drafter_commit_keeps_what_the_model_saw_and_survived():
    drafter = ModelDrafter(*drafts()["bigram"][:1], SAMPLING)
    state = drafter.model.init_state(3, 8).replace(lengths=jnp.array([7, 7, 3], jnp.int32))
    verdict = Verdict(
        lengths_before=jnp.array([4, 4, 3], jnp.int32),
        num_accepted=jnp.array([1, 4, 2], jnp.int32),
        active=jnp.array([True, True, False]),
    )
    # With gamma = 4 the model saw L + 3 = 7 tokens: it keeps min(L + n, 7); inactive rows stay.
    np.testing.assert_array_equal(drafter.commit(state, verdict).lengths, [5, 7, 3])


def test_is_drafter_tells_drafters_from_models():
    assert is_drafter(LookupDrafter(V)) and is_drafter(ModelDrafter(TARGET, SAMPLING))
    assert not is_drafter(TARGET)


def test_greedy_with_lookup_drafter_equals_autoregressive_greedy():
    want = as_lists(ar_decoder().generate(target_params(), list(PROMPTS), KEY, MAX_NEW))
    decoder = spec_decoder(LookupDrafter(V))
    result = decoder.generate(target_params(), {}, list(PROMPTS), KEY, MAX_NEW)
    assert as_lists(result) == want
    summary = result.summary()
    assert summary["draft_calls"] == 0
    # The test covered accepted lookups and rows that drafted fewer than gamma.
    assert summary["sampler_tokens_per_iteration"] > 1.0
    tested = np.asarray(result.stats.tested_at)
    assert tested[-1] < tested[0]


def test_explicit_model_drafter_is_the_same_decoder_as_a_plain_draft_model():
    # ... and its draft steps unrolled (the default on an accelerator) give the same tokens as
    # the loop (the default on CPU): the same ops, keys and draws.
    draft, dparams = drafts()["noisy_self"]
    plain = spec_decoder(draft, SAMPLING)
    wrapped = spec_decoder(ModelDrafter(draft, SAMPLING), SAMPLING)
    unrolled = spec_decoder(ModelDrafter(draft, SAMPLING, unroll=True), SAMPLING)
    a = plain.generate(target_params(), dparams, list(PROMPTS), KEY, MAX_NEW)
    b = wrapped.generate(target_params(), dparams, list(PROMPTS), KEY, MAX_NEW)
    c = unrolled.generate(target_params(), dparams, list(PROMPTS), KEY, MAX_NEW)
    assert as_lists(a) == as_lists(b) == as_lists(c)


def _reject_all(key, draft_tokens, draft_probs, target_probs, *, fill_value, num_drafted=None):
    """A valid (and useless) rule: verify nothing; the token is the target's own sample."""
    none = jnp.zeros((draft_tokens.shape[0],), jnp.int32)
    return speculative_accept(
        key, draft_tokens, draft_probs, target_probs, fill_value=fill_value, num_drafted=none
    )


def test_the_acceptance_rule_is_a_static_field_of_the_decoder():
    draft, dparams = drafts()["self"]  # the target drafts itself: the default rule accepts all
    decoder = SpeculativeDecoder(TARGET, draft, GAMMA, ar_decoder().warper, cache_len=CACHE_LEN)
    assert decoder.accept is speculative_accept
    custom = SpeculativeDecoder(
        TARGET, draft, GAMMA, ar_decoder().warper, cache_len=CACHE_LEN, accept=_reject_all
    )
    assert hash(custom) != hash(decoder)
    result = custom.generate(target_params(), dparams, list(PROMPTS), KEY, MAX_NEW)
    want = as_lists(ar_decoder().generate(target_params(), list(PROMPTS), KEY, MAX_NEW))
    assert as_lists(result) == want  # greedy either way
    assert result.summary()["tokens_per_iteration"] == 1.0  # but one token per target call
    with pytest.raises(TypeError, match="accept must be an acceptance rule"):
        SpeculativeDecoder(TARGET, draft, GAMMA, SAMPLING, accept="block")


def test_sharded_decoder_runs_a_new_drafter_unchanged():
    decoder = spec_decoder(LookupDrafter(V), SAMPLING)
    want = decoder.generate(target_params(), {}, list(PROMPTS), KEY, MAX_NEW)
    sharded = ShardedDecoder(decoder, sh.make_mesh((-1, 1)))
    got = sharded.generate(
        target_params(), {}, prompts=list(PROMPTS), key=KEY, max_new_tokens=MAX_NEW
    )
    assert as_lists(got) == as_lists(want)


def test_vocab_mismatch_with_a_drafter_raises():
    with pytest.raises(ValueError, match="vocab mismatch"):
        spec_decoder(LookupDrafter(V + 1))


@pytest.mark.slow
def test_sampling_with_lookup_drafter_matches_the_exact_target_joint():
    import test_decoding_sampling as tds  # its tiny-vocabulary enumeration machinery

    params = random_params(tds.TARGET, seed=1, scale=0.25)
    joint = tds.exact_joint(tds.TARGET, params, tds.PLAIN)
    decoder = SpeculativeDecoder(
        tds.TARGET, LookupDrafter(tds.V), 3, tds.PLAIN, cache_len=tds.CACHE_LEN, min_bucket=4
    )
    samples, summary = tds.sample_first_tokens(
        lambda prompts, key: decoder.generate(params, {}, prompts, key, tds.NUM_TOKENS), seed=40
    )
    # False failure <= ~2e-6 (threshold 1e-6, chi-square approximation within a factor 2).
    assert tds.chi_square_pvalue(tds.counts_of(samples), joint) > tds.P_THRESHOLD
    # The prompt (3 1 4 1) has an earlier match: lookups were made and sometimes accepted.
    assert summary["sampler_tokens_per_iteration"] > 1.0


def test_every_drafter_with_a_warper_refuses_one_that_is_not_a_warper():
    """Each drafter checks its own warper when built (the decoders checked only theirs: a
    drafter's None failed inside generate with an AttributeError)."""
    from specjax.decoding import (
        AdaptiveDrafter,
        EagleDrafter,
        EagleTreeDrafter,
        FixedGamma,
        MedusaDrafter,
        MedusaTreeDrafter,
        TreeDrafter,
    )
    from specjax.models import EagleHead, MedusaHeads

    draft = drafts()["transformer"][0]
    tree = TokenTree.chain(2)
    head, heads = EagleHead(TARGET), MedusaHeads(TARGET, 2)
    builds = [
        lambda w: ModelDrafter(draft, w),
        lambda w: TreeDrafter(draft, w, tree),
        lambda w: AdaptiveDrafter(draft, w, FixedGamma(2), 2),
        lambda w: EagleDrafter(head, w),
        lambda w: EagleTreeDrafter(head, w, tree),
        lambda w: MedusaDrafter(heads, w),
        lambda w: MedusaTreeDrafter(heads, w, tree),
    ]
    with pytest.raises(TypeError, match="policy must be a GammaPolicy"):  # built, then failed
        AdaptiveDrafter(draft, SAMPLING, None, 2)
    for build in builds:
        build(SAMPLING)  # a Warper is accepted
        for bad in (None, 0.7, "greedy"):
            with pytest.raises(TypeError, match=r"warper must be a specjax Warper .*got"):
                build(bad)
