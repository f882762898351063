"""A plain-Python beam search, written independently of specjax/decoding/decoders/beam.py.

It recomputes every hypothesis' next-token distribution from the whole sequence (no caches),
keeps candidates as Python tuples in float64, and never stops early: it runs every row to
max_new_tokens, so it also checks that beam.py's early stopping changes nothing.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np


def full_logp(model, params, width: int):
    """A function tokens -> float64 log-probabilities [vocab] of the token after them."""

    @jax.jit
    def logits_at_end(tokens, length):
        state = model.init_state(1, width)
        logits, _ = model.apply(params, state, tokens[None], length[None])
        return logits[0, length - 1]

    def logp(tokens):
        padded = np.zeros((width,), np.int32)
        padded[: len(tokens)] = tokens
        x = np.asarray(logits_at_end(jnp.asarray(padded), jnp.int32(len(tokens))), np.float64)
        return x - np.logaddexp.reduce(x)

    return functools.lru_cache(maxsize=None)(lambda toks: logp(list(toks)))


def beam_search(logp, prompt, num_beams, length_penalty, eos_id, max_new_tokens):
    """Best-first finished hypotheses [(score, generated tokens)] of one prompt.

    Args:
      logp: tuple of tokens -> float64 [vocab] next-token log-probabilities.
      prompt: the prompt's tokens.
      num_beams, length_penalty, eos_id (None: no EOS), max_new_tokens: as BeamSearchDecoder's.
    """
    prompt = tuple(int(t) for t in prompt)
    live = [((), 0.0)]
    finished = []
    for n in range(1, max_new_tokens + 1):
        cands = []
        for i, (toks, s) in enumerate(live):
            lp = logp(prompt + toks)
            cands += [(s + lp[t], i, t) for t in range(len(lp))]
        cands.sort(key=lambda c: (-c[0], c[1], c[2]))
        new_live = []
        for rank, (s, i, t) in enumerate(cands[: 2 * num_beams]):
            if t == eos_id:
                if rank < num_beams:
                    finished.append((s / n**length_penalty, live[i][0] + (t,)))
            elif len(new_live) < num_beams:
                new_live.append((live[i][0] + (t,), s))
        live = new_live
        if n == max_new_tokens:
            finished += [(s / n**length_penalty, toks) for toks, s in live]
        finished = sorted(finished, key=lambda f: -f[0])[:num_beams]
    return finished
