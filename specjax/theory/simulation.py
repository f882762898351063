"""Monte-Carlo tokens per iteration under the paper's i.i.d. acceptance."""

from __future__ import annotations

import numpy as np

from specjax.theory._checks import _check_alpha, _check_gamma, _check_positive_int, _check_seed


def simulate_iterations(alpha: float, gamma: int, num_iterations: int, seed: int) -> np.ndarray:
    """Monte-Carlo samples of tokens produced per iteration under i.i.d. acceptance.

    Each of the gamma drafted tokens is accepted independently with probability alpha; the
    iteration stops at the first rejection. It always yields one more token than it accepted
    (the target's correction on a rejection, or its bonus token after all gamma are accepted).

    Args:
      alpha: acceptance probability in [0, 1].
      gamma: drafted tokens per iteration, integer >= 1.
      num_iterations: number of iterations to simulate.
      seed: seed of the numpy generator, an integer >= 0.

    Returns:
      int64 array [num_iterations] with values in 1..gamma + 1.
    """
    if np.ndim(alpha) != 0 or np.ndim(gamma) != 0:
        raise ValueError(f"alpha and gamma must be scalars, got {alpha!r} and {gamma!r}")
    alpha_f = float(_check_alpha(alpha))
    gamma_i = int(_check_gamma(gamma))
    num_iterations = _check_positive_int(num_iterations, "num_iterations")
    rng = np.random.default_rng(_check_seed(seed))
    accepted = rng.random((num_iterations, gamma_i)) < alpha_f  # [N, gamma]
    # A draft token counts only if it and every token before it were accepted.
    num_accepted = np.cumprod(accepted, axis=1).sum(axis=1)  # [N]
    return num_accepted.astype(np.int64) + 1
