"""Acceptance rates of a draft/target pair measured on text: beta = sum_x min(p(x), q(x)).

The paper's alpha = E[beta] (Leviathan et al. 2023, Definition 3.2) is the mean over positions
of the overlap between the target's and the draft's *warped* next-token distributions. Given a
token sequence, one forward pass of each model scores every prefix at once, so alpha on a corpus
or on target-generated text costs one forward per model and sequence rather than a decoding run.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax import checks
from specjax.data.batches import spread_eval_batches
from specjax.data.tokenizer import PAD_ID, _as_id_array
from specjax.decoding import Warper, make_warper
from specjax.models.interface import check_pair, check_params
from specjax.models.sequence import sequence_logits


def overlap(target_logits: jax.Array, draft_logits: jax.Array, warper: Warper) -> jax.Array:
    """beta = sum_x min(p, q) of the warped distributions: float32 [...] from [..., vocab]."""
    p = warper.probs(target_logits)  # [..., vocab]
    q = warper.probs(draft_logits)  # [..., vocab]
    return jnp.clip(jnp.minimum(p, q).sum(-1), 0.0, 1.0)


def check_token_ids(name: str, tokens, vocab_size: int) -> np.ndarray:
    """Returns concrete `tokens` (any rank) as a host array after checking they are integer ids
    in [0, vocab_size), naming `name`: an id past the vocabulary would give NaN or 0 silently."""
    arr = np.asarray(jax.device_get(tokens))
    try:
        _as_id_array(arr.reshape(-1), name, vocab_size)  # the tokenizer's dtype and range check
    except ValueError as err:
        raise ValueError(f"{err} (the models' vocab_size is {vocab_size})") from None
    return arr


def check_sequences(sequences, prompt_len: int, vocab_size: int) -> np.ndarray:
    """Returns `sequences` as int32 [n, P + N] after checking them and P = `prompt_len` on the
    host: n >= 1, ids in [0, vocab_size) and 1 <= P < P + N (at least one generated position)."""
    arr = check_token_ids("sequences", sequences, vocab_size)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] < 2:
        raise ValueError(
            "sequences must be [n, P + N] with n >= 1 rows of at least 2 tokens (a prompt and "
            f"a continuation); got shape {arr.shape}"
        )
    checks.check_count("prompt_len", prompt_len, 1, arr.shape[1] - 1)
    return arr.astype(np.int32)


def measure_alpha(target, tparams, draft, dparams, tokens: jax.Array, warper: Warper) -> jax.Array:
    """Per-position acceptance rate beta of a draft for a target on given token sequences.

    Args:
      target: the target model (decoding interface; hashable, static).
      tparams: its parameters.
      draft: the draft model (same vocabulary).
      dparams: its parameters.
      tokens: int32 [batch, T] ids in [0, vocab_size) (checked on the host when concrete);
        beta[b, t] is for the next token after tokens[b, : t + 1].
      warper: applied to both models' logits (temperature 0: greedy, beta in {0, 1}).

    Returns:
      float32 [batch, T], each in [0, 1].
    """
    if checks.is_concrete(tokens):  # on the host, before anything compiles
        check_token_ids("tokens", tokens, target.vocab_size)
    return _measure_alpha(target, tparams, draft, dparams, tokens, warper)


@functools.partial(jax.jit, static_argnames=("target", "draft", "warper"))
def _measure_alpha(target, tparams, draft, dparams, tokens: jax.Array, warper: Warper):
    """`measure_alpha` without the host-side id check (jitted: float32 [batch, T])."""
    # At trace time (shapes are static): a params mix-up is named, not a Flax scope error.
    check_params((target, draft), (tparams, dparams), ("tparams", "dparams"))
    return overlap(
        sequence_logits(target, tparams, tokens), sequence_logits(draft, dparams, tokens), warper
    )


_logits_jit = jax.jit(sequence_logits, static_argnums=0)
_overlap_jit = jax.jit(overlap, static_argnums=2)


def alpha_table(
    target,
    tparams,
    drafts: Mapping[str, tuple],
    tokens,
    seq_len: int,
    temperatures: Sequence[float] = (0.0, 1.0),
    batch_size: int = 8,
    max_windows: int | None = None,
) -> dict:
    """alpha of several drafts for one target over a split's fixed evaluation windows.

    The target runs once per batch for all drafts and temperatures. Positions of the rows that
    pad the last batch are excluded; every prefix of a window (context 1 .. seq_len tokens)
    counts once.

    Args:
      target, tparams: the target model and its parameters.
      drafts: name -> (draft model, draft params); any model of the decoding interface.
      tokens: 1-D token ids in [0, vocab_size) (normally the validation split).
      seq_len: window length; must fit every model's cache.
      temperatures: one alpha per temperature (0 = greedy), no top-k / top-p; at least one.
      batch_size: windows per call, >= 1.
      max_windows: use this many evenly spread windows (`spread_eval_batches`), >= 1; None: all.

    Returns:
      {name: {"alpha_t0": float, "alpha_t1": float, ...}} (keys f"alpha_t{t:g}"), plus
      "positions": the number of positions averaged.
    """
    check_params((target,), (tparams,), ("tparams",))
    for name, (model, params) in drafts.items():
        check_pair(target, model)
        check_params((model,), (params,), (f"drafts[{name!r}] params",))
    temperatures = tuple(temperatures)
    if not temperatures:
        raise ValueError("temperatures must hold at least one temperature; got ()")
    warpers = {t: make_warper(t) for t in temperatures}
    # Everything is checked on the host before the first forward pass compiles.
    check_token_ids("tokens", tokens, target.vocab_size)
    checks.check_count("batch_size", batch_size)
    if max_windows is not None:
        checks.check_count("max_windows", max_windows)
    batches = spread_eval_batches(tokens, seq_len, batch_size, max_windows)  # checks seq_len
    sums = {name: {t: 0.0 for t in temperatures} for name in drafts}
    positions = 0
    for windows, valid in batches:
        inputs = jnp.asarray(windows[:, :-1])  # [batch, seq_len]
        counted = valid[:, None] & (windows[:, :-1] != PAD_ID)  # [batch, seq_len]
        positions += int(counted.sum())
        t_logits = _logits_jit(target, tparams, inputs)  # [batch, seq_len, vocab]
        for name, (model, params) in drafts.items():
            d_logits = _logits_jit(model, params, inputs)  # [batch, seq_len, vocab]
            for t, warper in warpers.items():
                beta = np.asarray(_overlap_jit(t_logits, d_logits, warper), np.float64)
                sums[name][t] += float(np.sum(np.where(counted, beta, 0.0)))
    if positions == 0:
        raise ValueError("no positions to measure: the split is shorter than one window")
    out: dict = {
        name: {f"alpha_t{t:g}": s / positions for t, s in per_t.items()}
        for name, per_t in sums.items()
    }
    out["positions"] = positions
    return out


def mean_alpha(
    target, tparams, draft, dparams, tokens, seq_len: int, temperatures=(0.0, 1.0), **kwargs
) -> dict:
    """`alpha_table` for one draft: {"alpha_t0": ..., "alpha_t1": ..., "positions": int}."""
    table = alpha_table(
        target, tparams, {"draft": (draft, dparams)}, tokens, seq_len, temperatures, **kwargs
    )
    return {**table["draft"], "positions": table["positions"]}
