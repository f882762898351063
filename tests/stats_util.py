"""Position-only cases and their checks for the losslessness tests (tests/test_acceptance_*).

A test case is a context-free target, a distribution p_t for each absolute position t of the
stream that does not depend on the tokens before it (mostly the same vector at every position),
and a draft rule. The stream a lossless sampler emits is then a sequence of independent draws of
p_1, p_2, ..., and the number of accepted drafts a truncated run of independent acceptances.
`sample_case` draws, with the shipped kit's sampler (`specjax.testing.sampler.sample_stream` on
the case as a `specjax.testing.law.PositionCase` of length 2: one implementation), for each of
`num_samples` independent keys

  * the first two tokens of the stream emitted by two consecutive calls of the sampler (the second
    call, with its own key and drafts, only matters for rows whose first call emitted one token);
  * the number of drafts the first call accepted.

The checks turn counts into p-values: Pearson chi-square with sparse categories pooled (the kit's
`specjax.testing.stats.pooled_chi2`), exact binomial tests for acceptance rates, a z-test for the
mean emitted length. Every statistical check in the suite fails below the kit's
`PVALUE_THRESHOLD`; each file states its number of checks and the resulting family-wise
false-failure bound (Bonferroni: checks x threshold, valid under any dependence between the
checks).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import numpy as np
from scipy import stats

from specjax.testing import law, sampler
from specjax.testing.law import cdf_probs, draft_cdf, normalised
from specjax.testing.stats import Chi2, pooled_chi2

# A correct sampler fails one check with probability <= 1e-6 (up to the accuracy of the chi-square
# and normal approximations, which with every pooled bin expecting >= 5 counts and >= 1e6 samples
# is well within a factor of 2 at this tail). 2^20 = 1,048,576 >= 1e6 samples per case, in 16
# chunks of 65,536 keys.
NUM_SAMPLES = sampler.NUM_SAMPLES
CHUNK = sampler.CHUNK

AcceptFn = Callable[..., tuple[jax.Array, jax.Array]]


@dataclasses.dataclass(frozen=True)
class Case:
    """One (p, draft) configuration; positions are absolute positions of the emitted stream.

    The first call drafts positions 1..gamma (rows 0..gamma-1) and verifies with target rows
    0..gamma. The second call continues the stream after a single emitted token, so it covers
    positions 2..gamma+1 (draft rows 1..gamma, target rows 1..gamma+1); a lossless sampler emits
    a stream whose first two tokens are independent draws of p_1 and p_2.

    Attributes:
      name: test id.
      target: [gamma + 2, vocab] p per position, exactly as passed to the sampler (float32 or
        bfloat16 numpy array); the emitted tokens must follow `normalised(target)`.
      draft_dist: [gamma + 1, vocab] distribution each position's draft token is drawn from.
      draft_probs: [gamma + 1, vocab] what the sampler is told the draft sampled from, or None for
        a deterministic draft (the sampler then assumes a point mass on each draft token). For a
        correct stochastic draft this is `draft_dist` itself.
      gamma: number of drafted tokens per call.
    """

    name: str
    target: np.ndarray
    draft_dist: np.ndarray
    draft_probs: np.ndarray | None
    gamma: int

    def __post_init__(self):
        g, v = self.gamma, self.vocab
        assert self.target.shape == (g + 2, v), (self.name, self.target.shape)
        assert self.draft_dist.shape == (g + 1, v), (self.name, self.draft_dist.shape)
        assert self.draft_probs is None or self.draft_probs.shape == (g + 1, v), self.name

    @classmethod
    def iid(cls, name, target, draft_dist, draft_probs, gamma) -> Case:
        """A case whose p, draft distribution and q are the same vector at every position."""
        return cls(
            name,
            np.stack([target] * (gamma + 2)),
            np.stack([draft_dist] * (gamma + 1)),
            None if draft_probs is None else np.stack([draft_probs] * (gamma + 1)),
            gamma,
        )

    @property
    def vocab(self) -> int:
        return int(self.target.shape[-1])

    @property
    def p(self) -> np.ndarray:
        """[gamma + 2, vocab] the target distributions the output must follow (float64)."""
        return normalised(self.target)

    @property
    def r(self) -> np.ndarray:
        """[gamma + 1, vocab] distributions draft tokens are really drawn from (float32 CDF)."""
        return cdf_probs(draft_cdf(self.draft_dist))

    @property
    def alphas(self) -> np.ndarray:
        """[gamma] probability that the first call accepts draft position i, given it is reached.

        Stochastic draft: sum_x r(x) min(1, p(x) / q(x)) = sum_x min(p(x), q(x)) when r = q.
        Deterministic draft (point mass on x): E_{x ~ r}[p(x)].
        """
        p, r = self.p[: self.gamma], self.r[: self.gamma]
        if self.draft_probs is None:
            return np.sum(r * p, axis=-1)
        q = normalised(self.draft_probs[: self.gamma])
        ratio = np.where(q > 0, np.minimum(1.0, p / np.where(q > 0, q, 1.0)), 1.0)
        return np.sum(r * ratio, axis=-1)

    def as_kit_case(self) -> law.PositionCase:
        """The case as the kit's position-only case of two emitted tokens."""
        return law.PositionCase(
            self.name, self.gamma, 2, self.target, self.draft_probs, self.draft_dist
        )


@dataclasses.dataclass(frozen=True)
class Samples:
    """What `sample_case` returns (numpy).

    Attributes:
      pairs: int [num_samples, 2] first two tokens of the emitted stream.
      num_accepted: int [num_samples] drafts accepted by the first call.
      first_call: int [num_samples, gamma + 1] every token the first call returned.
    """

    pairs: np.ndarray
    num_accepted: np.ndarray
    first_call: np.ndarray

    @property
    def last(self) -> np.ndarray:
        """int [num_samples] the first call's token at position gamma + 1 (the bonus token where
        num_accepted == gamma, the fill value elsewhere)."""
        return self.first_call[:, -1]


def sample_case(
    case: Case, accept_fn: AcceptFn, seed: int, num_samples: int = NUM_SAMPLES
) -> Samples:
    """Runs two consecutive calls of `accept_fn` on `num_samples` independent keys.

    Args:
      case: the configuration.
      accept_fn: speculative_accept's signature: (key, draft_tokens [1, gamma], draft_probs
        [1, gamma, vocab] | None, target_probs [1, gamma + 1, vocab]) -> (tokens
        [1, gamma + 1], num_accepted [1]).
      seed: fixed seed of the PRNG key.
      num_samples: a multiple of CHUNK.

    Returns:
      `Samples`.
    """
    if num_samples % CHUNK:
        raise ValueError(f"num_samples must be a multiple of {CHUNK}; got {num_samples}")
    drawn = sampler.sample_stream(
        case.as_kit_case(), accept_fn, seed, pass_drafted=False, num_samples=num_samples
    )
    return Samples(drawn.streams, drawn.first_n, drawn.first_call)


def assert_impossible_never_drawn(counts: np.ndarray, probs: np.ndarray, what: str) -> None:
    """A category of probability exactly 0 must never occur: one occurrence is a failure."""
    bad = (probs == 0) & (counts > 0)
    if bad.any():
        where = np.argwhere(bad)[:5].tolist()
        raise AssertionError(f"{what}: zero-probability categories drawn, e.g. {where}")


def binomial_pvalue(successes: int, trials: int, prob: float) -> float:
    """Exact two-sided binomial test; a degenerate prob (0 or 1) must be matched exactly."""
    if trials == 0:
        return 1.0
    if prob in (0.0, 1.0):
        return 1.0 if successes == round(prob * trials) else 0.0
    return float(stats.binomtest(int(successes), int(trials), prob).pvalue)


def num_accepted_pmf(alphas) -> np.ndarray:
    """[gamma + 1] P(n = k) for independent acceptances of probabilities alphas[0..gamma-1].

    P(n = k) = alphas[0] ... alphas[k-1] (1 - alphas[k]), and the product of all for k = gamma.
    """
    alphas = np.asarray(alphas, np.float64)
    reach = np.concatenate([[1.0], np.cumprod(alphas)])  # P(n >= k), k = 0..gamma
    return reach * np.concatenate([1.0 - alphas, [1.0]])


def emitted_length_moments(alphas) -> tuple[float, float]:
    """Mean and variance of the tokens emitted per call, n + 1.

    For equal alphas the mean is (1 - alpha^(gamma + 1)) / (1 - alpha) (Leviathan et al. 2023,
    eq. 1).
    """
    pmf = num_accepted_pmf(alphas)
    length = np.arange(len(pmf)) + 1.0
    mean = float(np.sum(pmf * length))
    return mean, float(np.sum(pmf * (length - mean) ** 2))


def mean_pvalue(values: np.ndarray, mean: float, variance: float) -> float:
    """Two-sided z-test of the sample mean against a known mean and variance (CLT)."""
    if variance == 0.0:
        return 1.0 if np.all(values == mean) else 0.0
    z = (values.mean() - mean) / np.sqrt(variance / len(values))
    return float(2.0 * stats.norm.sf(abs(z)))


def first_token_chi2(case: Case, samples: Samples) -> Chi2:
    """Chi-square of the first emitted token against p_1 (after the zero-probability check)."""
    counts = np.bincount(samples.pairs[:, 0], minlength=case.vocab)
    assert_impossible_never_drawn(counts, case.p[0], f"{case.name} first token")
    return pooled_chi2(counts, case.p[0])


def first_two_chi2(case: Case, samples: Samples) -> Chi2:
    """Chi-square of the first two emitted tokens against p_1 (x) p_2."""
    v = case.vocab
    counts = np.bincount(samples.pairs[:, 0] * v + samples.pairs[:, 1], minlength=v * v)
    joint = np.outer(case.p[0], case.p[1]).ravel()
    assert_impossible_never_drawn(counts, joint, f"{case.name} first two tokens")
    return pooled_chi2(counts, joint)


def bonus_chi2(case: Case, samples: Samples) -> Chi2:
    """Chi-square of the bonus token, among rows that accepted all drafts, against p_{gamma+1}.

    Given that every draft was accepted, Algorithm 1 draws the bonus token afresh from the target
    at position gamma + 1; a stream test of two tokens only sees it when gamma = 1.
    """
    bonus = samples.last[samples.num_accepted == case.gamma]
    counts = np.bincount(bonus, minlength=case.vocab)
    assert_impossible_never_drawn(counts, case.p[case.gamma], f"{case.name} bonus token")
    return pooled_chi2(counts, case.p[case.gamma])
