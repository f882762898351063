"""Bad input to theory and the alpha measurements gets a ValueError naming the argument.

Each case here once gave a silent wrong answer (NaN, 0, -inf, a vocabulary broadcast away) or an
error that named none of the arguments. The alpha checks run on the host before anything is
jitted, so these tests compile no forward pass.
"""

import numpy as np
import pytest

from specjax import theory
from specjax.alpha import alpha_table, mean_alpha, measure_alpha
from specjax.benchmark.alpha_generated import alpha_on_sequences
from specjax.data.batches import spread_eval_batches
from specjax.decoding import make_warper
from specjax.rank_acceptance import rank_acceptance_on_sequences
from specjax.testing import tiny_llama

VOCAB = 16

# ----------------------------------------------------------------------------- theory


def test_vocab_axis_is_not_broadcast():
    # A q over 1 token used to be stretched over p's 3 and give beta = 1.
    with pytest.raises(ValueError, match="same vocabulary size"):
        theory.acceptance_rate([0.2, 0.3, 0.5], [1.0])
    with pytest.raises(ValueError, match="same vocabulary size"):
        theory.expected_alpha([[0.2, 0.3, 0.5]], [[1.0]])
    with pytest.raises(ValueError, match="same vocabulary size"):
        theory.acceptance_rate(np.full((3, 2), 0.5), np.ones((1, 2)), axis=0)
    with pytest.raises(ValueError, match="axis=2 is out of range"):
        theory.acceptance_rate([0.5, 0.5], [0.5, 0.5], axis=2)
    # The leading (position) axes still broadcast.
    p = np.array([[0.5, 0.5], [1.0, 0.0]])  # [2, vocab]
    np.testing.assert_allclose(theory.acceptance_rate(p, [0.5, 0.5]), [1.0, 0.5])
    np.testing.assert_allclose(
        theory.acceptance_rate(p.T, np.array([[0.5], [0.5]]), axis=0), [1, 0.5]
    )


def test_expected_alpha_refuses_zero_positions():
    with pytest.raises(ValueError, match="at least one position"):
        theory.expected_alpha(np.zeros((0, 3)), np.zeros((0, 3)))


@pytest.mark.parametrize("gamma", [1e19, 2**63, 2.0**60, [3, 1e20]])
def test_gamma_past_int64_is_refused(gamma):
    # These used to wrap around in the int64 cast and give -inf.
    with pytest.raises(ValueError, match=r"gamma must be an integer in \[1, 2\*\*53\]"):
        theory.expected_tokens_per_iteration(0.5, gamma)
    with pytest.raises(ValueError, match="gamma must be an integer"):
        theory.walltime_improvement(0.5, gamma, 0.1)


@pytest.mark.parametrize(
    "call,match",
    [
        (
            lambda: theory.expected_tokens_per_iteration([0.1, 0.2], [1, 2, 3]),
            r"alpha and gamma must broadcast together; got shapes alpha \(2,\), gamma \(3,\)",
        ),
        (lambda: theory.walltime_improvement([0.1, 0.2], 1, [0.1] * 3), "alpha, gamma and c"),
        (
            lambda: theory.arithmetic_operations_factor([0.1, 0.2], 1, [0.1] * 3),
            "alpha, gamma and c_hat",
        ),
        (lambda: theory.optimal_gamma([0.1, 0.2], [0.1, 0.2, 0.3]), "alpha and c must"),
        (
            lambda: theory.measured_speedup([0.1, 0.2], [1, 2, 1], [1.0, 2.0, 3.0], 0.1),
            "alpha, gamma and t_draft",
        ),
        (
            lambda: theory.measured_speedup(0.5, [1, 2], [1.0, 2.0, 3.0], [0.1] * 3),
            "gamma and t_draft",
        ),
        (
            lambda: theory.measured_optimal_gamma([0.1, 0.2], [1.0, 2.0], [0.1] * 3),
            "alpha and t_draft",
        ),
        (
            lambda: theory.hierarchical_draft_cost([0.5, 0.6], [1, 1, 1], [1.0, 1.2], 0.1),
            "alpha_inner, gamma_inner and t_small",
        ),
        (lambda: theory.gamma_table([0.5], [0.1], []), "gammas must hold at least one"),
        (lambda: theory.gamma_table([], [0.1], [1, 2]), "alphas must hold at least one"),
        (lambda: theory.gamma_table([0.5], [], [1, 2]), "cs must hold at least one"),
        (lambda: theory.simulate_iterations(0.5, 2, 5, seed=-1), "seed must be an integer >= 0"),
        (lambda: theory.simulate_iterations(0.5, 2, 5, seed=1.5), "seed must be an integer >= 0"),
        (lambda: theory.format_grid([0.5], [1, 2], [[1, 2]], best_gamma=[3]), "best_gamma"),
        (lambda: theory.format_grid([0.5], [1, 2], [[1, 2]], best_gamma=[1, 2]), "best_gamma"),
        (lambda: theory.format_grid([0.5, 0.6], [1, 2], [[1, 2]]), "values must have shape"),
        (lambda: theory.format_grid([], [1, 2], np.zeros((0, 2))), "alphas must hold"),
        (lambda: theory.cost_curve({1: 1.0, "a": 2.0}), "t_target keys"),
    ],
)
def test_theory_errors_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_format_grid_refuses_non_numeric_labels():
    with pytest.raises(TypeError, match="alphas must hold numbers"):
        theory.format_grid(["a"], [1, 2], [[1, 2]])


# ----------------------------------------------------------------------------- alpha on text


@pytest.fixture(scope="module")
def models():
    target, tparams = tiny_llama(VOCAB, 0)
    draft, dparams = tiny_llama(VOCAB, 1)
    return target, tparams, draft, dparams


@pytest.fixture(scope="module")
def sequences():
    return np.random.default_rng(0).integers(0, VOCAB, (2, 10)).astype(np.int32)


TOKENS = np.random.default_rng(1).integers(0, VOCAB, 80).astype(np.int32)


@pytest.mark.parametrize("shift", [100, -20])
def test_alpha_table_refuses_ids_past_the_vocabulary(models, shift):
    target, tparams, draft, dparams = models
    match = r"tokens must lie in \[0, 16\).*vocab_size is 16"
    with pytest.raises(ValueError, match=match):
        mean_alpha(target, tparams, draft, dparams, TOKENS + shift, 8, max_windows=4)
    with pytest.raises(ValueError, match=match):
        measure_alpha(target, tparams, draft, dparams, TOKENS[None] + shift, make_warper(1.0))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(max_windows=0), "max_windows must be an integer >= 1; got 0"),
        (dict(batch_size=-1), "batch_size must be an integer >= 1; got -1"),
        (dict(batch_size=0), "batch_size must be an integer >= 1; got 0"),
        (dict(temperatures=()), "temperatures must hold at least one"),
    ],
)
def test_alpha_table_names_bad_counts(models, kwargs, match):
    target, tparams, draft, dparams = models
    with pytest.raises(ValueError, match=match):
        alpha_table(target, tparams, {"d": (draft, dparams)}, TOKENS, 8, **kwargs)


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(batch_size=0), ValueError, "batch_size must be >= 1, got 0"),
        (dict(batch_size=2.5), TypeError, "batch_size must be an int"),
        (dict(batch_size=2, max_windows=-2), ValueError, "max_windows must be >= 1, got -2"),
        (dict(batch_size=2, max_windows=0), ValueError, "max_windows must be >= 1, got 0"),
        (dict(batch_size=2, max_windows=2.5), TypeError, "max_windows must be an int"),
    ],
)
def test_spread_eval_batches_checks_when_called(kwargs, error, match):
    # Raised by the call itself, not at the first batch (or deep inside numpy).
    with pytest.raises(error, match=match):
        spread_eval_batches(TOKENS, 5, **kwargs)


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(prompt_len=0), r"prompt_len must be an integer in \[1, 9\]; got 0"),
        (dict(prompt_len=-3), r"prompt_len must be an integer in \[1, 9\]; got -3"),
        (dict(prompt_len=10), r"prompt_len must be an integer in \[1, 9\]; got 10"),
        (dict(prompt_len=2.0), "prompt_len must be an integer"),
        (dict(batch_size=0), "batch_size must be an integer >= 1; got 0"),
        (dict(shift=100), r"sequences must lie in \[0, 16\).*vocab_size is 16"),
        (dict(rows=0), r"sequences must be \[n, P \+ N\] with n >= 1"),
        (dict(rows=-1), r"sequences must be \[n, P \+ N\]"),
    ],
)
def test_alpha_on_sequences_checks_its_arguments(models, sequences, change, match):
    target, tparams, draft, dparams = models
    seqs = sequences + change.get("shift", 0)
    if "rows" in change:
        seqs = seqs[:0] if change["rows"] == 0 else seqs[0]  # no rows, or 1-D
    with pytest.raises((ValueError, TypeError), match=match):
        alpha_on_sequences(
            target,
            tparams,
            {"d": (draft, dparams)},
            seqs,
            change.get("prompt_len", 4),
            1.0,
            batch_size=change.get("batch_size", 8),
        )


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(prompt_len=0), r"prompt_len must be an integer in \[1, 9\]; got 0"),
        (dict(prompt_len=20), r"prompt_len must be an integer in \[1, 9\]; got 20"),
        (dict(samples=0, rules=("without",)), "samples must be an integer >= 1; got 0"),
        (dict(ranks=20, rules=("top_k",)), r"ranks must be an integer in \[1, 16\]; got 20"),
        (dict(ranks=20, rules=("without",)), r"ranks must be an integer in \[1, 16\]; got 20"),
        (dict(ranks=0), "ranks must be an integer >= 1; got 0"),
        (dict(batch_size=0), "batch_size must be an integer >= 1; got 0"),
        (dict(rules=("bogus",)), "rules must be drawn from"),
        (dict(rules="with"), "rules must be a sequence"),
        (dict(shift=100), r"sequences must lie in \[0, 16\).*vocab_size is 16"),
        (dict(rows=0), r"sequences must be \[n, P \+ N\] with n >= 1"),
    ],
)
def test_rank_acceptance_on_sequences_checks_its_arguments(models, sequences, change, match):
    target, tparams, draft, dparams = models
    seqs = sequences + change.pop("shift", 0)
    if change.pop("rows", None) == 0:
        seqs = seqs[:0]
    kwargs = dict(prompt_len=4, ranks=2, rules=("with",)) | change
    with pytest.raises((ValueError, TypeError), match=match):
        rank_acceptance_on_sequences(
            target,
            tparams,
            draft,
            dparams,
            seqs,
            kwargs.pop("prompt_len"),
            make_warper(1.0),
            kwargs.pop("ranks"),
            **kwargs,
        )
