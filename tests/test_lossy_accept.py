"""The lossy contrasts `lenient_accept` and `typical_accept` (decoding/rules/lossy.py): selectable
by name, arguments checked, the closed-form law of the first emitted token confirmed by sampling,
and flagged as lossy by the test kit (lenience = 1 passes: it is speculative_accept).

False-failure budget: test_first_token_law_matches_sampling makes 6 chi-square checks at 1e-6;
test_the_kit_flags_lossy_rules' lenience = 1 run makes 16 checks at 1e-6: <= 2.2e-5 in all
(Bonferroni). The lossy rules fail the kit at p < 1e-12 with these fixed seeds.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import testing
from specjax.decoding import LossyRuleWarning, SpeculativeDecoder, make_warper, speculative_accept
from specjax.decoding.rules import BoundRule, accept_rule, is_lossless, lossy
from specjax.models import TransformerConfig, TransformerLM


def test_rules_by_name_and_bad_arguments():
    rule = accept_rule("lenient:0.5")
    assert isinstance(rule, BoundRule) and rule == accept_rule("lenient:0.5")
    assert hash(rule) == hash(accept_rule(" lenient:0.5 "))
    assert rule.knobs == (("lenience", 0.5),)
    assert accept_rule("typical:0.09,0.3").knobs == (("epsilon", 0.09), ("delta", 0.3))
    assert accept_rule("typical:0.09/0.3") == accept_rule("typical")  # Medusa's pair by default
    for spec, word in [
        ("lenient:0", "lenience"),
        ("lenient:1.5", "lenience"),
        ("lenient", "one argument"),
        ("typical:0.09", "two arguments"),
        ("typical:0,0.3", "epsilon"),
        ("typical:0.09,2", "delta"),
    ]:
        with pytest.raises(ValueError, match=word):
            accept_rule(spec)
    p = jnp.full((1, 2, 3), 1 / 3)
    with pytest.raises(ValueError, match="lenience"):
        lossy.lenient_accept(jax.random.key(0), jnp.zeros((1, 1), int), None, p, lenience=-1.0)
    with pytest.raises(ValueError, match="delta"):
        lossy.typical_accept(jax.random.key(0), jnp.zeros((1, 1), int), None, p, delta=0.0)


def test_rules_say_whether_they_are_lossless():
    verdicts = {
        spec: is_lossless(accept_rule(spec))
        for spec in ("tokenwise", "block", "lenient:1", "lenient:0.5", "typical:0.09,0.3")
    }
    assert verdicts == {
        "tokenwise": True,
        "block": True,
        "lenient:1": True,
        "lenient:0.5": False,
        "typical:0.09,0.3": False,
    }
    assert is_lossless(lambda *a, **k: None) is None  # a user's unmarked rule: unknown


def _random_inputs(seed, batch=256, gamma=3, vocab=7):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(vocab, 0.5), (batch, gamma + 1)).astype(np.float32)
    q = rng.dirichlet(np.full(vocab, 0.5), (batch, gamma)).astype(np.float32)
    drafts = np.array([[rng.choice(vocab, p=r / r.sum()) for r in row] for row in q.astype(float)])
    return jnp.asarray(drafts, jnp.int32), jnp.asarray(q), jnp.asarray(p)


@pytest.mark.parametrize("deterministic", [False, True])
def test_lenience_one_is_speculative_accept(deterministic):
    drafts, q, p = _random_inputs(1)
    q = None if deterministic else q
    key = jax.random.key(3)
    got = lossy.lenient_accept(key, drafts, q, p, lenience=1.0)
    want = speculative_accept(key, drafts, q, p)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_typical_accepts_by_threshold_and_draws_from_p():
    drafts, _, p = _random_inputs(2)
    tokens, n = lossy.typical_accept(jax.random.key(0), drafts, None, p, epsilon=0.09, delta=0.3)
    pn = np.asarray(p, np.float64)
    pn /= pn.sum(-1, keepdims=True)
    entropy = -np.sum(pn * np.log(pn), -1)
    tau = np.minimum(0.09, 0.3 * np.exp(-entropy))  # [batch, gamma + 1]
    p_x = np.take_along_axis(pn[:, :3], np.asarray(drafts)[..., None], -1)[..., 0]
    ok = p_x > tau[:, :3]
    np.testing.assert_array_equal(np.asarray(n), np.cumprod(ok, -1).sum(-1))
    assert 0 < np.asarray(n).mean() < 3  # the case is not trivial


FIRST_TOKEN_RULES = {
    "lenient:0.5": (
        lambda k, d, q, p: lossy.lenient_accept(k, d, q, p, lenience=0.5),
        lambda p, q: lossy.lenient_first_token_law(p, q, 0.5),
    ),
    "lenient:0.1": (
        lambda k, d, q, p: lossy.lenient_accept(k, d, q, p, lenience=0.1),
        lambda p, q: lossy.lenient_first_token_law(p, q, 0.1),
    ),
    "typical:0.09,0.3": (
        lambda k, d, q, p: lossy.typical_accept(k, d, q, p),
        lambda p, q: lossy.typical_first_token_law(p, q, 0.09, 0.3),
    ),
}


@pytest.mark.parametrize("name", list(FIRST_TOKEN_RULES))
@pytest.mark.parametrize("peaked", [False, True])
def test_first_token_law_matches_sampling(name, peaked):
    rule, closed_form = FIRST_TOKEN_RULES[name]
    rng = np.random.default_rng([5, peaked])
    alpha = 0.3 if peaked else 1.0
    p1, p2, q1 = (rng.dirichlet(np.full(6, alpha)).astype(np.float32) for _ in range(3))
    law = closed_form(p1, q1)
    assert abs(law.sum() - 1.0) < 1e-12
    tv = float(lossy.total_variation(law, p1 / p1.astype(np.float64).sum()))
    assert tv > 1e-3, tv  # a real shift, measured exactly
    n = 1 << 17
    k_draft, k_rule = jax.random.split(jax.random.key(7))
    drafts = jax.random.categorical(k_draft, jnp.log(jnp.asarray(q1)), shape=(n, 1))
    p = jnp.broadcast_to(jnp.stack([p1, p2]), (n, 2, 6))
    q = jnp.broadcast_to(jnp.asarray(q1), (n, 1, 6))
    tokens, _ = jax.jit(rule)(k_rule, drafts, q, p)
    counts = np.bincount(np.asarray(tokens[:, 0]), minlength=6)
    result = testing.pooled_chi2(counts, law)
    assert result.pvalue > testing.PVALUE_THRESHOLD, (name, result, tv)  # 1 of 6 checks


def test_lenience_one_law_is_the_target():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(5), 2)
    assert lossy.total_variation(lossy.lenient_first_token_law(p, q, 1.0), p) < 1e-15
    tvs = [
        lossy.total_variation(lossy.lenient_first_token_law(p, q, lenience), p)
        for lenience in (1, 0.5, 0.1)
    ]
    assert tvs[0] < tvs[1] < tvs[2], tvs


@pytest.mark.slow
def test_the_kit_flags_lossy_rules():
    common = dict(gammas=(2,), draws=1 << 16, kinds=("prefix", "peaked"))
    exact = testing.check_acceptance_rule(accept_rule("lenient:1"), **common)
    assert exact.passed, str(exact)
    for spec in ("lenient:0.5", "typical:0.09,0.3"):
        report = testing.check_acceptance_rule(accept_rule(spec), **common)
        assert not report.passed and report.min_pvalue < 1e-12, str(report)


@pytest.mark.parametrize("kind", ["prefix", "peaked", "deterministic"])
def test_exact_stream_shift_by_enumeration(kind):
    # Exact law of the first 3 emitted tokens of chained calls (4 tokens, γ = 2, p and q per
    # prefix): lenience 1 is the target to 1e-12; the lossy settings shift it, and the first
    # token's marginal of the enumeration equals the closed form in (p1, q1).
    import functools

    from specjax.testing import law

    case = law.make_case(kind, 2)
    target = law.target_law(case)
    tv = {}
    rules = {
        "lenient:1": functools.partial(lossy.lenient_call_law, lenience=1.0),
        "lenient:0.5": functools.partial(lossy.lenient_call_law, lenience=0.5),
        "typical": lossy.typical_call_law,
    }
    closed = {
        "lenient:1": lambda p, q: lossy.lenient_first_token_law(p, q, 1.0),
        "lenient:0.5": lambda p, q: lossy.lenient_first_token_law(p, q, 0.5),
        "typical": lossy.typical_first_token_law,
    }
    for name, rule in rules.items():
        stream = law.stream_law(case, rule)
        tv[name] = float(lossy.total_variation(stream.ravel(), target.ravel()))
        # Drafts are drawn from r (q itself, or a point mass for a deterministic draft).
        first = law.marginal(stream, 0)
        np.testing.assert_allclose(first, closed[name](case.p[0], case.r[0]), atol=1e-12)
    print(kind, tv)
    assert tv["lenient:1"] < 1e-12, tv
    assert tv["lenient:0.5"] > 1e-3 and tv["typical"] > 1e-3, tv


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["lenient:0.5", "typical:0.09,0.3"])
def test_greedy_decoder_with_a_lossy_rule_equals_autoregressive(spec):
    # At temperature 0 p and q are point masses: both rules then accept exactly the target's
    # argmax and correct to it, so the decoder (taking the named rule as its static field)
    # reproduces greedy decoding.
    from decoding_setup import (
        CACHE_LEN,
        GAMMA,
        GREEDY,
        MAX_NEW,
        PROMPTS,
        TARGET,
        ar_decoder,
        as_lists,
        drafts,
        target_params,
    )

    from specjax.decoding import SpeculativeDecoder

    draft, draft_params = drafts()["noisy_self"]
    reference = ar_decoder().generate(target_params(), list(PROMPTS), jax.random.key(0), MAX_NEW)
    spec_decoder = SpeculativeDecoder(
        TARGET, draft, GAMMA, GREEDY, cache_len=CACHE_LEN, accept=accept_rule(spec)
    )
    result = spec_decoder.generate(
        target_params(), draft_params, list(PROMPTS), jax.random.key(1), MAX_NEW
    )
    assert as_lists(result) == as_lists(reference)


def test_a_decoder_built_with_a_lossy_rule_says_so():
    model = TransformerLM(
        TransformerConfig.llama(16, num_layers=1, embed_dim=16, num_heads=2, mlp_dim=32)
    )
    warper = make_warper(1.0)
    for spec in ("lenient:0.5", "typical:0.09,0.3"):
        with pytest.warns(LossyRuleWarning, match="lossy rule"):
            decoder = SpeculativeDecoder(model, model, 2, warper, accept=accept_rule(spec))
        assert decoder.lossless is False
    with warnings.catch_warnings():
        warnings.simplefilter("error", LossyRuleWarning)
        for spec in ("tokenwise", "block", "lenient:1"):
            assert SpeculativeDecoder(model, model, 2, warper, accept=accept_rule(spec)).lossless
