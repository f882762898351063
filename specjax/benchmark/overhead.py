"""Where a speculative iteration's time goes: its model calls, and the pieces around them.

`ovh` = I_spec − T_target(γ+1) − γ·T_draft is what an iteration costs beyond its model calls
(`iteration_cost` minus `call_cost`s, all measured inside a device loop). `overhead_breakdown`
measures it and then times, each alone in its own device loop and at the decoder's shapes, the
pieces that make it up: the warper over the target's γ+1 rows (or, greedy, their argmax),
each draft step's draw (token and q), the acceptance rule, `emit` (the sequence-buffer update),
the statistics update and the NaN scans. The pieces are timed in isolation, so they do not add
up exactly to `ovh` (fusion across pieces, and per-op costs of the loop itself, are what is
left over).
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax.benchmark.costs import call_runner, iteration_runner, loop_start
from specjax.benchmark.timing import (
    coefficient_of_variation,
    interleaved,
    mean_interval,
    time_call,
)
from specjax.checks import check_count
from specjax.decoding import AutoregressiveDecoder, Proposal, arguments, loop
from specjax.decoding.argmax import has_nan
from specjax.decoding.state import emit


@functools.partial(jax.jit, static_argnums=(0, 2))
def _repeat_piece(piece, args, steps):
    """Runs `piece(i, *args)` `steps` times in a `fori_loop`, summing its scalar outputs."""

    def body(i, acc):
        return acc + piece(i, *args).astype(jnp.float32)

    return jax.lax.fori_loop(0, steps, body, jnp.zeros((), jnp.float32))


def piece_cost(piece, args, *, steps: int = 64, repeats: int = 5, clock=time.perf_counter) -> float:
    """Median seconds of one `piece(i, *args)` (a scalar) run inside a device loop.

    Args:
      piece: hashable function (i int32 [], *args) -> a scalar; it must use `i` (a key, a token)
        so the loop cannot hoist it.
      args: tuple of arrays.
      steps: calls per timed loop.
      repeats: timed loops.
      clock: wall time (default) or `time.process_time` (see `timing.time_call`).
    """
    check_count("steps", steps)  # the time per call divides by it
    t = time_call(lambda: _repeat_piece(piece, args, steps), repeats=repeats, clock=clock)
    return t.median / steps


def _pieces(decoder, s: loop.LoopState, model_draft: bool) -> dict:
    """name -> (piece, args, times per iteration) at the decoder's shapes, each as the decoder
    computes it (a greedy decoder whose rule has a point-mass outcome reads tokens off the
    logits: `SpeculativeDecoder.point_mass_accept`)."""
    batch = s.seq.tokens.shape[0]
    gamma, vocab, warper = decoder.gamma, decoder.vocab_size, decoder.warper
    point_mass = getattr(decoder, "point_mass_accept", None)
    key = jax.random.PRNGKey(1)
    logits_t = jax.random.normal(key, (batch, gamma + 1, vocab))  # [batch, gamma + 1, vocab]
    logits_d = jax.random.normal(jax.random.fold_in(key, 1), (batch, vocab))  # [batch, vocab]
    draft_tokens = jax.random.randint(key, (batch, gamma), 0, vocab)  # [batch, gamma]
    q = None
    # A greedy ModelDrafter's q is its tokens (probs None); an adaptive draft still builds q.
    if model_draft and (not warper.ends_greedy or decoder.gamma_policy is not None):
        q = warper.probs(jax.random.normal(key, (batch, gamma, vocab)))
    p = warper.probs(logits_t)
    out = jnp.concatenate([draft_tokens, draft_tokens[:, :1]], axis=1)  # [batch, gamma + 1]
    n = jnp.full((batch,), gamma // 2, jnp.int32)
    active = ~s.seq.done

    def target_warp(i, logits):
        return decoder.warper.probs(logits + i.astype(jnp.float32))[:, -1, 0].sum()

    def target_argmax(i, logits):
        return decoder.warper.greedy_tokens(logits + i.astype(jnp.float32), no_mass=-1).sum()

    def draft_draw(i, logits):
        token, probs = warper.draw(jax.random.fold_in(key, i), logits + i.astype(jnp.float32))
        return token.sum() + (0 if warper.ends_greedy else probs[:, 0].sum())

    def accept(i, tokens, q, p):
        t, m = decoder.accept(
            jax.random.fold_in(key, i), (tokens + i) % vocab, q, p, fill_value=0, num_drafted=None
        )
        return t.sum() + m.sum()

    def accept_point_mass(i, tokens, target_tokens):
        t, m = point_mass((tokens + i) % vocab, target_tokens, fill_value=0, num_drafted=None)
        return t.sum() + m.sum()

    def emit_piece(i, seq, out, n):
        seq2, count = emit(seq, (out + i) % vocab, n + 1, s.eos_id, s.max_new_tokens)
        return seq2.tokens[:, 0].sum() + count.sum()

    def stats_piece(i, stats, tokens, q, logits, n):
        proposal = Proposal(tokens, q, None, None, calls=gamma)
        new = decoder._count(stats, proposal, logits, (n + i) % gamma, None, n + 1, active)
        return sum(jnp.sum(x) for x in jax.tree.leaves(new))

    def nan_scan(i, logits, q):
        nan = has_nan(logits + i.astype(jnp.float32)).any(axis=1)
        if q is not None:
            nan = nan | has_nan(q).any(axis=1)
        return nan.sum()

    if point_mass is None:
        pieces = {
            "target warp (γ+1 rows)": (target_warp, (logits_t,), 1),
            "acceptance rule": (accept, (draft_tokens, q, p), 1),
        }
    else:
        target_tokens = warper.greedy_tokens(logits_t, no_mass=-1)  # [batch, gamma + 1]
        pieces = {
            "target argmax (γ+1 rows)": (target_argmax, (logits_t,), 1),
            "acceptance rule (point mass)": (accept_point_mass, (draft_tokens, target_tokens), 1),
        }
    pieces.update(
        {
            "emit (sequence buffer)": (emit_piece, (s.seq, out, n), 1),
            "statistics update": (stats_piece, (s.stats, draft_tokens, q, logits_t, n), 1),
            "NaN scans": (nan_scan, (logits_t, q), 1),
        }
    )
    if model_draft:
        pieces["draft draw (per step)"] = (draft_draw, (logits_d,), gamma)
    return pieces


def overhead_breakdown(
    decoder,
    params: tuple,
    prompts,
    *,
    context: int = 64,
    steps: int = 32,
    repeats: int = 7,
    clock=time.perf_counter,
    pieces: bool = True,
) -> dict:
    """One speculative iteration's cost: model calls, `ovh`, and its pieces (seconds).

    The iteration and the model calls are timed round-robin (`timing.interleaved`), and `ovh`
    is computed per round (I − T(γ+1) − γ·T_draft of the same round) before taking the median,
    so drift and other processes' load hit all four alike.

    Args:
      decoder: a `SpeculativeDecoder` (a model draft or an n-gram table behind a ModelDrafter).
      params: (target_params, draft_params).
      prompts: the prompts the iterations continue (batch = len(prompts)).
      context: cached tokens before the timed model calls (at most cache_len − γ − 1).
      steps: iterations (or calls) per timed device loop.
      repeats: timed rounds.
      clock: wall time (default) or `time.process_time` (see `timing.time_call`).
      pieces: also time the pieces of `ovh` (each in its own loop; False: skip them).

    Returns:
      dict with "iteration", "t_verify" (T_target(γ+1)), "t_target_1", "t_draft" (one draft
      step, 0 for a draft without calls), "calls" (T(γ+1) + γ·T_draft), "ovh" (iteration −
      calls, median over rounds), "ovh_share" (ovh / T_target(1), median over rounds),
      "ovh_share_mean" (its mean over rounds), "ovh_share_interval" (95 % interval of that
      mean, Student's t; a few slow rounds put the median below it), "cv" (coefficient of
      variation of T_target(1) over rounds), "ar_iteration" (the
      autoregressive decoder's iteration with the same target and warper), "ar_ratio" (that over
      T_target(1), median over rounds) and "pieces": name -> seconds per
      iteration (piece cost × times it runs).
    """
    check_count("context", context, low=0)  # clipped below from above only
    check_count("steps", steps)
    check_count("repeats", repeats)
    target_params, draft_params = params
    gamma, batch, cache_len = decoder.gamma, len(prompts), decoder.cache_len
    draft = decoder.drafter.model
    model_draft = hasattr(draft, "apply") and draft is not decoder.drafter
    params = arguments.check_decoder_params(decoder, tuple(params))
    context = min(context, cache_len - gamma - 1)  # the verification must fit behind it
    # Each timed loop owns its state (donated to every run: `costs.call_runner`).
    shape = dict(batch=batch, context=context, cache_len=cache_len, steps=steps)
    ar = AutoregressiveDecoder(decoder.target, decoder.warper, cache_len=cache_len)
    calls = {
        "iteration": iteration_runner(decoder, params, prompts, steps=steps),
        "ar_iteration": iteration_runner(ar, (target_params,), prompts, steps=steps),
        "t_target_1": call_runner(decoder.target, target_params, 1, **shape),
        "t_verify": call_runner(decoder.target, target_params, gamma + 1, **shape),
    }
    if model_draft:
        calls["t_draft"] = call_runner(draft, draft_params, 1, **shape)
    timed = interleaved(calls, repeats=repeats, clock=clock)
    per = {n: np.asarray(t.samples) / steps for n, t in timed.items()}  # [repeats] each
    t_draft = per.get("t_draft", np.zeros(repeats))
    ovh = per["iteration"] - per["t_verify"] - gamma * t_draft  # [repeats]
    med = {n: float(np.median(v)) for n, v in per.items()}
    parts = {}
    if pieces:
        parts = {
            name: times * piece_cost(piece, args, repeats=repeats, clock=clock)
            for name, (piece, args, times) in _pieces(
                decoder, loop_start(decoder, params, prompts), model_draft
            ).items()
        }
    share = ovh / per["t_target_1"]  # [repeats]
    return {
        "iteration": med["iteration"],
        "t_verify": med["t_verify"],
        "t_target_1": med["t_target_1"],
        "t_draft": med.get("t_draft", 0.0),
        "calls": med["t_verify"] + gamma * med.get("t_draft", 0.0),
        "ovh": float(np.median(ovh)),
        "ovh_share": float(np.median(share)),
        "ovh_share_mean": float(np.mean(share)),
        "ovh_share_interval": mean_interval(share),
        "cv": coefficient_of_variation(per["t_target_1"]),
        "ar_iteration": med["ar_iteration"],
        "ar_ratio": float(np.median(per["ar_iteration"] / per["t_target_1"])),
        "pieces": parts,
    }
