"""`testing.check_decoder`: the kit pointed at whole chain decoders (token-wise, block, γ policy).

Every decoder runs on `tiny_bigram_pair(5, seed=0)` (bigram target and draft tables over 5
tokens, fixed Dirichlet seeds) with 2^14 rows on one prompt; the first L = max(3, tokens per
step) tokens are compared with the target's law enumerated by its own forward pass (the joint
and L marginals, pooled chi-square at p < 1e-6), plus, where asked, temperature 0 against greedy
autoregressive decoding. A lossless decoder here has <= 7 checks, so fails with probability
<= 7e-6; the three together <= 2e-5 (Bonferroni). Seeds are fixed: runs are deterministic. The
negative controls must fail: with these seeds the weakest (token-wise without the residual)
fails its joint check at p ~ 1e-216 (statistic 1761 on 272 dof), the lossy lenient:0.5 at
statistic ~ 6100, against a 1e-20 bar. Tree decoders: test_check_decoder_tree.py.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from check_decoder_setup import PAIR, T1, check

from specjax import testing
from specjax.decoding import HeuristicGamma, SpeculativeDecoder
from specjax.decoding.rules import BoundRule, accept_rule

# Bigram pairs, four calls per program: level 1 costs more than it saves (tests/conftest.py).
pytestmark = pytest.mark.compile_bound


def _chain(accept="tokenwise", gamma=3, cls=SpeculativeDecoder, **kwargs):
    target, _, draft, _ = PAIR
    rule = accept_rule(accept) if isinstance(accept, str) else accept
    return cls(target, draft, gamma, T1, cache_len=32, accept=rule, **kwargs)


@pytest.mark.parametrize(
    ("make", "greedy"),
    [
        (lambda: _chain("tokenwise"), True),
        (lambda: _chain("block"), False),
        (lambda: _chain("block", gamma=4, gamma_policy=HeuristicGamma(4)), False),
    ],
    ids=["tokenwise_g3", "block_g3", "block_heuristic_g4"],
)
def test_lossless_decoders_pass(make, greedy):
    decoder = make()
    report = check(decoder, greedy=greedy)
    assert report.passed, str(report)
    assert report.num_checks == max(3, decoder.tokens_per_step) + 1 + greedy


def _accept_everything(key, draft_tokens, draft_probs, target_probs, *, fill_value=-1, **_):
    """A broken rule: every draft is accepted, then the target's argmax (not lossless, and at
    temperature 0 it emits the draft's argmax, not the target's)."""
    del key, draft_probs, fill_value
    batch, gamma = draft_tokens.shape
    bonus = jnp.argmax(target_probs[:, gamma], axis=-1)[:, None]
    tokens = jnp.concatenate([draft_tokens, bonus], axis=1).astype(jnp.int32)
    return tokens, jnp.full((batch,), gamma, jnp.int32)


@pytest.mark.parametrize(
    "make",
    [
        lambda: _chain(BoundRule(testing.biased.biased_accept, (("variant", 1),))),
        lambda: _chain(_accept_everything),
    ],
    ids=["no_residual", "accept_everything"],
)
def test_biased_decoders_fail(make):
    report = check(make(), greedy=False)
    assert not report.passed and report.min_pvalue < 1e-20, str(report)


def test_a_lossy_rule_fails_and_its_greedy_equality_holds():
    # typical:0.09,0.3 is flagged by check_acceptance_rule in test_lossy_accept.py.
    report = check(_chain("lenient:0.5"))
    assert not report.passed and report.min_pvalue < 1e-20, str(report)
    assert report.worst("greedy_t0").passed  # at temperature 0 both rules are exact


def test_greedy_equality_catches_a_wrong_greedy_decoder():
    target, tp, draft, dp = PAIR
    chi2 = testing.decoder.greedy_equality(_chain(_accept_everything), (tp, dp), [[1, 2], [0]])
    assert chi2.pvalue == 0.0 and chi2.statistic >= 1


def test_target_law_is_the_chain_rule_of_the_bigram_table():
    target, tp, draft, dp = PAIR
    p = np.exp(np.asarray(tp["log_probs"], np.float64))
    p /= p.sum(-1, keepdims=True)
    law = testing.decoder.target_law(_chain(), tp, (1, 2), 3)
    expected = p[2][:, None, None] * p[:, :, None] * p[None, :, :]
    np.testing.assert_allclose(law, expected, rtol=1e-5)
    assert abs(law.sum() - 1.0) < 1e-9


# -- EOS, and ragged rows side by side -------------------------------------------------------


def test_stop_law_puts_what_follows_the_first_eos_on_the_stop_symbol():
    joint = np.array([[0.1, 0.2], [0.3, 0.4]])  # two tokens over vocab 2; EOS = 1
    expected = np.zeros((3, 3))
    expected[0, 0], expected[0, 1] = 0.1, 0.2  # (0, 1): the EOS is the last position
    expected[1, 2] = 0.3 + 0.4  # (1, x): stopped after the first token
    np.testing.assert_array_equal(testing.decoder.stop_law(joint, 1), expected)


def test_stopped_and_ragged_rows_of_a_lossless_decoder_pass():
    # 3 prompts x 5 checks (the joint of L = 4 tokens and 4 marginals) at 1e-6: false failure
    # <= 1.5e-5.
    report = check(_chain(), ((0, 1), (2, 3), (4,)), greedy=False, eos_id=2, mixed=True)
    assert report.passed and report.num_checks == 15, str(report)


class _RunsPastEos(SpeculativeDecoder):
    """A planted bug: rows go on generating after their EOS."""

    def generate(self, *params, eos_id=None, **kwargs):
        del eos_id
        return super().generate(*params, **kwargs)


class _RowsSwapped(SpeculativeDecoder):
    """A planted bug: every row returns its neighbour's continuation."""

    def generate(self, *params, **kwargs):
        result = super().generate(*params, **kwargs)
        return dataclasses.replace(result, tokens=jnp.roll(result.tokens, 1, axis=0))


def test_a_decoder_that_runs_past_eos_fails():
    report = check(_chain(cls=_RunsPastEos), greedy=False, eos_id=2)
    assert not report.passed and report.min_pvalue == 0.0, str(report)  # impossible streams


def test_rows_that_swap_outputs_fail_only_side_by_side():
    # Equal prompt lengths, different last tokens (bigram laws): one prompt per call cannot see
    # the swap (every row has the same law); prompts side by side must.
    prompts = ((0, 1), (2, 3))
    assert check(_chain(cls=_RowsSwapped), prompts, greedy=False).passed  # false failure <= 1e-5
    report = check(_chain(cls=_RowsSwapped), prompts, greedy=False, mixed=True)
    assert not report.passed and report.min_pvalue < 1e-20, str(report)


def test_bad_arguments_raise():
    target, tp, draft, dp = PAIR
    with pytest.raises(ValueError, match="params"):
        testing.check_decoder(_chain(), tp)
    with pytest.raises(ValueError, match="draws"):
        testing.check_decoder(_chain(), tp, dp, draws=0)
    with pytest.raises(ValueError, match="vocab"):
        testing.tiny_bigram_pair(vocab=40)
