"""Sampled statistics of the token stream of chained verification calls on a `PrefixCase`.

`sample_stream` runs, for each of `num_samples` independent keys (vmap over keys, `lax.map` over
chunks, one jit per (rule, case shape)), a decoder on the case's prefix-dependent tables: every
call drafts γ tokens from r given the emitted stream so far (float32 inverse CDF), gathers the
p and q rows of the drafted contexts, calls the rule (`speculative_accept`'s signature, batch
of one row; `num_drafted` passed for ragged cases) and appends what it emits; `length` calls
always suffice (each emits >= 1 token). The checks compare the emitted stream with the exact
target law of `specjax.testing.law`: chi-square of the joint of the first `length` tokens (>= 3:
a rule can be exact for two tokens and wrong from the third), of each position's marginal, and of
the first call's number of accepted drafts against a rule's exact law (`first_call_law`).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from specjax.testing import law
from specjax.testing.law import PrefixCase
from specjax.testing.stats import Chi2, pooled_chi2

# 2^20 = 1,048,576 >= 1e6 samples per case, in chunks of 65,536 keys.
NUM_SAMPLES = 1 << 20
CHUNK = 1 << 16


@dataclasses.dataclass(frozen=True)
class StreamSamples:
    """Attributes: streams int [N, length] the first emitted tokens; first_n int [N] drafts the
    first call accepted; first_call int [N, gamma + 1] the first call's tokens."""

    streams: np.ndarray
    first_n: np.ndarray
    first_call: np.ndarray


@functools.partial(
    jax.jit,
    static_argnames=(
        "accept_fn",
        "gamma",
        "length",
        "deterministic",
        "pass_drafted",
        "num_chunks",
        "chunk",
        "positional",
    ),
)
def _sample(
    key,
    target,
    draft,
    cdf,
    ragged,
    params,
    *,
    accept_fn,
    gamma,
    length,
    deterministic,
    pass_drafted,
    num_chunks,
    chunk,
    positional=False,
):
    vocab = target.shape[-1]
    # Row offsets of the contexts of each length (unused, and too large, by position-only cases).
    sizes = range(length + gamma + 1)
    offsets = jnp.asarray([0 if positional else law.offset(n, vocab) for n in sizes])

    def call(key, buf, ell):
        k_draft, k_accept = jax.random.split(key)
        ctx_len = jnp.minimum(ell, length - 1)  # calls after the stream is full are discarded
        j = jnp.arange(length)
        weights = jnp.where(j < ctx_len, vocab ** jnp.maximum(ctx_len - 1 - j, 0), 0)
        code = jnp.sum(buf * weights)  # the emitted context as a base-vocab number
        u = jax.random.uniform(k_draft, (gamma,))
        rows, drafts, cur = [], [], code
        for i in range(gamma + 1):
            # A position-only case (`law.PositionCase`) has one row per position.
            rows.append(ctx_len + i if positional else offsets[ctx_len + i] + cur)
            if i < gamma:  # inverse CDF: the number of CDF entries <= u is the drafted token
                token = jnp.sum(u[i] >= cdf[rows[-1]]).astype(jnp.int32)
                drafts.append(token)
                cur = cur * vocab + token
        rows = jnp.stack(rows)  # [gamma + 1]
        p_rows = target[rows][None]  # [1, gamma + 1, vocab]
        q_rows = None if deterministic else draft[rows[:gamma]][None]  # [1, gamma, vocab]
        kwargs = {}
        if pass_drafted:  # traced `ragged`: one program serves ragged and full cases
            row = offsets[ctx_len] + code  # as law.PrefixCase.num_drafted
            drafted = jnp.where(ragged, (row + 1) % (gamma + 1), gamma).astype(jnp.int32)
            kwargs["num_drafted"] = drafted[None]
        drafts = jnp.stack(drafts)[None]  # [1, gamma]
        tokens, n = accept_fn(k_accept, drafts, q_rows, p_rows, *params, **kwargs)
        return tokens[0], n[0]

    def one(key):
        def body(carry, key):
            buf, ell = carry
            tokens, n = call(key, buf, ell)
            for i in range(gamma + 1):  # append tokens[:n + 1], as far as the stream reaches
                pos = jnp.minimum(ell + i, length - 1)
                write = (i <= n) & (ell + i < length)
                buf = buf.at[pos].set(jnp.where(write, tokens[i], buf[pos]))
            return (buf, ell + n + 1), (n, tokens)

        init = (jnp.zeros((length,), jnp.int32), jnp.zeros((), jnp.int32))
        (buf, _), (n, tokens) = jax.lax.scan(body, init, jax.random.split(key, length))
        return buf, n[0], tokens[0]

    def run_chunk(key):
        return jax.vmap(one)(jax.random.split(key, chunk))

    streams, n, first = jax.lax.map(run_chunk, jax.random.split(key, num_chunks))
    return streams.reshape(-1, length), n.reshape(-1), first.reshape(-1, gamma + 1)


def sample_stream(
    case: PrefixCase | law.PositionCase,
    accept_fn,
    seed: int,
    *,
    params: tuple = (),
    pass_drafted: bool = True,
    num_samples: int = NUM_SAMPLES,
    chunk: int = CHUNK,
) -> StreamSamples:
    """Runs chained calls of `accept_fn` on `num_samples` independent keys (see module doc).

    Args:
      case: the tables (a `PrefixCase`, or a position-only `law.PositionCase`).
      accept_fn: `speculative_accept`'s signature, called as accept_fn(key, drafts [1, gamma],
        q [1, gamma, vocab] | None, p [1, gamma + 1, vocab], *params, num_drafted=[1]).
      seed: fixed seed.
      params: traced extra positional arguments of the rule (a bug switch, a lenience): rules
        that differ only in them share one compiled program.
      pass_drafted: pass `num_drafted` (d = gamma unless the case is ragged) on every call, so
        ragged and full cases share a program; False for rules without that argument.
      num_samples: number of independent streams.
      chunk: keys vmapped at once (bounds memory); min(chunk, num_samples) must divide
        num_samples.
    """
    chunk = min(chunk, num_samples)
    if num_samples % chunk:
        raise ValueError(f"num_samples must be a multiple of {chunk}; got {num_samples}")
    if case.ragged and not pass_drafted:
        raise ValueError(f"{case.name} is ragged: the rule must be passed num_drafted")
    draft = case.draft if case.draft is not None else case.target[:0]
    streams, n, first = _sample(
        jax.random.key(seed),
        jnp.asarray(case.target),
        jnp.asarray(draft),
        jnp.asarray(law.draft_cdf(case.draft_dist)),
        jnp.asarray(case.ragged),
        tuple(jnp.asarray(x) for x in params),
        accept_fn=accept_fn,
        gamma=case.gamma,
        length=case.length,
        deterministic=case.draft is None,
        pass_drafted=pass_drafted,
        num_chunks=num_samples // chunk,
        chunk=chunk,
        positional=case.positional,
    )
    return StreamSamples(np.asarray(streams), np.asarray(n), np.asarray(first))


def _counts(streams: np.ndarray, vocab: int) -> np.ndarray:
    k = streams.shape[1]
    flat = np.ravel_multi_index(tuple(streams.T), (vocab,) * k)
    return np.bincount(flat, minlength=vocab**k).reshape((vocab,) * k)


def joint_chi2(case: PrefixCase, samples: StreamSamples, k: int | None = None) -> Chi2:
    """Chi-square of the first k (default: all `length`) emitted tokens against the target."""
    k = case.length if k is None else k
    target = law.prefix_law(law.target_law(case), k)
    return pooled_chi2(_counts(samples.streams[:, :k], case.vocab), target)


def marginal_chi2(case: PrefixCase, samples: StreamSamples, position: int) -> Chi2:
    """Chi-square of the token at 0-based `position` against the target's marginal there."""
    target = law.marginal(law.target_law(case), position)
    return pooled_chi2(np.bincount(samples.streams[:, position], minlength=case.vocab), target)


def first_n_chi2(case: PrefixCase, samples: StreamSamples, rule: law.RuleLaw) -> Chi2:
    """Chi-square of the first call's number of accepted drafts against `rule`'s exact law."""
    n_law = law.first_call_law(case, rule).sum(-1)  # [gamma + 1]
    return pooled_chi2(np.bincount(samples.first_n, minlength=case.gamma + 1), n_law)


def stream_checks(case: PrefixCase, samples: StreamSamples) -> dict[str, Chi2]:
    """name -> Chi2 of every stream check: the joint, then each position's marginal."""
    out = {"joint": joint_chi2(case, samples)}
    for t in range(case.length):
        out[f"token{t + 1}"] = marginal_chi2(case, samples, t)
    return out


def noncentrality(case: PrefixCase, stream: np.ndarray, num_samples: int = NUM_SAMPLES) -> float:
    """lambda = N sum (f - p)^2 / p of the joint chi-square when the stream follows `stream`."""
    target = law.target_law(case).ravel()
    f = stream.ravel()
    keep = target > 0
    return float(num_samples * np.sum((f[keep] - target[keep]) ** 2 / target[keep]))
