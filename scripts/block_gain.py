r"""Tokens per target call, token-wise vs block verification, on a trained pair, for γ = 1..8.

    python scripts/block_gain.py                       # leviathan2023:tiny's mini pair, t = 1
    python scripts/block_gain.py --drafts=mini_draft --contexts=512 --temperature=0.7

Uses only cached weights (~/.cache/specjax/models, written by the leviathan2023 pipeline; this
script never trains). Contexts are target-generated: validation prompts of 32 bytes followed by
`--warmup` tokens sampled from the target. At each context the draft samples a block of 8 tokens
(temperature t), the target scores it once, and for every γ <= 8 the first γ drafts give, in
closed form (no coins drawn), the expected number of accepted drafts of each rule given the block:

    token-wise  E[n | x] = Σ_i Π_{j<=i} min(1, p_j(x_j) / q_j(x_j))
    block       E[τ | x] = Σ_i (1 − Π_{j>=i} (1 − h_j))        (specjax.decoding.rules.block)

Averaged over drafted blocks this is E[accepted] per call exactly (Rao-Blackwellised), and both
rules see the same blocks, so the gain's standard error is that of a paired mean. Tokens per
call = E[accepted] + 1. Prints one row per γ with the gain and its standard error.

`--decode_gammas=4,8` also runs `SpeculativeDecoder(..., accept=rule)` end to end for both rules
(one batch of `--decode_prompts` prompts, `--decode_new` tokens each, timed round-robin after a
compile call): tokens per iteration as the decoder counts them, and ms per token.

Measured (our shared 2-core CPU, t = 1, leviathan2023:tiny's mini_target with mini_draft /
mini_draft_distilled; 1024 contexts, warmup 8; "se" is the paired standard error):

    gamma          1      2      3      4      5      6      7      8
    mini_draft     1.844  2.549  3.137  3.645  4.079  4.449  4.767  5.041   token-wise
                   1.844  2.577  3.224  3.817  4.349  4.831  5.284  5.676   block
                   +0.0   +1.1   +2.8   +4.7   +6.6   +8.6  +10.8  +12.6 % (se 0.2-0.9 %)
    distilled      1.890  2.679  3.377  4.000  4.556  5.055  5.504  5.909   token-wise
                   1.890  2.696  3.445  4.137  4.776  5.389  5.949  6.487   block
                   +0.0   +0.6   +2.0   +3.4   +4.8   +6.6   +8.1   +9.8 % (se 0.15-0.7 %)

With deeper contexts (--contexts=256 --warmup=64, mini_draft) γ = 8 gives 4.941 vs 5.713
(+15.6 % +- 2.1 %); decoded end to end there (64 prompts x 128 tokens, one batch) 4.710 vs 5.376
tokens per iteration (+14.1 %) and 0.393 vs 0.309 ms per token (one run of 3 repeats on a loaded
CPU: indicative only). At γ = 2 and 4 (16 prompts): 2.464 vs 2.520 and 3.554 vs 3.728.
"""

from __future__ import annotations

import functools
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configs import leviathan2023 as lev_config  # noqa: E402
from experiments.common import models as model_lib  # noqa: E402
from specjax.benchmark.timing import interleaved  # noqa: E402
from specjax.checkpoint import load_model  # noqa: E402
from specjax.data import load_corpus  # noqa: E402
from specjax.data.batches import sample_prompts  # noqa: E402
from specjax.data.tokenizer import ByteTokenizer  # noqa: E402
from specjax.decoding import (
    SpeculativeDecoder,  # noqa: E402
    make_warper,  # noqa: E402
)
from specjax.decoding.rules import accept_rule  # noqa: E402
from specjax.decoding.rules.block import expected_accepted, stop_chances  # noqa: E402
from specjax.training import zoo  # noqa: E402

_DRAFTS = flags.DEFINE_list("drafts", ["mini_draft", "mini_draft_distilled"], "Drafts.")
_CONTEXTS = flags.DEFINE_integer("contexts", 1024, "Contexts (drafted blocks) per draft.")
_WARMUP = flags.DEFINE_integer("warmup", 8, "Target-sampled tokens after each prompt.")
_TEMPERATURE = flags.DEFINE_float("temperature", 1.0, "Temperature of target and draft.")
_MAX_GAMMA = flags.DEFINE_integer("max_gamma", 8, "Largest gamma.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed.")
_DECODE_GAMMAS = flags.DEFINE_list(
    "decode_gammas", [], "Also decode end to end with both rules at these gammas (walltime)."
)
_DECODE_PROMPTS = flags.DEFINE_integer("decode_prompts", 8, "Prompts (one batch) to decode.")
_DECODE_NEW = flags.DEFINE_integer("decode_new", 128, "New tokens per prompt when decoding.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed rounds when decoding (medians).")
PROMPT_LEN = 32


def _cached(cfg):
    path = zoo.model_cache_dir(cfg.to_dict())
    if not os.path.isdir(path):
        raise SystemExit(f"{cfg.name} is not cached at {path}: run the leviathan2023 pipeline")
    return load_model(path)


def _forward(model, width):
    """Jitted logits [N, width, vocab] of a fixed-width buffer (causal: column t sees <= t)."""

    @jax.jit
    def run(params, tokens):
        state = model.init_state(tokens.shape[0], width)
        num_new = jnp.full((tokens.shape[0],), width, jnp.int32)
        return model.apply(params, state, tokens, num_new)[0].astype(jnp.float32)

    return run


def _probs(logits, temperature):
    return jax.nn.softmax(logits / temperature, axis=-1)


def main(argv):
    del argv
    config = lev_config.get_config("tiny")
    target_cfg = model_lib.train_config(config.target, config)
    target, tparams, _ = _cached(target_cfg)
    n, g, t, warm = _CONTEXTS.value, _MAX_GAMMA.value, _TEMPERATURE.value, _WARMUP.value
    width = PROMPT_LEN + warm + g + 1
    val = np.asarray(load_corpus(config.corpus, "validation", ByteTokenizer()))
    prompts = np.stack(sample_prompts(val, n, PROMPT_LEN, seed=_SEED.value).tokens)
    buf = np.zeros((n, width), np.int32)
    buf[:, :PROMPT_LEN] = prompts
    buf = jnp.asarray(buf)
    key = jax.random.key(_SEED.value)
    t_fwd = _forward(target, width)
    for k in range(warm):  # target-generated context, as the decoder's own stream would be
        pos = PROMPT_LEN + k
        logits = t_fwd(tparams, buf)[:, pos - 1]
        token = jax.random.categorical(jax.random.fold_in(key, k), logits / t, axis=-1)
        buf = buf.at[:, pos].set(token.astype(jnp.int32))
    start = PROMPT_LEN + warm  # first drafted position

    print(f"target {target_cfg.name}; t = {t:g}; {n} target-generated contexts; gamma 1..{g}")
    for name in _DRAFTS.value:
        distill = name.endswith(model_lib.DISTILLED_SUFFIX)
        size = name[: -len(model_lib.DISTILLED_SUFFIX)] if distill else name
        cfg = model_lib.train_config(size, config, distill_from=target_cfg if distill else None)
        draft, dparams, _ = _cached(cfg)
        d_fwd = _forward(draft, width)
        block = buf
        qs = []
        for j in range(g):  # the draft samples its block autoregressively
            q = _probs(d_fwd(dparams, block)[:, start + j - 1], t)  # [n, vocab]
            x = jax.random.categorical(jax.random.fold_in(key, 1000 + j), jnp.log(q), axis=-1)
            block = block.at[:, start + j].set(x.astype(jnp.int32))
            qs.append(q)
        q = jnp.stack(qs, axis=1)  # [n, g, vocab]
        p = _probs(t_fwd(tparams, block)[:, start - 1 : start + g], t)  # [n, g + 1, vocab]
        x = block[:, start : start + g]  # [n, g]
        p_x = jnp.take_along_axis(p[:, :g], x[..., None], -1)[..., 0]
        q_x = jnp.take_along_axis(q, x[..., None], -1)[..., 0]
        ratio = jnp.minimum(1.0, p_x / q_x)  # q_x > 0: x was sampled from q
        print(f"\ndraft {cfg.name}")
        print("gamma  tokens/call tokenwise  block   gain     (se)")
        for gamma in range(1, g + 1):
            token = np.asarray(jnp.sum(jnp.cumprod(ratio[:, :gamma], axis=1), axis=1))
            _, h = stop_chances(
                x[:, :gamma], q[:, :gamma], p[:, : gamma + 1], jnp.full((n,), gamma, jnp.int32)
            )
            blk = np.asarray(expected_accepted(h))
            diff = blk - token
            se = diff.std(ddof=1) / np.sqrt(n)
            gain = diff.mean() / (token.mean() + 1.0)
            print(
                f"{gamma:5d}  {token.mean() + 1:20.4f}  {blk.mean() + 1:6.4f}  "
                f"{100 * gain:+6.2f} %  ({100 * se / (token.mean() + 1):.2f} %)"
            )
        if _DECODE_GAMMAS.value:
            _decode(target, tparams, draft, dparams, val, t)


def _decode(target, tparams, draft, dparams, val, temperature):
    prompts = sample_prompts(val, _DECODE_PROMPTS.value, PROMPT_LEN, seed=_SEED.value + 1).tokens
    prompts = [np.asarray(p) for p in prompts]
    new, key = _DECODE_NEW.value, jax.random.key(_SEED.value + 2)
    warper = make_warper(temperature)
    print("decoded end to end: gamma  rule       tokens/iter  ms/token")
    for gamma in map(int, _DECODE_GAMMAS.value):
        calls, results = {}, {}
        for rule in ("tokenwise", "block"):
            spec = SpeculativeDecoder(
                target, draft, gamma, warper, cache_len=256, accept=accept_rule(rule)
            )
            calls[rule] = functools.partial(spec.generate, tparams, dparams, prompts, key, new)
            results[rule] = jax.block_until_ready(calls[rule]())  # compiles
        timings = interleaved(calls, repeats=_REPEATS.value, warmup=0)
        for rule, result in results.items():
            summary = result.summary()
            ms = 1e3 * timings[rule].median / summary["tokens_emitted"]
            per_iteration = summary["sampler_tokens_per_iteration"]
            print(f"{gamma:25d}  {rule:9s}  {per_iteration:11.3f}  {ms:8.3f}")


if __name__ == "__main__":
    app.run(main)
