"""How decoding cost grows with the cache buffer, per attention implementation.

`cache_len_scaling` times autoregressive decoding after a prompt at several `cache_len`s for each
`TransformerConfig.attention` setting, every (implementation, cache_len) call interleaved in one
round so drift hits all alike. A decode step's cost is isolated from prefill and dispatch by
timing `generate` with `new_tokens` and with 1 new token in the same round:
ms/token = (t(new_tokens) - t(1)) / (new_tokens - 1). `max_new_tokens` is traced, so both calls
share one compiled program. Both wall time and process CPU time (both XLA threads summed) are
recorded: on a shared machine waiting for a core inflates wall time, not CPU time.
"""

from __future__ import annotations

import jax
import numpy as np

from specjax.benchmark.costs import call_cost
from specjax.benchmark.timing import interleaved
from specjax.decoding import AutoregressiveDecoder, make_warper
from specjax.models import TransformerConfig, TransformerLM


def variant(model_cfg: TransformerConfig, impl: str) -> TransformerConfig:
    """model_cfg with attention `impl`: a `TransformerConfig.attention` value, optionally with a
    block size as "blockwise@256"."""
    name, _, block = impl.partition("@")
    changes = {"attention": name}
    if block:
        changes["attention_block"] = int(block)
    return model_cfg.replace(**changes)


def _check(impls, cache_lens, prompt_len, new_tokens, repeats):
    if not impls:
        raise ValueError("impls must name at least one attention implementation")
    for impl in impls:
        variant(TransformerConfig(vocab_size=1), impl)  # a ValueError naming `attention`
    if prompt_len < 1:
        raise ValueError(f"prompt_len must be >= 1, got {prompt_len}")
    if new_tokens < 2:
        raise ValueError(f"new_tokens must be >= 2, got {new_tokens}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for c in cache_lens:
        if c < prompt_len + new_tokens:
            raise ValueError(
                f"cache_lens must hold prompt_len + new_tokens = {prompt_len + new_tokens}, got {c}"
            )


def cache_len_scaling(
    model_cfg: TransformerConfig,
    impls=("xla", "blockwise"),
    cache_lens=(256, 1024, 4096),
    prompt_len: int = 128,
    new_tokens: int = 64,
    repeats: int = 5,
    params=None,
    seed: int = 0,
) -> dict:
    """Greedy autoregressive ms/token at each cache_len, for each attention implementation.

    Args:
      model_cfg: the model (its `attention` field is replaced by each of `impls`).
      impls: `TransformerConfig.attention` values to compare ("blockwise@256": block 256).
      cache_lens: cache buffers to decode in (each >= prompt_len + new_tokens).
      prompt_len: prompt tokens (random ids, batch 1).
      new_tokens: generated tokens per timed call (>= 2).
      repeats: interleaved timed rounds (medians are reported).
      params: the model's parameters; None: random (`init_params(PRNGKey(seed))`).
      seed: parameters and prompt.

    Returns:
      {clock: {"ms_per_token": {impl: {cache_len: ms}}, "ratio": {impl: ms at the largest
      cache_len / ms at the smallest}, "vs_xla": {impl: {cache_len: ms / xla's ms}} (when "xla"
      is among impls), "samples": {impl: {cache_len: per-round ms/token}}}} for clock "wall"
      (elapsed) and "cpu" (process CPU time) from the medians of per-round differences, and the
      same under "wall_min" / "cpu_min" from each call's fastest round (no "samples").
    """
    impls, cache_lens = tuple(impls), tuple(sorted(cache_lens))
    _check(impls, cache_lens, prompt_len, new_tokens, repeats)
    if params is None:
        params = TransformerLM(model_cfg).init_params(jax.random.PRNGKey(seed))
    prompt = np.random.default_rng(seed).integers(0, model_cfg.vocab_size, (1, prompt_len))
    prompt = prompt.astype(np.int32)
    key = jax.random.PRNGKey(seed)
    calls = {}
    for impl in impls:
        model = TransformerLM(variant(model_cfg, impl))
        for c in cache_lens:
            decoder = AutoregressiveDecoder(model, make_warper(0), cache_len=c)
            for n in (1, new_tokens):
                calls[impl, c, n] = lambda d=decoder, n=n: d.generate(params, prompt, key, n).tokens
    timed = interleaved(calls, repeats)
    timings = {n: {"wall": t.samples, "cpu": t.cpu_samples} for n, t in timed.items()}
    out = {}
    for clock in ("wall", "cpu"):
        samples = {
            impl: {c: _per_token(timings, impl, c, new_tokens, clock) for c in cache_lens}
            for impl in impls
        }
        ms = {i: {c: float(np.median(s)) for c, s in per.items()} for i, per in samples.items()}
        best = {
            i: {c: _best_per_token(timings, i, c, new_tokens, clock) for c in cache_lens}
            for i in impls
        }
        for stat, table in (("", ms), ("_min", best)):
            out[clock + stat] = {
                "ms_per_token": table,
                "ratio": {i: table[i][cache_lens[-1]] / table[i][cache_lens[0]] for i in impls},
            }
            if "xla" in impls:
                out[clock + stat]["vs_xla"] = {
                    i: {c: table[i][c] / table["xla"][c] for c in cache_lens} for i in impls
                }
        out[clock]["samples"] = samples
    return out


def _best_per_token(timings, impl, cache_len, new_tokens, clock) -> float:
    """ms per decoded token from the fastest round of each call: (min t(n) - min t(1)) / (n - 1).

    On a machine shared with other jobs the minimum estimates the uncontended cost.
    """
    long, short = timings[impl, cache_len, new_tokens][clock], timings[impl, cache_len, 1][clock]
    return 1e3 * (min(long) - min(short)) / (new_tokens - 1)


def _per_token(timings, impl, cache_len, new_tokens, clock) -> list:
    """Per-round ms per decoded token: (t(new_tokens) - t(1)) / (new_tokens - 1)."""
    long, short = timings[impl, cache_len, new_tokens][clock], timings[impl, cache_len, 1][clock]
    return [1e3 * (a - b) / (new_tokens - 1) for a, b in zip(long, short, strict=True)]


def verification_curve(
    model_cfg: TransformerConfig,
    impls=("xla", "blockwise"),
    ks=(1, 4, 16, 64),
    context: int = 128,
    cache_len: int = 1024,
    repeats: int = 5,
    params=None,
    seed: int = 0,
) -> dict:
    """T(k): ms per forward call scoring k tokens after `context` cached ones, per implementation.

    Returns:
      {impl: {k: ms}} (medians of `costs.call_cost`, implementations alternated per k).
    """
    if params is None:
        params = TransformerLM(model_cfg).init_params(jax.random.PRNGKey(seed))
    out = {impl: {} for impl in impls}
    for k in ks:
        for impl in impls:
            model = TransformerLM(variant(model_cfg, impl))
            timing = call_cost(
                model, params, k, context=context, cache_len=cache_len, repeats=repeats
            )
            out[impl][k] = 1e3 * timing.median
    return out
