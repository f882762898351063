"""alpha measured on text: exact overlaps from hand-written logits, padding, real models."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import theory
from specjax.alpha import alpha_table, mean_alpha, measure_alpha, overlap
from specjax.data.tokenizer import NUM_BYTES, PAD_ID, VOCAB_SIZE
from specjax.decoding import make_warper
from specjax.models import NgramLM, TransformerConfig, TransformerLM, UniformLM, fit_ngram
from specjax.models.ngram import LengthState


@dataclasses.dataclass(frozen=True)
class PeakLM:
    """Logit `height` on token (x + 1) after a byte x, all-zero logits after anything else."""

    vocab_size: int = VOCAB_SIZE
    height: float = 3.0

    def init_state(self, batch, max_len):
        del max_len
        return LengthState(jnp.zeros((batch,), jnp.int32))

    def apply(self, params, state, tokens, num_new):
        del params
        peak = jax.nn.one_hot((tokens + 1) % self.vocab_size, self.vocab_size) * self.height
        logits = jnp.where((tokens < NUM_BYTES)[..., None], peak, 0.0)
        return logits, state.replace(lengths=state.lengths + num_new)


def _peak_vs_uniform_beta(height, v=VOCAB_SIZE):
    z = math.exp(height) + v - 1
    return min(math.exp(height) / z, 1 / v) + (v - 1) * min(1 / z, 1 / v)


def test_overlap_of_hand_written_distributions():
    t = jnp.log(jnp.array([[0.25, 0.75]]))
    d = jnp.log(jnp.array([[0.5, 0.5]]))
    np.testing.assert_allclose(overlap(t, d, make_warper(1.0)), [0.75], rtol=1e-6)
    assert float(overlap(t, d, make_warper(0.0))[0]) == 0.0  # argmax 1 vs argmax 0 (tie)
    assert float(overlap(t, t, make_warper(0.0))[0]) == 1.0


def test_measure_alpha_matches_theory_on_real_models():
    cfg = TransformerConfig.gpt2(VOCAB_SIZE, num_layers=1, num_heads=2, embed_dim=16, mlp_dim=32)
    target, draft = (
        TransformerLM(cfg),
        TransformerLM(
            dataclasses.replace(cfg, embed_dim=8, num_heads=1, num_kv_heads=1, head_dim=None)
        ),
    )
    tp = jax.tree.map(lambda x: 5 * x, target.init_params(jax.random.PRNGKey(0)))  # peaky p
    dp = draft.init_params(jax.random.PRNGKey(1))
    tokens = jax.random.randint(jax.random.PRNGKey(2), (2, 9), 0, NUM_BYTES)
    warper = make_warper(1.0)
    beta = measure_alpha(target, tp, draft, dp, tokens, warper)  # [2, 9]
    probs = jax.jit(
        lambda m, params: warper.probs(
            m.apply(params, m.init_state(2, 9), tokens, jnp.full((2,), 9))[0]
        ),
        static_argnums=0,
    )
    p, q = probs(target, tp), probs(draft, dp)
    np.testing.assert_allclose(beta, theory.acceptance_rate(p, q), atol=1e-6)
    assert 0.1 < float(beta.mean()) < 0.9  # neither identical nor disjoint (0.30 when written)
    same = measure_alpha(target, tp, target, tp, tokens, make_warper(0.0))
    np.testing.assert_array_equal(same, np.ones((2, 9)))
    # Swapped params are named at trace time, not a Flax scope error.
    with pytest.raises(ValueError, match="tparams do not fit .* were the draft's params passed"):
        measure_alpha(target, dp, draft, tp, tokens, warper)
    with pytest.raises(ValueError, match=r"drafts\['small'\] params do not fit"):
        alpha_table(target, tp, {"small": (draft, tp)}, np.arange(1, 30, dtype=np.int32), 4)


def test_alpha_table_excludes_padding_rows():
    # 7 windows of 4 in batches of 3: the last batch has 2 padding rows, whose positions would
    # have beta = 1 (PAD input -> all-zero logits = the uniform draft) if they were counted.
    tokens = np.arange(1, 30, dtype=np.int32)  # bytes only
    table = alpha_table(
        PeakLM(), None, {"uniform": (UniformLM(VOCAB_SIZE), None)}, tokens, 4, batch_size=3
    )
    assert table["positions"] == 28
    np.testing.assert_allclose(table["uniform"]["alpha_t1"], _peak_vs_uniform_beta(3.0), rtol=1e-5)
    # Greedy: the uniform draft's argmax is token 0 (first index), the target's is x + 1 != 0.
    assert table["uniform"]["alpha_t0"] == 0.0
    assert PAD_ID >= NUM_BYTES


def test_ngram_draft_and_mean_alpha():
    corpus = np.tile(np.arange(97, 103, dtype=np.int32), 20)
    bigram = NgramLM(VOCAB_SIZE, order=2)
    params = fit_ngram(corpus, VOCAB_SIZE, order=2)
    out = mean_alpha(bigram, params, bigram, params, corpus, 8, batch_size=2)
    assert out["alpha_t0"] == 1.0
    np.testing.assert_allclose(out["alpha_t1"], 1.0, atol=1e-6)
    with pytest.raises(ValueError, match="vocab mismatch"):
        mean_alpha(bigram, params, UniformLM(10), None, corpus, 8)
