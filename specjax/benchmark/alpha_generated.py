"""α on text the *target* generates (as the paper measures it), for several drafts at once.

The target samples continuations of real prompts at temperature t; then one forward pass of the
target and of each draft over those sequences gives β = Σ min(p, q) at every generated position
(with the same warper at temperature t). α is the mean of β over generated positions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from specjax import checks
from specjax.alpha import check_sequences, measure_alpha
from specjax.decoding import AutoregressiveDecoder, make_warper
from specjax.models.interface import check_pair


def generate_reference(
    target,
    target_params,
    prompts,
    temperature: float,
    new_tokens: int,
    cache_len: int,
    seed: int = 0,
) -> np.ndarray:
    """Target continuations of equal-length prompts.

    Args:
      target, target_params: the target model.
      prompts: int [batch, P] (equal lengths, so all sequences align).
      temperature: sampling temperature (0 = greedy).
      new_tokens: tokens generated per prompt.
      cache_len: decoder cache length (>= P + new_tokens).
      seed: PRNG seed.

    Returns:
      int32 [batch, P + new_tokens] prompt followed by the continuation.
    """
    prompts = np.asarray(prompts, np.int32)
    decoder = AutoregressiveDecoder(target, make_warper(temperature), cache_len=cache_len)
    result = decoder.generate(target_params, prompts, jax.random.PRNGKey(seed), new_tokens)
    tokens, lengths = jax.device_get((result.tokens, result.lengths))
    width = prompts.shape[1] + new_tokens
    if not np.all(lengths == width):
        raise RuntimeError(f"expected every row to reach {width} tokens, got {lengths.tolist()}")
    return tokens[:, :width]


def alpha_on_sequences(
    target,
    target_params,
    drafts: dict,
    sequences,
    prompt_len: int,
    temperature: float,
    batch_size: int = 8,
) -> dict:
    """Mean β over the generated positions of `sequences` for each draft.

    Args:
      target, target_params: the target.
      drafts: name -> (model, params).
      sequences: int [n, P + N] prompts followed by target continuations (n >= 1), token ids
        in [0, vocab_size).
      prompt_len: P in [1, P + N - 1]; β is averaged over the predictions of tokens
        P .. P + N - 1.
      temperature: warper temperature applied to both models.
      batch_size: sequences per forward pass, >= 1.

    Returns:
      name -> {"alpha": float, "alpha_std": float (std of β), "positions": int,
               "alpha_by_offset": list[float] (mean β per generated position)}.
    """
    sequences = check_sequences(sequences, prompt_len, target.vocab_size)
    checks.check_count("batch_size", batch_size)
    warper = make_warper(temperature)
    for model, _ in drafts.values():
        check_pair(target, model)
    inputs = sequences[:, :-1]  # predictions after each token but the last
    out = {}
    for name, (model, params) in drafts.items():
        betas = []
        for start in range(0, inputs.shape[0], batch_size):
            chunk = jnp.asarray(inputs[start : start + batch_size])
            beta = measure_alpha(target, target_params, model, params, chunk, warper)
            betas.append(np.asarray(beta)[:, prompt_len - 1 :])  # [chunk, N]
        beta = np.concatenate(betas, axis=0)  # [n, N]
        out[name] = {
            "alpha": float(beta.mean()),
            "alpha_std": float(beta.std()),
            "positions": int(beta.size),
            "alpha_by_offset": beta.mean(0).tolist(),
        }
    return out
