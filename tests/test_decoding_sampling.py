"""Sampling: speculative decoding draws the first tokens from exactly the target's distribution.

On an 8-token vocabulary the exact joint distribution of the first three generated tokens of the
target (after the sampling warper) is computed by enumerating all 8² two-token continuations with
one forward pass of the model itself: P(x1, x2, x3) = p(x1) p(x2 | x1) p(x3 | x1, x2), 512 cells.
Decoders then generate 100,000 continuations of one prompt (a batch of identical prompts:
every row draws its own randomness, checked below), and a Pearson chi-square test compares the
counts with the exact joint.

False failures: every check fails only below P_THRESHOLD = 1e-6 (cells expecting fewer than 5
counts pooled first, so the chi-square approximation is accurate at that tail within a factor of
about 2). This file makes 4 such checks, so a correct implementation fails it with probability
below 4 * 2e-6 = 8e-6 (Bonferroni, valid whatever the dependence between checks). Seeds are
fixed, so the outcome is deterministic; the bound is over the choice of seeds.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from decoding_setup import random_params
from scipy import stats

from specjax.decoding import (
    AutoregressiveDecoder,
    SpeculativeDecoder,
    Temperature,
    TopK,
    TopP,
    make_warper,
)
from specjax.models import NgramLM, TransformerConfig, TransformerLM, fit_ngram

pytestmark = [pytest.mark.slow, pytest.mark.runtime_bound]  # tests/conftest.py

P_THRESHOLD = 1e-6
MIN_EXPECTED = 5.0
V = 8
NUM_TOKENS = 3
CHUNK = 20_000
NUM_CHUNKS = 5  # 100,000 samples per case
CACHE_LEN = 12  # prompt 4 + 3 new + gamma <= 3 lookahead
PROMPT = np.array([3, 1, 4, 1], np.int32)

TARGET = TransformerLM(
    TransformerConfig.gpt2(V, num_layers=1, embed_dim=32, num_heads=2, mlp_dim=64, max_len=16)
)
DRAFT = TransformerLM(
    TransformerConfig.llama(V, num_layers=1, embed_dim=16, num_heads=2, mlp_dim=32, max_len=16)
)
CHAIN = make_warper(temperature=0.7, top_k=5, top_p=0.9)
PLAIN = make_warper(temperature=1.0)


@pytest.fixture(scope="module")
def models():
    """Target and drafts whose next-token distributions are peaked and depend on the context."""
    target_params = random_params(TARGET, seed=1, scale=0.25)
    draft_params = random_params(DRAFT, seed=5, scale=0.25)
    corpus = np.random.default_rng(2).integers(0, V, size=300)
    bigram = (NgramLM(V, 2), fit_ngram(corpus, V, 2, smoothing=1.0))
    return target_params, (DRAFT, draft_params), bigram


def _enumerate_logits(model, params) -> np.ndarray:
    """Logits after the prompt and after every 1- and 2-token continuation.

    Returns:
      float64 [V, V, 3, V]: [x1, x2, i] is the next-token logits after PROMPT + (x1, x2)[:i].
    """
    x1, x2 = np.meshgrid(np.arange(V), np.arange(V), indexing="ij")
    seqs = np.concatenate(
        [np.broadcast_to(PROMPT, (V * V, len(PROMPT))), x1.reshape(-1, 1), x2.reshape(-1, 1)], 1
    ).astype(np.int32)  # [V*V, P + 2]
    state = model.init_state(V * V, 16)
    num_new = jnp.full((V * V,), seqs.shape[1], jnp.int32)
    logits, _ = jax.jit(model.apply)(params, state, jnp.asarray(seqs), num_new)
    start = len(PROMPT) - 1
    return np.asarray(logits[:, start : start + 3], np.float64).reshape(V, V, 3, V)


def exact_joint(model, params, warper) -> np.ndarray:
    """float64 [V, V, V]: P(x1, x2, x3) of the first three sampled tokens."""
    logits = _enumerate_logits(model, params)
    _check_warper_margins(logits, warper)
    probs = np.asarray(warper.probs(jnp.asarray(logits, jnp.float32)), np.float64)
    probs = probs / probs.sum(-1, keepdims=True)  # [V, V, 3, V]
    p1 = probs[0, 0, 0]  # [V] (the same for every x1, x2)
    p2 = probs[:, 0, 1]  # [V(x1), V(x2)]
    p3 = probs[:, :, 2]  # [V(x1), V(x2), V(x3)]
    return p1[:, None, None] * p2[:, :, None] * p3


def _check_warper_margins(logits: np.ndarray, warper, margin: float = 1e-4) -> None:
    """Top-k / top-p decisions must not sit on a knife edge that float noise between the
    enumeration's forward pass and the decoders' cached passes could flip."""
    x = logits.copy()
    for w in warper.warpers:
        if isinstance(w, Temperature):
            x = x / w.temperature
        elif isinstance(w, TopK):
            s = np.sort(x, -1)[..., ::-1]
            assert (s[..., w.top_k - 1] - s[..., w.top_k]).min() > margin
            x = np.where(x >= s[..., w.top_k - 1 : w.top_k], x, -np.inf)
        elif isinstance(w, TopP):
            p = np.exp(x - x.max(-1, keepdims=True))
            p = np.sort(p / p.sum(-1, keepdims=True), -1)[..., ::-1]
            before = np.cumsum(p, -1) - p
            assert np.abs(before - w.top_p).min() > margin


def sample_first_tokens(run, seed: int) -> tuple[np.ndarray, dict]:
    """Generates NUM_TOKENS tokens for CHUNK identical prompts, NUM_CHUNKS times (new keys).

    Args:
      run: (prompts, key) -> GenerationResult.
      seed: base PRNG seed.

    Returns:
      int [CHUNK * NUM_CHUNKS, 3] first generated tokens; the first chunk's `summary()`.
    """
    prompts = np.broadcast_to(PROMPT, (CHUNK, len(PROMPT)))
    out, summary = [], None
    for chunk in range(NUM_CHUNKS):
        key = jax.random.fold_in(jax.random.PRNGKey(seed), chunk)
        result = run(prompts, key)
        tokens = np.asarray(result.tokens)
        np.testing.assert_array_equal(result.lengths, len(PROMPT) + NUM_TOKENS)
        out.append(tokens[:, len(PROMPT) : len(PROMPT) + NUM_TOKENS])
        summary = summary or result.summary()
    return np.concatenate(out), summary


def chi_square_pvalue(observed: np.ndarray, expected_probs: np.ndarray) -> float:
    """Pearson goodness of fit, sparse cells pooled; impossible cells must be empty."""
    observed = observed.ravel().astype(np.float64)
    probs = expected_probs.ravel() / expected_probs.sum()
    impossible = probs == 0
    assert observed[impossible].sum() == 0, "a sample fell in a zero-probability cell"
    expected = probs[~impossible] * observed.sum()
    observed = observed[~impossible]
    small = expected < MIN_EXPECTED
    if small.any():
        expected = np.append(expected[~small], expected[small].sum())
        observed = np.append(observed[~small], observed[small].sum())
    statistic = ((observed - expected) ** 2 / expected).sum()
    return float(stats.chi2.sf(statistic, df=len(expected) - 1))


def counts_of(samples: np.ndarray) -> np.ndarray:
    flat = samples[:, 0] * V * V + samples[:, 1] * V + samples[:, 2]
    return np.bincount(flat, minlength=V**3).reshape(V, V, V)


def test_autoregressive_with_warper_chain_matches_exact_joint(models):
    target_params, _, _ = models
    joint = exact_joint(TARGET, target_params, CHAIN)
    assert (joint == 0).mean() > 0.3  # top-k and top-p really cut the support
    decoder = AutoregressiveDecoder(TARGET, CHAIN, cache_len=CACHE_LEN, min_bucket=4)
    samples, _ = sample_first_tokens(
        lambda prompts, key: decoder.generate(target_params, prompts, key, NUM_TOKENS), seed=10
    )
    # False failure <= ~2e-6 (threshold 1e-6, chi-square approximation within a factor 2).
    assert chi_square_pvalue(counts_of(samples), joint) > P_THRESHOLD

    # Rows are independent: first tokens of neighbouring rows follow p1 x p1.
    # False failure <= ~2e-6, as above.
    p1 = joint.sum((1, 2))
    pairs = samples[0::2, 0] * V + samples[1::2, 0]
    assert chi_square_pvalue(np.bincount(pairs, minlength=V * V), np.outer(p1, p1)) > P_THRESHOLD


@pytest.mark.parametrize(
    "draft_name, warper, gamma",
    [("transformer", PLAIN, 2), ("bigram", CHAIN, 1)],
    ids=["transformer-T1-gamma2", "bigram-chain-gamma1"],
)
def test_speculative_matches_exact_target_joint(models, draft_name, warper, gamma):
    target_params, transformer, bigram = models
    draft, draft_params = transformer if draft_name == "transformer" else bigram
    joint = exact_joint(TARGET, target_params, warper)
    decoder = SpeculativeDecoder(TARGET, draft, gamma, warper, cache_len=CACHE_LEN, min_bucket=4)
    samples, summary = sample_first_tokens(
        lambda prompts, key: decoder.generate(
            target_params, draft_params, prompts, key, NUM_TOKENS
        ),
        seed=20 + gamma,
    )
    counts = counts_of(samples)
    # False failure <= ~2e-6 (threshold 1e-6, chi-square approximation within a factor 2).
    assert chi_square_pvalue(counts, joint) > P_THRESHOLD

    # The case exercises both branches of the acceptance rule, and whole accepted runs.
    assert 0.1 < summary["alpha_empirical"] < 0.9, summary
    assert summary["acceptance_by_position"][-1] > 0.05, summary

    if draft_name == "transformer":
        # Power: the same samples are rejected against the draft's own joint distribution, which
        # is what a decoder that accepted every draft would emit. (Its total variation distance
        # from the target's joint is large here, so with 1e5 samples the p-value is far below
        # the threshold; this check cannot fail by chance in practice.)
        draft_joint = exact_joint(DRAFT, draft_params, warper)
        assert chi_square_pvalue(counts, draft_joint) < P_THRESHOLD


def test_exact_joint_is_a_distribution_and_context_dependent(models):
    """Guards the test's own premise: the joint is normalised and not a product of marginals
    (so cache or rollback bugs that lose context would change it)."""
    target_params, _, _ = models
    joint = exact_joint(TARGET, target_params, PLAIN)
    assert joint.sum() == pytest.approx(1.0, abs=1e-9)
    p2_given_x1 = joint.sum(2) / joint.sum((1, 2))[:, None]  # [x1, x2]
    assert np.abs(p2_given_x1 - p2_given_x1.mean(0)).max() > 0.05


def test_warper_chain_fields():
    """CHAIN really is temperature + top-k + top-p (what the module docstring claims)."""
    kinds = [type(w) for w in CHAIN.warpers]
    assert kinds == [Temperature, TopK, TopP]
    assert dataclasses.astuple(CHAIN.warpers[1]) == (5,)
