"""Is my decoder lossless? `check_decoder` points the kit at a whole decoder.

    from specjax import testing
    target, tp, draft, dp = testing.tiny_bigram_pair(vocab=5, seed=0)
    report = testing.check_decoder(SpeculativeDecoder(target, draft, 4, make_warper(1.0)), tp, dp)
    print(report); assert report.passed

A decoder is any object of the loop protocol (`specjax/decoding/loop.py`: a speculative decoder
with any accept rule or γ policy, a token-tree decoder, a hierarchy) whose `generate` takes its
models' params positionally. For each prompt the kit runs `draws` rows (batches of `batch` rows,
each batch its own key, so the rows are independent samples) for L = max(3, tokens_per_step)
new tokens and compares the first L emitted tokens with the target's exact law:

  * the target's law is enumerated with the target model's own forward pass: every one of the
    vocab^(L-1) continuations is fed after the prompt in one batch, the decoder's warper turns
    the logits into p(x_t | prompt, x_<t), and the joint is their product (float64), so any
    target whose vocabulary is tiny can be used (the tests use `NgramLM` bigrams from
    `tiny_bigram_pair`; a tiny transformer goes through the same `apply`, untested here);
  * checks per prompt, as `check_acceptance_rule`'s: the pooled chi-square of the joint of the
    L tokens (vocab^L cells; at least three tokens, since some biased rules are exact for two)
    and of each position's marginal, failing below `threshold` = 1e-6; an emitted sequence of
    target probability 0 fails outright. k = prompts x (L + 1) checks (+ 1 for the greedy
    check, counted at 1e-6 too though it is deterministic), so a lossless decoder fails a run
    with probability <= k x 1e-6 (Bonferroni; the report states it);
  * with `greedy=True` and a decoder that has a `warper` field: the decoder rebuilt at
    temperature 0 must equal the autoregressive decoder token for token on every prompt
    (`greedy_equality`, a deterministic check: pass or fail, recorded as p-value 1 or 0);
  * with `eos_id`, rows stop at that token, and the law is that of the stopped stream: the
    positions after a row's first EOS hold a stop symbol (`stop_law`), so a decoder that
    emits past EOS, or stops early, or miscounts what a stopped row emitted, fails;
  * with `mixed=True`, every call holds all prompts side by side (ragged rows in one batch,
    each checked against its own prompt's law): a decoder whose rows read each other's
    lengths, caches or keys fails where one prompt per call cannot show it;
  * a wrapper without a warper of its own (`ShardedDecoder`) generates, and the decoder it
    runs (`lawful`) supplies the law, the warper and the greedy reference; the greedy prompts
    repeat to a multiple of the wrapper's `data_parallelism`.

Seeds are fixed, so a run is deterministic. `tiny_bigram_pair` builds the target and draft
tables by hand from Dirichlet draws with a fixed seed (the draft a mixture of the target and
noise, so acceptance is neither certain nor rare).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.testing.kit import CheckResult, Report
from specjax.testing.stats import PVALUE_THRESHOLD, Chi2, check_threshold, pooled_chi2

DEFAULT_PROMPTS = ((0,), (1, 2))
DEFAULT_DRAWS = 1 << 18


def tiny_bigram_pair(vocab: int = 5, seed: int = 0, *, concentration: float = 0.5, mix=0.5):
    """A bigram target and bigram draft over `vocab` tokens, tables from Dirichlet draws.

    Args:
      vocab: tokens (4-6 keep the exact law enumerable cheaply).
      seed: fixed seed of the tables.
      concentration: Dirichlet concentration of every row (< 1: peaked rows).
      mix: the draft row is (1 - mix) p + mix noise, noise a fresh Dirichlet row; 1: unrelated.

    Returns:
      (target, target_params, draft, draft_params), two `NgramLM(vocab, order=2)` and their
      {"log_probs": float32 [vocab, vocab]} params.
    """
    from specjax.models.ngram import NgramLM

    if not (isinstance(vocab, int) and 2 <= vocab <= 8):
        raise ValueError(f"vocab must be an integer in [2, 8]; got {vocab!r}")
    if not 0.0 <= mix <= 1.0:
        raise ValueError(f"mix must lie in [0, 1]; got {mix!r}")
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(vocab, concentration), size=vocab)  # [vocab, vocab]
    noise = rng.dirichlet(np.full(vocab, concentration), size=vocab)
    q = (1.0 - mix) * p + mix * noise
    model = NgramLM(vocab, order=2)

    def params(table):
        return {"log_probs": jnp.asarray(np.log(np.maximum(table, 1e-30)), jnp.float32)}

    return model, params(p), model, params(q)


def tiny_llama(vocab: int, seed: int = 0, embed: int = 16):
    """A tiny random Llama-shaped target (2 layers, GQA, RoPE, SwiGLU) for feature-head drafts.

    Its 2-D weights are scaled by 8 from the 0.02 init, so the target's law is far from uniform.

    Returns:
      (model, params): a `TransformerLM` of `vocab` tokens, 64 positions, and its params.
    """
    from specjax.models import TransformerConfig, TransformerLM

    cfg = TransformerConfig(
        vocab_size=vocab, num_layers=2, num_heads=2, num_kv_heads=1, embed_dim=embed,
        mlp_dim=32, max_len=64, norm="rmsnorm", positions="rope", mlp="swiglu",
        tie_embeddings=True,
    )  # fmt: skip
    model = TransformerLM(cfg)
    params = model.init_params(jax.random.PRNGKey(seed))
    params = jax.tree.map(
        lambda x: jax.device_put(np.asarray(x) * 8.0) if x.ndim == 2 else x, params
    )
    return model, params


def target_law(
    decoder, target_params, prompt: Sequence[int], length: int, eos_id: int | None = None
) -> np.ndarray:
    """float64 [vocab] * length: P(first `length` new tokens | prompt) under the target.

    Enumerates every continuation with the target's own forward pass (one batch of
    vocab^(length - 1) rows) and the decoder's warper. With `eos_id`: float64 [vocab + 1] *
    length, the law of the stream that stops after its first EOS (`stop_law`).
    """
    target = decoder.models[0]
    vocab = decoder.vocab_size
    prompt = [int(t) for t in prompt]
    prefixes = np.array(list(itertools.product(range(vocab), repeat=length - 1)), np.int32)
    rows = prefixes.shape[0]
    tokens = np.concatenate([np.tile(np.asarray(prompt, np.int32), (rows, 1)), prefixes], 1)
    width = tokens.shape[1]  # P + length - 1
    state = target.init_state(rows, width + 1)
    logits, _ = target.apply(
        target_params, state, jnp.asarray(tokens), jnp.full((rows,), width, jnp.int32)
    )  # [rows, width, vocab]
    probs = decoder.warper.probs(logits[:, len(prompt) - 1 :])  # [rows, length, vocab]
    probs = np.asarray(probs, np.float64)
    probs /= probs.sum(-1, keepdims=True)
    # p(x_1..x_{L-1}) from each row's own tokens, times the last step's row.
    chosen = np.take_along_axis(probs[:, : length - 1], prefixes[..., None], axis=-1)[..., 0]
    joint = np.prod(chosen, axis=-1)[:, None] * probs[:, length - 1]  # [rows, vocab]
    joint = joint.reshape((vocab,) * length)
    return joint if eos_id is None else stop_law(joint, eos_id)


def stop_law(joint: np.ndarray, eos_id: int) -> np.ndarray:
    """float64 [vocab + 1] * L: `joint` ([vocab] * L) for a stream that stops after its first
    `eos_id`, every position after it holding the stop symbol `vocab`."""
    vocab, length = joint.shape[0], joint.ndim
    seqs = np.array(list(itertools.product(range(vocab), repeat=length)))  # joint's C order
    is_eos = seqs == eos_id
    after = (np.cumsum(is_eos, axis=1) - is_eos) > 0  # an EOS came before this position
    seqs = np.where(after, vocab, seqs)
    out = np.zeros((vocab + 1,) * length)
    np.add.at(out, tuple(seqs.T), joint.ravel())
    return out


def sample_streams(
    decoder,
    params,
    prompts,
    length: int,
    *,
    draws: int,
    batch: int,
    seed: int,
    eos_id: int | None = None,
) -> list[np.ndarray]:
    """Per prompt, int [draws, length]: the first `length` tokens `decoder` generates after it.

    Every `generate` call has `batch` rows, row r on prompts[r % len(prompts)] (one prompt: a
    tiled batch; several: ragged rows side by side), and its own key, fold_in(key(seed), call).
    With `eos_id`, a row stops after its EOS and its later positions hold the stop symbol
    `lawful(decoder).vocab_size`; a row that stops short of `length` tokens without one raises.
    """
    prompts = [np.asarray(p, np.int32) for p in prompts]
    if len(prompts) == 1:
        batch_prompts = np.tile(prompts[0], (batch, 1))  # [batch, P]
    else:
        batch_prompts = [prompts[r % len(prompts)] for r in range(batch)]
    rows_of = [np.arange(i, batch, len(prompts)) for i in range(len(prompts))]
    per_call = min(len(rows) for rows in rows_of)
    if per_call == 0:
        raise ValueError(
            f"batch={batch} rows cannot hold one row of each of {len(prompts)} prompts"
        )
    key = jax.random.key(seed)
    out = [[] for _ in prompts]
    stop = lawful(decoder).vocab_size
    for i in range(-(-draws // per_call)):
        result = decoder.generate(
            *params,
            prompts=batch_prompts,
            key=jax.random.fold_in(key, i),
            max_new_tokens=length,
            eos_id=eos_id,
        )
        tokens, lengths = jax.device_get((result.tokens, result.lengths))
        for prompt, rows, streams in zip(prompts, rows_of, out, strict=True):
            start = len(prompt)
            new = tokens[rows, start : start + length]  # [rows, length]
            emitted = lengths[rows] - start  # [rows]
            ended = emitted < length
            if ended.any():
                last = new[ended, np.maximum(emitted[ended], 1) - 1]
                if eos_id is None or not np.all((emitted[ended] >= 1) & (last == eos_id)):
                    raise ValueError(
                        f"{decoder!r} generated fewer than {length} tokens without an EOS"
                    )
            if eos_id is not None:
                new = np.where(np.arange(length) >= emitted[:, None], stop, new)
            streams.append(new)
    return [np.concatenate(streams)[:draws] for streams in out]


def _counts(streams: np.ndarray, vocab: int) -> np.ndarray:
    k = streams.shape[1]
    flat = np.ravel_multi_index(tuple(streams.T), (vocab,) * k)
    return np.bincount(flat, minlength=vocab**k).reshape((vocab,) * k)


def greedy_equality(decoder, params, prompts, *, max_new_tokens: int = 12) -> Chi2:
    """The decoder at temperature 0 against greedy autoregressive decoding of its target.

    Returns a deterministic `Chi2`: statistic = rows that differ, p-value 1 if none, else 0.
    """
    from specjax.decoding import AutoregressiveDecoder, make_warper

    greedy = make_warper(0.0)
    fast = _with_warper(decoder, greedy)
    inner = lawful(decoder)
    reference = AutoregressiveDecoder(inner.models[0], greedy, cache_len=inner.cache_len)
    # A wrapper that splits rows over devices (`ShardedDecoder`) needs a multiple of its split.
    prompts = [np.asarray(p, np.int32) for p in prompts] * getattr(decoder, "data_parallelism", 1)
    key = jax.random.key(0)
    ours = fast.generate(*params, prompts=prompts, key=key, max_new_tokens=max_new_tokens)
    ref = reference.generate(params[0], prompts=prompts, key=key, max_new_tokens=max_new_tokens)
    bad = sum(
        not np.array_equal(a, b) for a, b in zip(ours.new_tokens(), ref.new_tokens(), strict=True)
    )
    return Chi2(float(bad), 0, 0.0 if bad else 1.0, 0)


def lawful(decoder):
    """The decoder whose `warper`, models and vocabulary define the sampled law: `decoder` itself,
    or, for a wrapper without a warper of its own (`ShardedDecoder`), the one in `.decoder`."""
    while not hasattr(decoder, "warper") and hasattr(decoder, "decoder"):
        decoder = decoder.decoder
    return decoder


def _with_warper(decoder, warper):
    """`decoder` with `warper` in place of its own (inside a wrapper's `.decoder`)."""
    if hasattr(decoder, "warper"):
        return dataclasses.replace(decoder, warper=warper)
    return dataclasses.replace(decoder, decoder=_with_warper(decoder.decoder, warper))


def check_decoder(
    decoder,
    *params,
    prompts: Sequence[Sequence[int]] = DEFAULT_PROMPTS,
    draws: int = DEFAULT_DRAWS,
    batch: int = 4096,
    length: int | None = None,
    seed: int = 0,
    threshold: float = PVALUE_THRESHOLD,
    greedy: bool = True,
    name: str | None = None,
    eos_id: int | None = None,
    mixed: bool = False,
) -> Report:
    """Tests that `decoder` samples the target's law (see module doc).

    Args:
      decoder: any decoder of the loop protocol whose target (`decoder.models[0]`) has a tiny
        vocabulary and which has a `warper` (used for the exact law), or a wrapper of one that
        has none of its own (`ShardedDecoder`: the law is its `.decoder`'s; `lawful`).
      *params: one params pytree per entry of `decoder.models` (target first).
      prompts: token prompts; each is a case.
      draws: generated rows per prompt.
      batch: rows per `generate` call (one compile; every call its own key).
      length: emitted tokens compared (default max(3, tokens_per_step)).
      seed: fixed seed; prompt i uses seed * 1000 + i.
      threshold: a check fails below this p-value.
      greedy: also check temperature 0 against the autoregressive decoder token for token
        (needs a dataclass decoder with a `warper` field).
      name: the decoder's name in the report.
      eos_id: generate with this EOS: a row stops after it, and the law compared is that of
        the stopped stream (`stop_law`: vocab + 1 symbols, the last one "stopped").
      mixed: every call interleaves all prompts (row r on prompts[r % len(prompts)]): ragged
        rows side by side, each checked against its own prompt's law (`draws` rows each, one
        seed `seed * 1000`), which catches rows that read each other's state. False: one
        prompt per call (seed `seed * 1000 + i` for prompt i).

    Returns:
      `Report` (the type `check_acceptance_rule` returns); `report.passed` is the verdict.
    """
    inner = lawful(decoder)  # a ShardedDecoder's law is that of the decoder it runs
    if not hasattr(inner, "warper"):
        raise ValueError(f"decoder must have a warper (its sampling law); got {decoder!r}")
    if len(params) != len(decoder.models):
        raise ValueError(
            f"params: {decoder!r} takes {len(decoder.models)} params pytrees; got {len(params)}"
        )
    if greedy and not (dataclasses.is_dataclass(decoder) and dataclasses.is_dataclass(inner)):
        raise ValueError(
            f"greedy=True rebuilds the decoder at temperature 0 (dataclasses.replace); "
            f"{type(decoder).__name__} is not a dataclass: pass greedy=False"
        )
    if draws < 1 or batch < 1:
        raise ValueError(f"draws and batch must be >= 1; got {draws}, {batch}")
    check_threshold(threshold)
    if not len(prompts):  # no case: a report of no checks would say "passed"
        raise ValueError("prompts must hold at least one prompt")
    length = max(3, int(inner.tokens_per_step)) if length is None else int(length)
    if length < 1:
        raise ValueError(f"length must be >= 1; got {length}")
    symbols = inner.vocab_size + (eos_id is not None)  # + the stop symbol
    start = time.perf_counter()
    if mixed:
        rows = min(batch, draws * len(prompts))
        every = sample_streams(
            decoder, params, prompts, length, draws=draws, batch=rows, seed=seed * 1000,
            eos_id=eos_id,
        )  # fmt: skip
    else:
        every = [
            sample_streams(
                decoder, params, [prompt], length, draws=draws, batch=min(batch, draws),
                seed=seed * 1000 + i, eos_id=eos_id,
            )[0]
            for i, prompt in enumerate(prompts)
        ]  # fmt: skip
    results = []
    for prompt, streams in zip(prompts, every, strict=True):
        case = f"prompt{list(prompt)}"
        law = target_law(inner, params[0], prompt, length, eos_id)
        results.append(
            CheckResult(case, "joint", pooled_chi2(_counts(streams, symbols), law), threshold)
        )
        for t in range(length):
            marginal = law.sum(axis=tuple(a for a in range(length) if a != t))
            counts = np.bincount(streams[:, t], minlength=symbols)
            results.append(
                CheckResult(case, f"token{t + 1}", pooled_chi2(counts, marginal), threshold)
            )
    if greedy:
        chi2 = greedy_equality(decoder, params, prompts)
        results.append(CheckResult("greedy_t0", "equal_ar", chi2, threshold))
    if name is None:
        accept = getattr(inner, "accept", None)
        name = type(inner).__name__
        if inner is not decoder:
            name = f"{type(decoder).__name__}({name})"
        if accept is not None:
            name += f"[{getattr(accept, '__name__', repr(accept))}]"
    return Report(name, draws, threshold, tuple(results), time.perf_counter() - start)
