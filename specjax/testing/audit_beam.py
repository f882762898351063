"""The audit's `beam` family: speculative beam search must equal plain beam search.

Beam search is deterministic, so its check is equality, not a law: `SpeculativeBeamDecoder`
(a bigram draft's greedy chain of γ = 1-4 tokens, or a random top-k tree of at most vocab
children per node, below every beam)
against `BeamSearchDecoder` on the same bigram target, B = 1-4 beams, length penalty -1 to 1.5,
3-10 new tokens, an EOS in half the runs, one to three ragged prompts in one call. Per prompt,
a check passes when both return the same hypotheses and lengths, and scores within 1e-4 (the two
add the same float32 log-probabilities in another order). Bigram targets read their logits
from a table, so the verification pass and the one-token steps see identical values.
"""

from __future__ import annotations

import numpy as np

from specjax.testing.audit_families import (
    Case,
    Family,
    Spec,
    bigram_knobs,
    bigram_pair,
    tree_parents,
)
from specjax.testing.kit import CheckResult, Report
from specjax.testing.stats import PVALUE_THRESHOLD, Chi2

SCORE_ATOL = 1e-4


def _sample(rng: np.random.Generator) -> dict:
    k = bigram_knobs(rng)
    for name in ("temperature", "top_k", "top_p", "mixed"):  # no warper; one call holds all
        del k[name]
    k["eos_id"] = int(rng.integers(k["vocab"])) if rng.random() < 0.5 else None
    k["num_beams"] = int(rng.integers(1, 5))
    k["length_penalty"] = round(float(rng.uniform(-1.0, 1.5)), 2)
    k["max_new_tokens"] = int(rng.integers(3, 11))
    if rng.random() < 0.5:
        k["gamma"], k["parents"] = int(rng.integers(1, 5)), None
    else:
        k["gamma"], k["parents"] = None, tree_parents(rng, max_depth=3, max_branch=k["vocab"])
    return k


def _build(k: dict) -> Case:
    from specjax.decoding import BeamSearchDecoder, SpeculativeBeamDecoder, TokenTree

    target, tp, draft, dp = bigram_pair(k)
    beams, penalty = k["num_beams"], k["length_penalty"]
    if k["parents"] is None:
        fast = SpeculativeBeamDecoder(target, draft, k["gamma"], beams, penalty, cache_len=32)
    else:
        tree = TokenTree(tuple(k["parents"]))
        fast = SpeculativeBeamDecoder(target, draft, num_beams=beams, length_penalty=penalty,
                                      tree=tree, cache_len=32)  # fmt: skip
    plain = BeamSearchDecoder(target, beams, penalty, cache_len=32)
    check = {"prompts": [tuple(p) for p in k["prompts"]], "eos_id": k["eos_id"], "plain": plain}
    return Case(Spec("beam", k), fast, (tp, dp), check, verify=_verify)


def _verify(case: Case, *, seed: int, **_) -> Report:
    """One deterministic check per prompt: statistic = differences, p-value 1 (equal) or 0."""
    del seed  # beam search draws nothing
    k, check = case.spec.knobs, case.check
    prompts = [np.asarray(p, np.int32) for p in check["prompts"]]
    calls = {"prompts": prompts, "max_new_tokens": k["max_new_tokens"], "eos_id": check["eos_id"]}
    want = check["plain"].generate(case.params[0], **calls)
    got = case.decoder.generate(*case.params, **calls)
    got_tokens, want_tokens = got.new_tokens(), want.new_tokens()
    results = []
    for row, prompt in enumerate(check["prompts"]):
        same = [
            [h.tolist() for h in got_tokens[row]] == [h.tolist() for h in want_tokens[row]],
            np.array_equal(np.asarray(got.lengths[row]), np.asarray(want.lengths[row])),
            np.allclose(np.asarray(got.scores[row]), np.asarray(want.scores[row]),
                        atol=SCORE_ATOL, rtol=0),
        ]  # fmt: skip
        bad = same.count(False)
        chi2 = Chi2(float(bad), 0, 0.0 if bad else 1.0, 0)
        results.append(CheckResult(f"prompt{list(prompt)}", "equal_beam", chi2, PVALUE_THRESHOLD))
    return Report("beam", 0, PVALUE_THRESHOLD, tuple(results), 0.0)


BEAM = Family(_sample, _build)
