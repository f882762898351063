"""Exact laws of the token stream that chained verification calls emit, by enumeration (numpy).

A `PrefixCase` is a tiny-vocabulary "language model pair" whose next-token distributions depend on
the whole prefix: one row of p (target), q (what the verifier is told the draft sampled from) and
r (what drafts are really drawn from) per context, for every context up to a fixed length. A
decoder starts from the empty context, and every call drafts γ tokens from r given the stream so
far, verifies them against p and q, appends what it emits, and the next call starts from there.

`target_law` is the law of the first `length` tokens that a lossless rule must give (the product
of p's rows along each sequence). `stream_law` computes the exact law of the same tokens for any
verification rule given as its exact output law (`RuleLaw`: for one call's drafts,
P(n = i, next token = y)), by memoised recursion over prefixes, so a rule written in numpy can be
compared with the target at ~1e-15; `first_call_law` and `expected_accepted` give one call's
(n, y) law and E[n]. `make_case` builds the kit's cases (`specjax.testing.kit`) from fixed seeds.
A `PositionCase` (p, q, r by position only) fits vocabularies too large for a row per context.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np

# (drafts [gamma], q [gamma, vocab] or None (point masses), p [gamma + 1, vocab], drafted d) ->
# [gamma + 1, vocab] joint law of (number accepted n, next token y) for these drafts.
RuleLaw = Callable[[np.ndarray, np.ndarray | None, np.ndarray, int], np.ndarray]


def normalised(x) -> np.ndarray:
    x = np.asarray(x).astype(np.float64)
    return x / x.sum(-1, keepdims=True)


@dataclasses.dataclass(frozen=True, eq=False)
class PrefixCase:
    """Prefix-dependent p, q, r over a tiny vocabulary, one row per context.

    Contexts of length l are numbered offset(l) + code, code = the context read as a base-`vocab`
    number (first token most significant), offset(l) = (vocab^l - 1) / (vocab - 1).

    Attributes:
      name: test id.
      gamma: drafted tokens per call.
      length: emitted tokens whose joint law is tested (>= 3: some biased rules are exact for two).
      target: [rows, vocab] p per context, as given to the rule (float32 or bfloat16, maybe
        unnormalised): the stream must follow `normalised(target)`.
      draft: [rows, vocab] q per context as given to the rule, or None: deterministic drafts
        (`draft_probs=None`, the rule assumes a point mass on each draft).
      draft_dist: [rows, vocab] r: what drafts are drawn from (q itself for a stochastic draft).
      ragged: each call drafts d = (row(context) + 1) mod (gamma + 1) tokens (a function of the
        emitted stream only, as a prompt-lookup miss would be; 1 at the empty context) and
        passes `num_drafted`.
    """

    name: str
    gamma: int
    length: int
    target: np.ndarray
    draft: np.ndarray | None
    draft_dist: np.ndarray
    ragged: bool = False
    positional = False  # rows are contexts (see `PositionCase`)

    def __post_init__(self):
        rows = num_contexts(self.vocab, self.max_context)
        assert self.target.shape == (rows, self.vocab), (self.name, self.target.shape)
        assert self.draft_dist.shape == (rows, self.vocab), self.name
        assert self.draft is None or self.draft.shape == (rows, self.vocab), self.name

    @property
    def vocab(self) -> int:
        return int(self.target.shape[-1])

    @property
    def max_context(self) -> int:
        """Longest context any call reads: length - 1 emitted tokens, then gamma drafts."""
        return self.length - 1 + self.gamma

    @functools.cached_property
    def p(self) -> np.ndarray:
        return normalised(self.target)

    @functools.cached_property
    def q(self) -> np.ndarray | None:
        return None if self.draft is None else normalised(self.draft)

    @functools.cached_property
    def r(self) -> np.ndarray:
        """What drafts are drawn from in the enumeration: normalised(draft_dist) in float64 (q
        itself for a stochastic draft; the JAX sampler's float32 inverse CDF differs by ~1e-8)."""
        return normalised(self.draft_dist)

    def row(self, context) -> int:
        return context_row(tuple(context), self.vocab)

    def num_drafted(self, context) -> int:
        if not self.ragged:
            return self.gamma
        return (context_row(tuple(context), self.vocab) + 1) % (self.gamma + 1)


@dataclasses.dataclass(frozen=True, eq=False)
class PositionCase:
    """p, q, r that depend on the position in the stream only, not on the tokens before it.

    One row per absolute position (row t for the (t+1)-th token), so a large vocabulary fits
    where a `PrefixCase` (a row per context) would not; a lossless rule then emits independent
    draws of p_1, p_2, .... The functions of this module and `sampler.sample_stream` take either
    kind (a position-only case reads row `len(context)` for every context).

    Attributes:
      name: test id.
      gamma: drafted tokens per call.
      length: emitted tokens whose law is tested.
      target: [length + gamma, vocab] p per position, as given to the rule.
      draft: [length + gamma - 1, vocab] q per position as given to the rule, or None:
        deterministic drafts (point masses).
      draft_dist: [length + gamma - 1, vocab] r: what drafts are drawn from.
    """

    name: str
    gamma: int
    length: int
    target: np.ndarray
    draft: np.ndarray | None
    draft_dist: np.ndarray
    ragged = False
    positional = True  # rows are positions (`sampler.sample_stream` reads this)

    def __post_init__(self):
        rows, v = self.length + self.gamma, self.vocab
        assert self.target.shape == (rows, v), (self.name, self.target.shape)
        assert self.draft_dist.shape == (rows - 1, v), (self.name, self.draft_dist.shape)
        assert self.draft is None or self.draft.shape == (rows - 1, v), self.name

    @property
    def vocab(self) -> int:
        return int(self.target.shape[-1])

    @property
    def max_context(self) -> int:
        return self.length - 1 + self.gamma

    @functools.cached_property
    def p(self) -> np.ndarray:
        return normalised(self.target)

    @functools.cached_property
    def q(self) -> np.ndarray | None:
        return None if self.draft is None else normalised(self.draft)

    @functools.cached_property
    def r(self) -> np.ndarray:
        return normalised(self.draft_dist)

    def row(self, context) -> int:
        return len(tuple(context))

    def num_drafted(self, context) -> int:
        del context
        return self.gamma


def offset(length: int, vocab: int) -> int:
    return (vocab**length - 1) // (vocab - 1)


def num_contexts(vocab: int, max_length: int) -> int:
    return offset(max_length + 1, vocab)


def context_row(context: tuple, vocab: int) -> int:
    code = 0
    for token in context:
        code = code * vocab + int(token)
    return offset(len(context), vocab) + code


def draft_cdf(dist) -> np.ndarray:
    """float32 CDF ending at exactly 1, zero-probability tokens with empty intervals."""
    cdf = np.cumsum(normalised(dist), axis=-1)
    cdf = (cdf / cdf[..., -1:]).astype(np.float32)
    cdf[..., -1] = 1.0
    return cdf


def cdf_probs(cdf: np.ndarray) -> np.ndarray:
    return np.diff(cdf.astype(np.float64), axis=-1, prepend=0.0)


# ----------------------------------------------------------------------------- stream laws


def target_law(case: PrefixCase) -> np.ndarray:
    """[vocab] * length: the target's law of the first `length` tokens."""
    v, n = case.vocab, case.length
    law = np.array(1.0)
    for t in range(n):
        contexts = np.indices((v,) * t).reshape(t, -1).T if t else np.zeros((1, 0), int)
        rows = np.array([case.row(c) for c in contexts], int)
        law = law.reshape(-1, 1) * case.p[rows]  # [v^t, v]
    return law.reshape((v,) * n)


def _drafts_law(case: PrefixCase, context: tuple, d: int):
    """Yields (drafts [gamma], probability, q rows [gamma, vocab] | None, p rows)."""
    gamma, v = case.gamma, case.vocab
    for flat in range(v**gamma):
        drafts = np.array(np.unravel_index(flat, (v,) * gamma), int).reshape(gamma)
        prob = 1.0
        rows = []
        for j in range(gamma + 1):
            rows.append(case.row(context + tuple(drafts[:j])))
            if j < d:
                prob *= case.r[rows[-1], drafts[j]]
        if prob == 0.0:
            continue
        q = None if case.q is None else case.q[rows[:gamma]]
        yield drafts, prob, q, case.p[rows]


def first_call_law(case: PrefixCase, rule: RuleLaw, context: tuple = ()) -> np.ndarray:
    """[gamma + 1, vocab] law of (n, y) of one call at `context`, drafts integrated out.

    Drafts at positions past num_drafted are padding; they are drawn anyway (any tokens do) but
    their probability is not counted: only the first d drafts are random.
    """
    d = case.num_drafted(context)
    total = np.zeros((case.gamma + 1, case.vocab))
    seen = set()
    for drafts, prob, q, p in _drafts_law(case, context, d):
        key = tuple(drafts[:d])
        if key in seen:  # padding drafts beyond d: one representative per real prefix
            continue
        seen.add(key)
        total += prob * rule(drafts, q, p, d)
    return total


def expected_accepted(case: PrefixCase, rule: RuleLaw, context: tuple = ()) -> float:
    law = first_call_law(case, rule, context)
    return float(np.sum(law.sum(-1) * np.arange(case.gamma + 1)))


def stream_law(case: PrefixCase, rule: RuleLaw) -> np.ndarray:
    """[vocab] * length: exact law of the first `length` tokens emitted by chained calls."""
    v, n = case.vocab, case.length

    @functools.cache
    def completions(context: tuple) -> np.ndarray:
        rest = n - len(context)
        out = np.zeros(v**rest)
        d = case.num_drafted(context)
        seen = set()
        for drafts, prob, q, p in _drafts_law(case, context, d):
            key = tuple(drafts[:d])
            if key in seen:
                continue
            seen.add(key)
            law = rule(drafts, q, p, d)  # [gamma + 1, vocab]
            for i in range(d + 1):
                for y in range(v):
                    w = prob * law[i, y]
                    if w == 0.0:
                        continue
                    emitted = tuple(drafts[:i]) + (y,)
                    if len(emitted) >= rest:
                        index = np.ravel_multi_index(emitted[:rest], (v,) * rest)
                        out[index] += w
                    else:
                        m = len(emitted)
                        start = np.ravel_multi_index(emitted, (v,) * m) * v ** (rest - m)
                        out[start : start + v ** (rest - m)] += w * completions(context + emitted)
        return out

    return completions(()).reshape((v,) * n)


def marginal(law: np.ndarray, position: int) -> np.ndarray:
    """[vocab] law of the token at 0-based `position` of a joint stream law."""
    axes = tuple(a for a in range(law.ndim) if a != position)
    return law.sum(axis=axes)


def prefix_law(law: np.ndarray, k: int) -> np.ndarray:
    """Joint law of the first k tokens."""
    return law.sum(axis=tuple(range(k, law.ndim)))


# ----------------------------------------------------------------------------- cases


def _dirichlet(rng, rows, vocab, alpha) -> np.ndarray:
    return rng.dirichlet(np.full(vocab, alpha), rows)


def make_case(
    kind: str, gamma: int, *, vocab: int = 4, length: int | None = None, seed: int = 0
) -> PrefixCase:
    """A prefix-dependent case of the given kind (tables drawn with a fixed seed).

    kinds: "prefix" (p, q independent Dirichlet(1) rows), "position" (one Dirichlet(1) row of p
    and of q per context length: position- but not prefix-dependent), "flat" (Dirichlet(30) rows,
    near uniform), "peaked" (Dirichlet(0.2) rows, most mass on one or two tokens), "sparse"
    (each row of p and of q on a random pair of tokens, so supports are often disjoint or partly
    so), "one_hot_p" (p a point mass per context), "p_equals_q", "deterministic" (drafts =
    argmax of an independent Dirichlet row, `draft_probs=None`), "bf16" (unnormalised bfloat16
    rows of peaked p and q), "ragged" (prefix kind with num_drafted = (row(context) + 1) mod
    (gamma + 1)).
    """
    length = max(3, gamma + 1) if length is None else length
    rows = num_contexts(vocab, length - 1 + gamma)
    rng = np.random.default_rng([seed, gamma, vocab, sum(map(ord, kind))])
    f32 = np.float32
    p = _dirichlet(rng, rows, vocab, 1.0)
    q = _dirichlet(rng, rows, vocab, 1.0)
    dist, ragged = None, False
    if kind in ("prefix", "ragged"):
        ragged = kind == "ragged"
    elif kind == "position":
        lengths = np.repeat(np.arange(length + gamma), [vocab**n for n in range(length + gamma)])
        p = _dirichlet(rng, length + gamma, vocab, 1.0)[lengths]
        q = _dirichlet(rng, length + gamma, vocab, 1.0)[lengths]
    elif kind in ("flat", "peaked"):
        alpha = 30.0 if kind == "flat" else 0.2
        p = _dirichlet(rng, rows, vocab, alpha)
        q = _dirichlet(rng, rows, vocab, alpha)
    elif kind == "sparse":
        for table in (p, q):
            keep = np.argsort(rng.random((rows, vocab)), -1)[:, :2]
            mask = np.zeros((rows, vocab), bool)
            np.put_along_axis(mask, keep, True, -1)
            table *= mask
    elif kind == "one_hot_p":
        p = np.eye(vocab)[rng.integers(0, vocab, rows)]
    elif kind == "p_equals_q":
        q = p
    elif kind == "deterministic":
        dist = np.eye(vocab)[np.argmax(q, -1)]
        q = None
    elif kind == "bf16":
        import ml_dtypes  # numpy bfloat16 (a jax dependency)

        p = _dirichlet(rng, rows, vocab, 0.3)
        q = normalised(p + 0.3 * _dirichlet(rng, rows, vocab, 0.3))
        p = (p * 1.003).astype(ml_dtypes.bfloat16)  # rows no longer sum to 1
        q = q.astype(ml_dtypes.bfloat16)
        return PrefixCase(f"bf16_g{gamma}", gamma, length, p, q, q.astype(np.float64))
    else:
        raise ValueError(f"unknown kind {kind!r}")
    p = normalised(p).astype(f32)
    if q is not None:
        q = normalised(q).astype(f32)
        dist = q if dist is None else dist
    return PrefixCase(f"{kind}_g{gamma}", gamma, length, p, q, dist, ragged)
