"""A randomized losslessness audit: `check_decoder` on decoder configurations drawn at random.

    from specjax.testing import audit
    result = audit.run(runs=40, seed=0)          # 40 random configurations, 2^16 rows each
    print(result); assert result.passed
    audit.replay(result.failures[0].spec, seed=result.failures[0].seed)  # one run, exactly

    python scripts/audit_decoders.py --runs=40 --seed=0 --out=/tmp/audit.jsonl

The suite checks each decoder on a few hand-picked configurations. A bug that shows only at
some γ, tree shape, warper, EOS or ragged batch passes those. The audit draws configurations
the suite does not pin down, each from one *family* (a kind of decoder):

  * `chain`: `SpeculativeDecoder`, token-wise or block rule, γ 1-5.
  * `adaptive`: the same under a γ policy (heuristic, confidence, theory, positional), static
    or "auto" verification widths.
  * `tree`: `TreeSpeculativeDecoder` on a random breadth-first topology (depth <= 4, <= 9
    nodes), siblings with or without replacement, children sampled or top-k.
  * `lookup`: prompt lookup as the draft (alone or under a γ policy); `lookup_tree`: a
    `LookupTreeDrafter` tree.
  * `hierarchy`: a speculative decoder as the draft of another, each level its own rule.
  * `eagle`: an untrained EAGLE-1 or EAGLE-3 head on a tiny Llama target: chain (optionally
    under a γ policy), static tree, or EAGLE-2 dynamic tree; optionally a reduced draft vocabulary.
  * `medusa`: Medusa heads on the same target, chain or tree, optionally a reduced vocabulary.
  * `sharded`: any of the above run by `ShardedDecoder`, its rows split over 1, 2 or 4 devices
    (as many as the process has: `scripts/audit_decoders.py` asks XLA:CPU for 4).

Every configuration also draws its tiny models (vocab 4-7; bigram tables of random
concentration and draft-target mix, or a random tiny Llama), its warper (temperature 0.5-1.3,
sometimes top-k or top-p), an EOS token in about a third of runs, and one to three ragged
prompts, side by side in every call (`mixed`) in about half of the runs with several.

A configuration is a `Spec`: a family name and plain JSON knobs. `sample(family, rng)` draws
one and `build(spec)` turns it into a decoder and params, so a failure in a report can be
rebuilt, and `replay` rechecked exactly, from its JSON (`AuditRun.to_record`). New decoder kinds
join through `registry=`: a copy of `FAMILIES` with a `Family(sample, build)` added.

Statistics: each run is `check_decoder` at the threshold 1e-6 per check, with k = prompts x
(L + 1) + 1 checks (L = max(3, tokens per step)). A run of `runs` lossless configurations fails
with probability <= sum of k x 1e-6 (Bonferroni): `AuditResult.false_failure_rate`, about
1.5e-3 for 100 runs. Runs whose target law is nearly deterministic (top-k = 1, a narrow top-p)
carry little statistical signal; their greedy and zero-probability checks still count.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence

import jax
import numpy as np

from specjax.testing.decoder import DEFAULT_DRAWS, check_decoder, tiny_bigram_pair, tiny_llama
from specjax.testing.kit import Report

POLICIES = ("heuristic", "confidence", "theory", "positional")


@dataclasses.dataclass(frozen=True)
class Spec:
    """One configuration: `family` (a key of `FAMILIES`) and its knobs (JSON-serialisable)."""

    family: str
    knobs: dict

    def to_json(self) -> str:
        return json.dumps({"family": self.family, "knobs": self.knobs}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Spec:
        data = json.loads(text)
        return cls(data["family"], data["knobs"])


@dataclasses.dataclass(frozen=True)
class Case:
    """A built configuration: the decoder, its params (target first) and `check_decoder`'s
    keywords (prompts, eos_id, mixed)."""

    spec: Spec
    decoder: object
    params: tuple
    check: dict


HEADER = f"{'#':>3s} {'family':12s} {'min p':>9s} {'checks':>6s} {'s':>6s}  knobs"


@dataclasses.dataclass(frozen=True)
class AuditRun:
    """One configuration's spec and its `check_decoder` report."""

    spec: Spec
    report: Report
    seed: int  # check_decoder's seed: `replay(spec, seed=seed)` repeats the run exactly

    def to_record(self) -> dict:
        """The run as plain JSON: spec, check seed, draws, min p-value, checks and verdict."""
        rep = self.report
        return {
            "family": self.spec.family, "knobs": self.spec.knobs, "seed": self.seed,
            "draws": rep.draws, "min_pvalue": rep.min_pvalue, "checks": rep.num_checks,
            "passed": rep.passed,
        }  # fmt: skip

    def row(self, index: int) -> str:
        """One line of the audit's table (`HEADER`'s columns)."""
        rep = self.report
        verdict = "" if rep.passed else "  FAILED " + ", ".join(rep.failed_cases())
        knobs = json.dumps(self.spec.knobs, sort_keys=True)
        return (
            f"{index:3d} {self.spec.family:12s} {rep.min_pvalue:9.2e} {rep.num_checks:6d} "
            f"{rep.seconds:6.1f}  {knobs}{verdict}"
        )


@dataclasses.dataclass(frozen=True)
class AuditResult:
    """Every run's spec and report. `print(result)` shows one row per run."""

    runs: tuple[AuditRun, ...]

    @property
    def passed(self) -> bool:
        return all(r.report.passed for r in self.runs)

    @property
    def failures(self) -> list[AuditRun]:
        return [r for r in self.runs if not r.report.passed]

    @property
    def false_failure_rate(self) -> float:
        """Bonferroni bound on the chance that a lossless audit reports a failure."""
        return float(sum(r.report.false_failure_rate for r in self.runs))

    def __str__(self) -> str:
        lines = [HEADER] + [r.row(i) for i, r in enumerate(self.runs)]
        lines.append(
            f"{len(self.runs)} runs, {len(self.failures)} failed; a lossless audit fails with "
            f"probability <= {self.false_failure_rate:.1e}"
        )
        return "\n".join(lines)


# -- knobs every family shares -------------------------------------------------------------------


def _common(rng: np.random.Generator, vocab_range=(4, 7)) -> dict:
    vocab = int(rng.integers(vocab_range[0], vocab_range[1] + 1))
    knobs = {
        "vocab": vocab,
        "model_seed": int(rng.integers(1 << 20)),
        "temperature": round(float(rng.uniform(0.5, 1.3)), 3),
        "top_k": None,
        "top_p": 1.0,
        "eos_id": int(rng.integers(vocab)) if rng.random() < 1 / 3 else None,
    }
    truncation = rng.random()
    if truncation < 0.15:
        knobs["top_k"] = int(rng.integers(1, 4))
    elif truncation < 0.3:
        knobs["top_p"] = round(float(rng.uniform(0.3, 0.95)), 3)
    count = int(rng.integers(1, 4))
    knobs["prompts"] = [
        [int(t) for t in rng.integers(vocab, size=int(rng.integers(1, 6)))] for _ in range(count)
    ]
    knobs["mixed"] = bool(count > 1 and rng.random() < 0.5)
    return knobs


def _bigram_knobs(rng: np.random.Generator) -> dict:
    knobs = _common(rng)
    knobs["concentration"] = round(float(np.exp(rng.uniform(np.log(0.1), np.log(3.0)))), 3)
    knobs["mix"] = round(float(rng.uniform(0.0, 1.0)), 3)
    return knobs


def _policy(rng: np.random.Generator) -> str:
    name = POLICIES[int(rng.integers(len(POLICIES)))]
    if name == "confidence":
        return f"confidence:{round(float(rng.uniform(0.2, 0.8)), 2)}"
    if name in ("theory", "positional"):
        return f"{name}:{round(float(rng.uniform(0.05, 0.5)), 2)}"
    return name


def _tree_parents(rng: np.random.Generator, max_depth: int = 4, max_nodes: int = 8) -> list:
    """A random breadth-first topology: parents[0] = -1, siblings contiguous."""
    parents, level, budget = [-1], [0], max_nodes
    for _ in range(int(rng.integers(1, max_depth + 1))):
        if budget == 0:
            break
        size = int(rng.integers(1, min(budget, 3 * len(level)) + 1))
        chosen = sorted(int(p) for p in rng.choice(level, size=size))
        start = len(parents)
        parents.extend(chosen)
        level, budget = list(range(start, len(parents))), budget - size
    return parents


# -- the families: a sampler (rng -> knobs) and a builder (knobs -> Case) -----------------------


def _warper(k: dict):
    from specjax.decoding import make_warper

    return make_warper(k["temperature"], top_k=k["top_k"], top_p=k["top_p"])


def _parse(policy):
    from specjax.decoding import parse_gamma_policy

    return parse_gamma_policy(policy)


def _case(family: str, k: dict, decoder, params) -> Case:
    check = {"prompts": [tuple(p) for p in k["prompts"]], "eos_id": k["eos_id"]}
    check["mixed"] = k["mixed"]
    return Case(Spec(family, k), decoder, tuple(params), check)


def _pair(k: dict):
    return tiny_bigram_pair(
        k["vocab"], seed=k["model_seed"], concentration=k["concentration"], mix=k["mix"]
    )


def _sample_chain(rng):
    k = _bigram_knobs(rng)
    k["gamma"] = int(rng.integers(1, 6))
    k["rule"] = ("tokenwise", "block")[int(rng.integers(2))]
    return k


def _build_chain(k, family="chain"):
    from specjax.decoding import SpeculativeDecoder
    from specjax.decoding.rules import accept_rule

    target, tp, draft, dp = _pair(k)
    extra = {}
    if "policy" in k:
        extra = {"gamma_policy": _parse(k["policy"]), "verify_widths": k["verify_widths"]}
    decoder = SpeculativeDecoder(
        target, draft, k["gamma"], _warper(k), cache_len=32, accept=accept_rule(k["rule"]),
        **extra,
    )  # fmt: skip
    return _case(family, k, decoder, (tp, dp))


def _sample_adaptive(rng):
    k = _sample_chain(rng)
    k["gamma"] = int(rng.integers(2, 6))
    k["policy"] = _policy(rng)
    k["verify_widths"] = ("static", "auto")[int(rng.integers(2))]
    return k


def _sample_tree(rng):
    k = _bigram_knobs(rng)
    k["parents"] = _tree_parents(rng)
    k["replacement"] = bool(rng.random() < 0.5)
    k["children"] = ("sample", "top_k")[int(rng.integers(2))]
    return k


def _build_tree(k):
    from specjax.decoding import TokenTree, TreeSpeculativeDecoder

    target, tp, draft, dp = _pair(k)
    decoder = TreeSpeculativeDecoder(
        target, draft, TokenTree(tuple(k["parents"])), _warper(k),
        replacement=k["replacement"], cache_len=32, children=k["children"],
    )  # fmt: skip
    return _case("tree", k, decoder, (tp, dp))


def _sample_lookup(rng):
    k = _bigram_knobs(rng)
    k["gamma"] = int(rng.integers(1, 5))
    k["max_ngram"] = int(rng.integers(1, 4))
    k["policy"] = _policy(rng) if rng.random() < 0.5 else None
    return k


def _build_lookup(k):
    from specjax.decoding import LookupDrafter, SpeculativeDecoder

    target, tp, _, _ = _pair(k)
    drafter = LookupDrafter(k["vocab"], max_ngram=k["max_ngram"])
    decoder = SpeculativeDecoder(
        target, drafter, k["gamma"], _warper(k), cache_len=32, gamma_policy=_parse(k["policy"])
    )
    return _case("lookup", k, decoder, (tp, {}))


def _sample_lookup_tree(rng):
    k = _bigram_knobs(rng)
    k["parents"] = _tree_parents(rng)
    k["max_ngram"] = int(rng.integers(1, 4))
    return k


def _build_lookup_tree(k):
    from specjax.decoding import LookupTreeDrafter, TokenTree, TreeSpeculativeDecoder

    target, tp, _, _ = _pair(k)
    tree = TokenTree(tuple(k["parents"]))
    drafter = LookupTreeDrafter(k["vocab"], tree, max_ngram=k["max_ngram"])
    decoder = TreeSpeculativeDecoder(target, drafter, tree, _warper(k), cache_len=32)
    return _case("lookup_tree", k, decoder, (tp, {}))


def _sample_hierarchy(rng):
    k = _bigram_knobs(rng)
    k["outer_gamma"] = int(rng.integers(1, 4))
    k["inner_gamma"] = int(rng.integers(1, 4))
    k["outer_rule"] = ("tokenwise", "block")[int(rng.integers(2))]
    k["inner_rule"] = ("tokenwise", "block")[int(rng.integers(2))]
    return k


def _build_hierarchy(k):
    from specjax.decoding import SpeculativeDecoder, SpeculativeDrafter
    from specjax.decoding.rules import accept_rule

    target, tp, middle, mp = _pair(k)
    small_knobs = dict(k, model_seed=k["model_seed"] + 1)  # the small draft: another noisy table
    _, _, small, sp = _pair(small_knobs)
    warper = _warper(k)
    inner = SpeculativeDecoder(
        middle, small, k["inner_gamma"], warper, cache_len=32, accept=accept_rule(k["inner_rule"])
    )
    decoder = SpeculativeDecoder(
        target, SpeculativeDrafter(inner), k["outer_gamma"], warper, cache_len=32,
        accept=accept_rule(k["outer_rule"]),
    )  # fmt: skip
    return _case("hierarchy", k, decoder, (tp, (mp, sp)))


def _head_knobs(rng):
    k = _common(rng, vocab_range=(5, 7))
    if rng.random() < 0.3:  # a reduced draft vocabulary: 1 to vocab - 1 tokens
        size = int(rng.integers(1, k["vocab"]))
        k["draft_ids"] = sorted(int(t) for t in rng.choice(k["vocab"], size, replace=False))
    else:
        k["draft_ids"] = None
    return k


def _sample_eagle(rng):
    k = _head_knobs(rng)
    k["eagle3"] = bool(rng.random() < 0.5)
    k["structure"] = ("chain", "tree", "dynamic")[int(rng.integers(3))]
    if k["structure"] == "chain":
        k["gamma"] = int(rng.integers(1, 5))
        k["policy"] = _policy(rng) if rng.random() < 0.4 else None
    elif k["structure"] == "tree":
        k["parents"] = _tree_parents(rng, max_depth=3)
        k["replacement"] = bool(rng.random() < 0.5)
    else:
        depth, top_k = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        pool = top_k + (depth - 1) * top_k**2
        k["dynamic"] = [depth, top_k, int(rng.integers(2, min(pool, 8) + 2))]
    return k


def _build_eagle(k):
    from specjax.decoding import DynamicTree, SpeculativeDecoder, TokenTree, TreeSpeculativeDecoder
    from specjax.models import EagleHead

    target, tp = tiny_llama(k["vocab"], k["model_seed"])
    layers = (0, 1) if k["eagle3"] else ()  # the tiny target's two blocks
    draft_ids = None if k["draft_ids"] is None else tuple(k["draft_ids"])
    head = EagleHead(target, draft_ids=draft_ids, feature_layers=layers)
    hp = head.init_params(jax.random.PRNGKey(k["model_seed"] + 7))
    hp = jax.tree.map(lambda x: x * 4.0 if x.ndim == 2 else x, hp)  # a q far from uniform
    warper = _warper(k)
    if k["structure"] == "chain":
        decoder = SpeculativeDecoder(
            target, head, k["gamma"], warper, cache_len=32, gamma_policy=_parse(k["policy"])
        )
    else:
        if k["structure"] == "tree":
            tree, replacement = TokenTree(tuple(k["parents"])), k["replacement"]
        else:
            tree, replacement = DynamicTree(*k["dynamic"]), False
        decoder = TreeSpeculativeDecoder(
            target, head, tree, warper, replacement=replacement, cache_len=32
        )
    return _case("eagle", k, decoder, (tp, hp))


def _sample_medusa(rng):
    k = _head_knobs(rng)
    if rng.random() < 0.5:
        k["gamma"], k["parents"] = int(rng.integers(1, 5)), None
    else:
        k["gamma"], k["parents"] = None, _tree_parents(rng, max_depth=3)
        k["replacement"] = bool(rng.random() < 0.5)
    return k


def _build_medusa(k):
    from specjax.decoding import SpeculativeDecoder, TokenTree, TreeSpeculativeDecoder
    from specjax.models import MedusaHeads

    target, tp = tiny_llama(k["vocab"], k["model_seed"])
    draft_ids = None if k["draft_ids"] is None else tuple(k["draft_ids"])
    tree = None if k["parents"] is None else TokenTree(tuple(k["parents"]))
    heads = MedusaHeads(target, k["gamma"] or tree.max_depth, draft_ids=draft_ids)
    hp = heads.with_target_columns(heads.init_params(jax.random.PRNGKey(3)), tp)
    keys = jax.random.split(jax.random.PRNGKey(k["model_seed"] + 11), 2)
    hp = dict(hp, w=0.5 * jax.random.normal(keys[0], hp["w"].shape),
              b=0.5 * jax.random.normal(keys[1], hp["b"].shape))  # fmt: skip
    warper = _warper(k)
    if tree is None:
        decoder = SpeculativeDecoder(target, heads, k["gamma"], warper, cache_len=32)
    else:
        decoder = TreeSpeculativeDecoder(
            target, heads, tree, warper, replacement=k["replacement"], cache_len=32
        )
    return _case("medusa", k, decoder, (tp, hp))


def _sample_sharded(rng):
    """Another family's knobs, plus `inner` (that family) and `data` (devices on the mesh's data
    axis: 1, 2 or 4, at most the devices this process has)."""
    inner = SHARDED_INNER[int(rng.integers(len(SHARDED_INNER)))]
    k = dict(FAMILIES[inner].sample(rng), inner=inner)
    most = min(4, jax.local_device_count())
    k["data"] = int(2 ** rng.integers(0, most.bit_length()))
    return k


def _build_sharded(k):
    from specjax.decoding import ShardedDecoder
    from specjax.sharding import make_mesh

    if k["data"] > jax.local_device_count():
        raise ValueError(
            f"knobs['data'] = {k['data']}: the spec splits rows over {k['data']} devices and "
            f"this process has {jax.local_device_count()} (XLA_FLAGS="
            f"--xla_force_host_platform_device_count={k['data']} on a CPU)"
        )
    inner = dict(k)
    del inner["inner"], inner["data"]
    case = FAMILIES[k["inner"]].build(inner)
    mesh = make_mesh((k["data"], 1), devices=jax.local_devices()[: k["data"]])
    decoder = ShardedDecoder(case.decoder, mesh)
    return dataclasses.replace(case, spec=Spec("sharded", k), decoder=decoder)


@dataclasses.dataclass(frozen=True)
class Family:
    """A kind of decoder: `sample(rng) -> knobs` and `build(knobs) -> Case`."""

    sample: Callable[[np.random.Generator], dict]
    build: Callable[[dict], Case]


FAMILIES: dict[str, Family] = {
    "chain": Family(_sample_chain, _build_chain),
    "adaptive": Family(_sample_adaptive, lambda k: _build_chain(k, "adaptive")),
    "tree": Family(_sample_tree, _build_tree),
    "lookup": Family(_sample_lookup, _build_lookup),
    "lookup_tree": Family(_sample_lookup_tree, _build_lookup_tree),
    "hierarchy": Family(_sample_hierarchy, _build_hierarchy),
    "eagle": Family(_sample_eagle, _build_eagle),
    "medusa": Family(_sample_medusa, _build_medusa),
}
# Any family's decoder run by `ShardedDecoder`, its rows split over the mesh's data axis.
SHARDED_INNER = tuple(FAMILIES)
FAMILIES["sharded"] = Family(_sample_sharded, _build_sharded)


def _family(name: str, families: dict) -> Family:
    if name not in families:
        raise ValueError(f"family: unknown {name!r}; one of {sorted(families)}")
    return families[name]


def sample(family: str, rng: np.random.Generator, families: dict | None = None) -> Spec:
    """A random configuration of `family` (knobs only: nothing is built or compiled)."""
    return Spec(family, _family(family, families or FAMILIES).sample(rng))


def build(spec: Spec, families: dict | None = None) -> Case:
    """The decoder and params of `spec` (e.g. a failure's, read back with `Spec.from_json`)."""
    return _family(spec.family, families or FAMILIES).build(dict(spec.knobs))


def specs(runs: int, seed: int = 0, families: Sequence[str] | None = None, registry=None):
    """`runs` configurations, round-robin over `families` (default: all), from one seed."""
    registry = registry or FAMILIES
    names = list(families) if families else list(registry)
    if runs < 1:
        raise ValueError(f"runs must be >= 1; got {runs}")
    rng = np.random.default_rng(seed)
    return [sample(names[i % len(names)], rng, registry) for i in range(runs)]


def run(
    runs: int = 40,
    *,
    seed: int = 0,
    draws: int = DEFAULT_DRAWS // 4,
    families: Sequence[str] | None = None,
    registry: dict | None = None,
    batch: int = 4096,
    greedy: bool = True,
    log: Callable[[str], None] | None = None,
) -> AuditResult:
    """Draws `runs` configurations (`specs`) and checks each with `check_decoder`.

    Args:
      runs: configurations checked.
      seed: the seed of the configurations (and of every check: run i uses seed * 1000 + i).
      draws: rows per prompt (2^16 by default: a bias of a few per cent in one cell shows).
      families: names in `registry` to draw from (default: all of them, round-robin).
      registry: {name: Family}; default `FAMILIES` (add your own decoder kinds to a copy).
      batch: rows per `generate` call.
      greedy: also check each decoder at temperature 0 against autoregressive decoding.
      log: called with one line per finished run (e.g. `print`).

    Returns:
      `AuditResult`; `.passed` is the verdict, `.failures` the failing specs and reports.
    """
    out = []
    for i, spec in enumerate(specs(runs, seed, families, registry)):
        out.append(_check(spec, seed * 1000 + i, draws, batch, greedy, registry))
        if log is not None:
            log(out[-1].row(i))
    return AuditResult(tuple(out))


def replay(
    spec: Spec, *, seed: int = 0, draws: int = DEFAULT_DRAWS // 4, batch: int = 4096,
    greedy: bool = True, registry: dict | None = None,
) -> AuditResult:  # fmt: skip
    """One configuration checked again: with a run's `seed` and `draws`, that run exactly."""
    return AuditResult((_check(spec, seed, draws, batch, greedy, registry),))


def _check(spec, seed, draws, batch, greedy, registry) -> AuditRun:
    case = build(spec, registry)
    report = check_decoder(
        case.decoder, *case.params, draws=draws, batch=batch, seed=seed, greedy=greedy,
        name=spec.family, **case.check,
    )  # fmt: skip
    return AuditRun(spec, report, seed)
