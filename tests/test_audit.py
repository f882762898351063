"""The randomized losslessness audit (`specjax.testing.audit`): its configurations and verdicts.

* The samplers: deterministic per seed, round-robin over families, every knob's values drawn
  (both rules, every γ policy, trees with and without replacement, sampled and top-k children,
  EAGLE chains, static and dynamic trees, reduced draft vocabularies, EOS, ragged mixed
  prompts), every random topology a valid `TokenTree`, and every spec a JSON round trip. Pure
  Python: nothing is built.
* Every family's builder makes a decoder of the spec's kind (no generation); a sharded spec
  asks for its devices by name, and `check_decoder` reads a `ShardedDecoder`'s law from the
  decoder it runs (one device here: the multi-device runs are the script's).
* Beam search: speculative equals plain on a random tree below 2+ beams; a reference ranking
  by another length penalty fails (deterministic checks: p-value 1 or 0).
* End to end: two lossless configurations pass, `replay` repeats a run's report exactly, and a
  family built on a biased rule (token-wise verification without the residual, mix 0.9) fails.
  False-failure rate of the passing run: its Bonferroni bound, k x 1e-6 over its k checks
  (`AuditResult.false_failure_rate`, asserted below 1e-4); the sharded run's, its k x 1e-6
  (below 2e-5). The biased run failed at
  p = 6e-231 when written (2^12 rows), against the 1e-6 threshold.
"""

from __future__ import annotations

import collections
import dataclasses
import json

import jax
import numpy as np
import pytest

from specjax.decoding import (
    BeamSearchDecoder,
    ShardedDecoder,
    SpeculativeDecoder,
    TokenTree,
    TreeSpeculativeDecoder,
)
from specjax.decoding.rules import BoundRule
from specjax.testing import audit, biased
from specjax.testing.decoder import lawful

SAMPLES = 300  # per family; ~0.2 s of numpy in all


def _knobs(family):
    rng = np.random.default_rng(5)
    return [audit.sample(family, rng).knobs for _ in range(SAMPLES)]


def test_specs_are_deterministic_and_round_robin():
    a = audit.specs(10, seed=3)
    assert a == audit.specs(10, seed=3) and a != audit.specs(10, seed=4)
    names = list(audit.FAMILIES)
    assert [s.family for s in a] == [names[i % len(names)] for i in range(10)]
    assert [s.family for s in audit.specs(4, families=["tree", "eagle"])] == ["tree", "eagle"] * 2
    for spec in a:
        assert audit.Spec.from_json(spec.to_json()) == spec
    with pytest.raises(ValueError, match="family: unknown 'greedy'"):
        audit.specs(2, families=["greedy"])
    with pytest.raises(ValueError, match="runs must be >= 1"):
        audit.specs(0)


@pytest.mark.parametrize("family", list(audit.LAW_FAMILIES))
def test_every_family_draws_the_shared_knobs(family):
    knobs = _knobs(family)
    low = 5 if family in ("eagle", "medusa") else 4  # the tiny Llama: 5 to 7 tokens
    assert {k["vocab"] for k in knobs} == set(range(low, 8))
    assert 0.2 < np.mean([k["eos_id"] is not None for k in knobs]) < 0.5
    assert {len(k["prompts"]) for k in knobs} == {1, 2, 3}
    assert any(k["mixed"] for k in knobs) and not any(
        k["mixed"] for k in knobs if len(k["prompts"]) == 1
    )
    assert any(k["top_k"] for k in knobs) and any(k["top_p"] < 1 for k in knobs)
    temps = [k["temperature"] for k in knobs]
    assert 0.5 <= min(temps) < 0.6 and 1.2 < max(temps) <= 1.3
    for k in knobs:
        assert all(0 <= t < k["vocab"] for p in k["prompts"] for t in p) and k["prompts"][0]
        if k.get("parents"):
            TokenTree(tuple(k["parents"]))  # raises on an invalid topology


def test_family_knobs_cover_their_kinds():
    seen = collections.defaultdict(set)
    for family in audit.FAMILIES:
        for k in _knobs(family):
            for name in ("rule", "outer_rule", "inner_rule", "children", "replacement",
                         "structure", "eagle3"):  # fmt: skip
                if name in k:
                    seen[family, name].add(k[name])
            if "policy" in k:
                seen[family, "policy"].add(str(k["policy"]).partition(":")[0])
            if "draft_ids" in k:
                seen[family, "reduced"].add(k["draft_ids"] is not None)
            if k.get("parents"):
                depth = [0]
                for p in k["parents"][1:]:
                    depth.append(depth[p] + 1)
                seen[family, "depth"].add(max(depth))
    both = {True, False}
    rules = {"tokenwise", "block"}
    assert seen["chain", "rule"] == seen["adaptive", "rule"] == rules
    assert seen["hierarchy", "outer_rule"] == seen["hierarchy", "inner_rule"] == rules
    assert seen["adaptive", "policy"] == set(audit.POLICIES)
    assert seen["lookup", "policy"] == {*audit.POLICIES, "None"}
    assert seen["tree", "replacement"] == both and seen["tree", "children"] == {"sample", "top_k"}
    assert seen["tree", "depth"] == {1, 2, 3, 4} and seen["lookup_tree", "depth"] == {1, 2, 3, 4}
    assert seen["eagle", "structure"] == {"chain", "tree", "dynamic"}
    assert seen["eagle", "eagle3"] == both and seen["eagle", "reduced"] == both
    assert seen["medusa", "reduced"] == both and seen["medusa", "replacement"] == both


def test_beam_knobs():
    knobs = _knobs("beam")
    assert {k["num_beams"] for k in knobs} == {1, 2, 3, 4}
    assert {k["max_new_tokens"] for k in knobs} == set(range(3, 11))
    assert {k["gamma"] for k in knobs} == {None, 1, 2, 3, 4}
    assert (
        min(k["length_penalty"] for k in knobs) < -0.9
        and max(k["length_penalty"] for k in knobs) > 1.4
    )
    assert 0.4 < np.mean([k["eos_id"] is not None for k in knobs]) < 0.6
    assert {len(k["prompts"]) for k in knobs} == {1, 2, 3}
    for k in knobs:
        assert (k["gamma"] is None) == bool(k["parents"])
        if k["parents"]:
            TokenTree(tuple(k["parents"]))


@pytest.mark.parametrize("family", list(audit.LAW_FAMILIES))
def test_every_family_builds_its_kind_of_decoder(family):
    rng = np.random.default_rng(0)
    spec = audit.sample(family, rng)
    while family == "eagle" and spec.knobs["structure"] != "dynamic":  # the rarest builder
        spec = audit.sample(family, rng)
    case = audit.build(spec)
    inner = lawful(case.decoder)
    if family == "sharded":
        assert isinstance(case.decoder, ShardedDecoder) and inner is case.decoder.decoder
        assert case.decoder.data_parallelism == spec.knobs["data"]
    tree = spec.knobs.get("parents") or spec.knobs.get("structure") in ("tree", "dynamic")
    assert isinstance(inner, TreeSpeculativeDecoder if tree else SpeculativeDecoder), inner
    assert len(case.params) == len(case.decoder.models)
    assert inner.vocab_size == spec.knobs["vocab"]
    assert case.check["prompts"] == [tuple(p) for p in spec.knobs["prompts"]]


def test_a_sharded_spec_needs_its_devices_and_its_decoder_passes():
    knobs = dict(audit.sample("chain", np.random.default_rng(3)).knobs, inner="chain")
    too_many = jax.local_device_count() * 2
    with pytest.raises(ValueError, match=rf"knobs\['data'\] = {too_many}: .* over {too_many}"):
        audit.build(audit.Spec("sharded", dict(knobs, data=too_many)))
    # check_decoder through the wrapper: the law and the greedy check are its inner decoder's.
    spec = audit.Spec("sharded", dict(knobs, data=1))
    assert isinstance(audit.build(spec).decoder, ShardedDecoder)
    result = audit.replay(spec, seed=3, draws=1 << 12)
    print(result)
    report = result.runs[0].report
    assert result.passed and report.num_checks == 1 + 4 + 1  # joint, γ + 1 = 4 tokens, greedy
    assert report.worst("greedy_t0").passed


def test_the_beam_check_passes_speculative_beam_search_and_catches_a_wrong_reference():
    rng = np.random.default_rng(4)
    spec = audit.sample("beam", rng)
    while spec.knobs["num_beams"] < 2 or spec.knobs["parents"] is None:  # a tree below 2+ beams
        spec = audit.sample("beam", rng)
    result = audit.replay(spec)
    print(result)
    assert result.passed and result.runs[0].report.num_checks == len(spec.knobs["prompts"])
    # Negative control: a reference that ranks by another length penalty (same beams, so the
    # same number of hypotheses) must be told apart by the hypotheses or their scores.
    case = audit.build(spec)
    k = spec.knobs
    other = BeamSearchDecoder(case.check["plain"].target, k["num_beams"],
                              k["length_penalty"] + 0.5, cache_len=32)  # fmt: skip
    wrong = dataclasses.replace(case, check=dict(case.check, plain=other))
    report = wrong.verify(wrong, seed=0)
    print(report)
    assert not report.passed


def _biased_build(knobs):
    """The chain family's decoder with token-wise verification that skips the residual."""
    case = audit.build(audit.Spec("chain", knobs))
    rule = BoundRule(biased.biased_accept, (("variant", biased.BIASED["no_residual"]),))
    decoder = dataclasses.replace(case.decoder, accept=rule)
    return dataclasses.replace(case, decoder=decoder, spec=audit.Spec("biased", knobs))


BIASED = audit.Family(
    lambda rng: dict(audit.FAMILIES["chain"].sample(rng), mix=0.9, top_k=None, top_p=1.0),
    _biased_build,
)


@pytest.mark.slow
def test_an_audit_passes_lossless_decoders_replays_them_and_fails_a_biased_one():
    result = audit.run(2, seed=1, draws=1 << 12, families=["chain", "tree"])
    print(result)
    assert result.passed and result.false_failure_rate < 1e-4
    first = result.runs[0]
    again = audit.replay(first.spec, seed=first.seed, draws=1 << 12)
    assert again.runs[0].report.results == first.report.results
    record = json.loads(json.dumps(first.to_record()))
    assert record["passed"] and record["seed"] == first.seed and record["family"] == "chain"

    registry = dict(audit.FAMILIES, biased=BIASED)
    bad = audit.run(1, seed=1, draws=1 << 12, families=["biased"], registry=registry)
    print(bad)
    assert not bad.passed and bad.failures[0].report.min_pvalue < 1e-20
    assert "FAILED" in str(bad)
