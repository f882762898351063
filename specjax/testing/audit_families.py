"""The audit's decoder families: random knobs (`Family.sample`) and the decoder they build.

`specjax.testing.audit` runs them (its docstring lists the families and the statistics). A
configuration is a `Spec` (a family's name and JSON knobs) and builds into a `Case` (decoder,
params and `check_decoder`'s keywords). Every sampler draws only plain numbers, so a spec prints,
stores and rebuilds exactly; builders import the library lazily (the kit imports no decoder).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import jax
import numpy as np

from specjax.testing.decoder import tiny_bigram_pair, tiny_llama

POLICIES = ("heuristic", "confidence", "theory", "positional")


@dataclasses.dataclass(frozen=True)
class Spec:
    """One configuration: `family` (a key of `audit.FAMILIES`) and its knobs (plain JSON)."""

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
    # None: `check_decoder(decoder, *params, **check)`; else a check of its own (`audit_beam`):
    # verify(case, seed=, draws=, batch=, greedy=) -> Report.
    verify: Callable | None = None


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


def bigram_knobs(rng: np.random.Generator) -> dict:
    """The shared knobs plus a bigram pair's Dirichlet concentration and draft-target mix."""
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


def tree_parents(
    rng: np.random.Generator, max_depth: int = 4, max_nodes: int = 8, max_branch: int = 8
) -> list:
    """A random breadth-first topology: parents[0] = -1, siblings contiguous, at most
    `max_branch` children per node (top-k children are distinct tokens: at most the vocab)."""
    parents, level, budget = [-1], [0], max_nodes
    for _ in range(int(rng.integers(1, max_depth + 1))):
        if budget == 0:
            break
        size = int(rng.integers(1, min(budget, 3 * len(level)) + 1))
        chosen = sorted(int(p) for p in rng.choice(level, size=size))
        chosen = [p for i, p in enumerate(chosen) if chosen[: i + 1].count(p) <= max_branch]
        start = len(parents)
        parents.extend(chosen)
        level, budget = list(range(start, len(parents))), budget - len(chosen)
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


def bigram_pair(k: dict):
    """The tiny bigram target and draft of `k` (vocab, model_seed, concentration, mix)."""
    return tiny_bigram_pair(
        k["vocab"], seed=k["model_seed"], concentration=k["concentration"], mix=k["mix"]
    )


def _sample_chain(rng):
    k = bigram_knobs(rng)
    k["gamma"] = int(rng.integers(1, 6))
    k["rule"] = ("tokenwise", "block")[int(rng.integers(2))]
    return k


def _build_chain(k, family="chain"):
    from specjax.decoding import SpeculativeDecoder
    from specjax.decoding.rules import accept_rule

    target, tp, draft, dp = bigram_pair(k)
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
    k = bigram_knobs(rng)
    k["parents"] = tree_parents(rng)
    k["replacement"] = bool(rng.random() < 0.5)
    k["children"] = ("sample", "top_k")[int(rng.integers(2))]
    if max(k["parents"].count(p) for p in set(k["parents"])) > k["vocab"]:
        k["children"] = "sample"  # top-k children are distinct: no more than vocab per node
    return k


def _build_tree(k):
    from specjax.decoding import TokenTree, TreeSpeculativeDecoder

    target, tp, draft, dp = bigram_pair(k)
    decoder = TreeSpeculativeDecoder(
        target, draft, TokenTree(tuple(k["parents"])), _warper(k),
        replacement=k["replacement"], cache_len=32, children=k["children"],
    )  # fmt: skip
    return _case("tree", k, decoder, (tp, dp))


def _sample_lookup(rng):
    k = bigram_knobs(rng)
    k["gamma"] = int(rng.integers(1, 5))
    k["max_ngram"] = int(rng.integers(1, 4))
    k["policy"] = _policy(rng) if rng.random() < 0.5 else None
    return k


def _build_lookup(k):
    from specjax.decoding import LookupDrafter, SpeculativeDecoder

    target, tp, _, _ = bigram_pair(k)
    drafter = LookupDrafter(k["vocab"], max_ngram=k["max_ngram"])
    decoder = SpeculativeDecoder(
        target, drafter, k["gamma"], _warper(k), cache_len=32, gamma_policy=_parse(k["policy"])
    )
    return _case("lookup", k, decoder, (tp, {}))


def _sample_lookup_tree(rng):
    k = bigram_knobs(rng)
    k["parents"] = tree_parents(rng)
    k["max_ngram"] = int(rng.integers(1, 4))
    return k


def _build_lookup_tree(k):
    from specjax.decoding import LookupTreeDrafter, TokenTree, TreeSpeculativeDecoder

    target, tp, _, _ = bigram_pair(k)
    tree = TokenTree(tuple(k["parents"]))
    drafter = LookupTreeDrafter(k["vocab"], tree, max_ngram=k["max_ngram"])
    decoder = TreeSpeculativeDecoder(target, drafter, tree, _warper(k), cache_len=32)
    return _case("lookup_tree", k, decoder, (tp, {}))


def _sample_hierarchy(rng):
    k = bigram_knobs(rng)
    k["outer_gamma"] = int(rng.integers(1, 4))
    k["inner_gamma"] = int(rng.integers(1, 4))
    k["outer_rule"] = ("tokenwise", "block")[int(rng.integers(2))]
    k["inner_rule"] = ("tokenwise", "block")[int(rng.integers(2))]
    return k


def _build_hierarchy(k):
    from specjax.decoding import SpeculativeDecoder, SpeculativeDrafter
    from specjax.decoding.rules import accept_rule

    target, tp, middle, mp = bigram_pair(k)
    small_knobs = dict(k, model_seed=k["model_seed"] + 1)  # the small draft: another noisy table
    _, _, small, sp = bigram_pair(small_knobs)
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
        k["parents"] = tree_parents(rng, max_depth=3)
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
        k["gamma"], k["parents"] = None, tree_parents(rng, max_depth=3)
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
    k = dict(LAW_FAMILIES[inner].sample(rng), inner=inner)
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
    case = LAW_FAMILIES[k["inner"]].build(inner)
    mesh = make_mesh((k["data"], 1), devices=jax.local_devices()[: k["data"]])
    decoder = ShardedDecoder(case.decoder, mesh)
    return dataclasses.replace(case, spec=Spec("sharded", k), decoder=decoder)


@dataclasses.dataclass(frozen=True)
class Family:
    """A kind of decoder: `sample(rng) -> knobs` and `build(knobs) -> Case`."""

    sample: Callable[[np.random.Generator], dict]
    build: Callable[[dict], Case]


# The families checked against the target's law (`check_decoder`); `audit.FAMILIES` adds beam.
LAW_FAMILIES: dict[str, Family] = {
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
SHARDED_INNER = tuple(LAW_FAMILIES)
LAW_FAMILIES["sharded"] = Family(_sample_sharded, _build_sharded)
