"""The self-distillation data of a feature head: built once per (target, prompts, settings), cached.

`feature_data(model, params, tokenizer, ...)` returns the cached `FeatureData` when its
fingerprint matches, else generates the target's replies to `train_prompts` (or to the prompts
of your `prompts_file`, JSON Lines as `real_prompts.load_prompts` reads them), scores their
features and saves them under `$SPECJAX_CACHE/features/` (see `specjax.training.features`).
An EAGLE-3 head's data (`layers`: the target blocks it reads) is cached under its own
fingerprint; when the same replies are cached without layers, they are re-scored rather than
generated again. On a 2-core CPU scoring costs about as much as generating: the broad set's
4,766 sequences (2026-12-08) took 60 min to generate, and scoring them about 100 sequences a
minute (4,120 in 43 min, slowing as the sorted batches grew).
"""

from __future__ import annotations

import hashlib
import json
import os
import time

import numpy as np

from experiments.common.broad_prompts import broad_prompts, usable_passages, writing_prompts
from experiments.common.real_prompts import evaluation_texts, load_prompts
from experiments.common.train_prompts import stdlib_fingerprint, train_prompts
from specjax.pretrained import cache_dir
from specjax.training.eagle import rank_by_frequency
from specjax.training.features import (
    FeatureData,
    generate_replies,
    params_fingerprint,
    score_concatenated,
)

PROMPT_SETS = ("broad", "stdlib")


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
    layers: tuple = (),
    prompts_file: str = "",
    prompt_set: str = "broad",
    log=print,
) -> FeatureData:
    """The cached feature data for this target and settings (built on first use).

    Prompts are split evenly over `temperatures` (greedy replies teach the t = 0 path, sampled
    ones its neighbourhood). Prompts longer than `max_prompt_tokens` after the chat template are
    skipped. `prompt_set` names the built-in prompts: "broad" (`broad_prompts.py`, default: a
    sixth of `num_prompts` ask the target for everyday passages, whose replies become passages
    of the other prompts' summaries and questions) or "stdlib" (`train_prompts.py`, the set of
    the heads measured before 2026-12-05). With `prompts_file`, the file's prompts replace the
    built-in ones (all of them, in order; `num_prompts` is unused), and the data is cached under the
    fingerprint of their content; a file that holds one of our evaluation prompts is refused,
    since a head trained on it would be measured on its own training text.
    """
    if prompt_set not in PROMPT_SETS:
        raise ValueError(f"prompt_set must be one of {PROMPT_SETS}, got {prompt_set!r}")
    file_prompts = check_training_file(prompts_file) if prompts_file else None
    settings = dict(
        params=params_fingerprint(params),
        stdlib=stdlib_fingerprint(),
        num_prompts=num_prompts,
        max_new_tokens=max_new_tokens,
        temperatures=list(temperatures),
        seed=seed,
        max_prompt_tokens=max_prompt_tokens,
        version=2,  # 2: batches of prompts sorted by length (1: in the prompts' order)
    )
    if prompt_set != "stdlib":
        settings["prompt_set"] = prompt_set
    if file_prompts is not None:  # the prompts are the file's, not generated from the stdlib
        del settings["stdlib"]
        settings.pop("prompt_set", None)
        settings["num_prompts"] = len(file_prompts)
        settings["prompts_sha256"] = _prompts_sha256(file_prompts)
    replies = _fingerprint(settings)  # the replies' (and the final hidden states') own
    if layers:
        settings["feature_layers"] = [int(i) for i in layers]
    fingerprint = _fingerprint(settings)
    if path is None:
        path = _cache_path(fingerprint)
    if os.path.exists(path):
        return FeatureData.load(path, fingerprint)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if layers and os.path.exists(_cache_path(replies)):
        data = _with_layers(FeatureData.load(_cache_path(replies), replies), model, params,
                            layers, fingerprint, log)  # fmt: skip
        data.save(path)
        return data
    start = time.perf_counter()
    generate = dict(
        model=model, params=params, tokenizer=tokenizer, temperatures=temperatures, seed=seed,
        max_new_tokens=max_new_tokens, batch_size=batch_size,
        max_prompt_tokens=max_prompt_tokens, log=log,
    )  # fmt: skip
    if file_prompts is not None:
        sequences, prompt_lengths, skipped = _replies(file_prompts, **generate)
    elif prompt_set == "stdlib":
        sequences, prompt_lengths, skipped = _replies(train_prompts(num_prompts, seed), **generate)
    else:  # "broad": stage 1's passages feed stage 2's summaries and questions
        first = writing_prompts(max(1, num_prompts // 6), seed)
        sequences, prompt_lengths, skipped = _replies(first, **generate)
        texts = [tokenizer.decode(s[p:], stop_at_eos=True) for s, p in
                 zip(sequences, prompt_lengths, strict=True)]  # fmt: skip
        passages = usable_passages(texts)
        log(f"stage 1: {len(passages)} of {len(texts)} replies are usable passages")
        second = broad_prompts(num_prompts - len(first), seed, passages)
        more = _replies(second, **dict(generate, seed=seed + len(temperatures)))
        sequences, prompt_lengths = sequences + more[0], prompt_lengths + more[1]
        skipped += more[2]
    gen_s = time.perf_counter() - start
    features, layer_feats = score_concatenated(
        model, params, sequences, layers=tuple(layers), log=log
    )
    meta = dict(
        settings,
        fingerprint=fingerprint,
        sequences=len(sequences),
        prompts_skipped=skipped,
        tokens=int(sum(len(s) for s in sequences)),
        reply_tokens=int(sum(len(s) - p for s, p in zip(sequences, prompt_lengths, strict=True))),
        generate_seconds=round(gen_s, 1),
        total_seconds=round(time.perf_counter() - start, 1),
    )
    data = FeatureData.build(sequences, prompt_lengths, features, meta, layer_feats)
    data.save(path)
    if layers and not os.path.exists(_cache_path(replies)):  # a head without layers reuses it
        os.makedirs(os.path.dirname(_cache_path(replies)), exist_ok=True)
        meta_replies = {k: v for k, v in meta.items() if k != "feature_layers"}
        FeatureData(data.tokens, data.features, data.loss_mask, data.offsets,
                    dict(meta_replies, fingerprint=replies)).save(_cache_path(replies))  # fmt: skip
    log(f"feature data: {meta}")
    return data


def _replies(prompts, *, model, params, tokenizer, temperatures, seed, max_new_tokens,
             batch_size, max_prompt_tokens, log):  # fmt: skip
    """(sequences, prompt lengths, skipped): the target's replies to `prompts` (chat
    templated; those over `max_prompt_tokens` skipped), split evenly over `temperatures`."""
    ids = [np.asarray(tokenizer.apply_chat_template(p.messages), np.int32) for p in prompts]
    ids = [x for x in ids if len(x) <= max_prompt_tokens]
    sequences, prompt_lengths = [], []
    share = -(-len(ids) // len(temperatures))
    for j, temperature in enumerate(temperatures):
        part = ids[j * share : (j + 1) * share]
        if not part:
            continue
        sequences += generate_replies(
            model, params, part, max_new_tokens=max_new_tokens, temperature=temperature,
            seed=seed + j, eos_id=tokenizer.eos_id, batch_size=batch_size,
            cache_len=max_prompt_tokens + max_new_tokens, log=log,
        )  # fmt: skip
        prompt_lengths += [len(x) for x in part]
    return sequences, prompt_lengths, len(prompts) - len(ids)


def token_order(fingerprint: str, vocab_size: int) -> np.ndarray:
    """int64 [vocab_size] token ids of the cached training data `fingerprint`, most frequent
    first (`specjax.training.eagle.rank_by_frequency`): the first N, sorted, are
    `frequent_tokens(data, N)`, the columns a run with `ce_vocab=N` was trained over.

    Runs record the same order with their checkpoints (`head_run.head_token_order`); this is
    for runs from before they did. Raises FileNotFoundError when that data is not in
    $SPECJAX_CACHE/features (build it with the head's config, or pass the ids).
    """
    path = _cache_path(fingerprint)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"the training data {fingerprint} is not cached ({path}): run the head's "
            "configs/heads.py config once to build it"
        )
    with np.load(path) as z:
        return rank_by_frequency(z["tokens"], vocab_size)


def check_training_file(path: str) -> tuple:
    """The prompts of a training prompts file, none of them one of our evaluation prompts (the
    user's message compared, whitespace stripped, whatever turns come before it). Your own
    evaluation prompts it cannot know: keep them out of the file yourself."""
    prompts = load_prompts(path)
    evaluation = evaluation_texts()
    shared = [p for p in prompts if p.text.strip() in evaluation]
    if shared:
        raise ValueError(
            f"config.data.prompts_file={path!r}: {len(shared)} of its prompts are evaluation "
            f"prompts of experiments/common/ (the first: {shared[0].text[:60]!r}); "
            "a head trained on them would be measured on its own training text"
        )
    return prompts


def _prompts_sha256(prompts) -> str:
    """sha256 of the prompts' tasks and conversations, in order (the data's cache key)."""
    text = json.dumps([[p.task, p.messages] for p in prompts], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _fingerprint(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def _cache_path(fingerprint: str) -> str:
    return os.path.join(cache_dir(), "features", f"heads-{fingerprint}.npz")


def _with_layers(data: FeatureData, model, params, layers, fingerprint, log) -> FeatureData:
    """`data`'s replies re-scored for the layer features of `layers` (new fingerprint)."""
    start = time.perf_counter()
    sequences = [data.tokens[a:b] for a, b in zip(data.offsets[:-1], data.offsets[1:], strict=True)]
    _, layer_feats = score_concatenated(model, params, sequences, layers=tuple(layers), log=log)
    meta = dict(
        data.meta, feature_layers=[int(i) for i in layers], fingerprint=fingerprint,
        layer_seconds=round(time.perf_counter() - start, 1),
    )  # fmt: skip
    out = FeatureData(data.tokens, data.features, data.loss_mask, data.offsets, meta, layer_feats)
    log(f"feature data: {meta}")
    return out
