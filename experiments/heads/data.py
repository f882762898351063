"""The self-distillation data of a feature head: built once per (target, prompts, settings), cached.

`feature_data(model, params, tokenizer, ...)` returns the cached `FeatureData` when its
fingerprint matches, else generates the target's replies to `train_prompts`, scores their
features and saves them under `$SPECJAX_CACHE/features/` (see `specjax.training.features`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time

import numpy as np

from experiments.common.train_prompts import stdlib_fingerprint, train_prompts
from specjax.pretrained import cache_dir
from specjax.training.features import (
    FeatureData,
    generate_replies,
    params_fingerprint,
    score_features,
)


def feature_data(
    model,
    params,
    tokenizer,
    *,
    num_prompts: int,
    max_new_tokens: int,
    temperatures=(0.0, 1.0),
    seed: int = 0,
    batch_size: int = 32,
    max_prompt_tokens: int = 320,
    path: str | None = None,
    log=print,
) -> FeatureData:
    """The cached feature data for this target and settings (built on first use).

    Prompts are split evenly over `temperatures` (greedy replies teach the t = 0 path, sampled
    ones its neighbourhood). Prompts longer than `max_prompt_tokens` after the chat template are
    skipped.
    """
    settings = dict(
        params=params_fingerprint(params),
        stdlib=stdlib_fingerprint(),
        num_prompts=num_prompts,
        max_new_tokens=max_new_tokens,
        temperatures=list(temperatures),
        seed=seed,
        max_prompt_tokens=max_prompt_tokens,
        version=1,
    )
    fingerprint = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    if path is None:
        path = os.path.join(cache_dir(), "features", f"heads-{fingerprint}.npz")
    if os.path.exists(path):
        return FeatureData.load(path, fingerprint)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    start = time.perf_counter()
    prompts = train_prompts(num_prompts, seed)
    ids = [np.asarray(tokenizer.apply_chat_template(p.messages), np.int32) for p in prompts]
    ids = [x for x in ids if len(x) <= max_prompt_tokens]
    sequences, prompt_lengths = [], []
    share = -(-len(ids) // len(temperatures))
    for j, temperature in enumerate(temperatures):
        part = ids[j * share : (j + 1) * share]
        sequences += generate_replies(
            model, params, part, max_new_tokens=max_new_tokens, temperature=temperature,
            seed=seed + j, eos_id=tokenizer.eos_id, batch_size=batch_size,
            cache_len=max_prompt_tokens + max_new_tokens, log=log,
        )  # fmt: skip
        prompt_lengths += [len(x) for x in part]
    gen_s = time.perf_counter() - start
    features = score_features(model, params, sequences, log=log)
    meta = dict(
        settings,
        fingerprint=fingerprint,
        sequences=len(sequences),
        tokens=int(sum(len(s) for s in sequences)),
        reply_tokens=int(sum(len(s) - p for s, p in zip(sequences, prompt_lengths, strict=True))),
        generate_seconds=round(gen_s, 1),
        total_seconds=round(time.perf_counter() - start, 1),
    )
    data = FeatureData.build(sequences, prompt_lengths, features, meta)
    data.save(path)
    log(f"feature data: {meta}")
    return data
