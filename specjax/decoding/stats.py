"""Host-side summaries of the decoding counters: α, acceptance by position, tokens/iteration.

The counters themselves (`DecodeStats`) live in the loop state and are updated on device; this
module only reads them after a call, so it is analysis, not loop code.
"""

from __future__ import annotations

import jax
import numpy as np

# The integer counters `summarize_stats` returns beside its ratios (a key a decoder's counters do
# not have is absent there, None in `raw_counts`).
RAW_COUNTS = (
    "tokens_emitted",
    "row_iterations",
    "target_calls",
    "draft_calls",
    "accepted",
    "tested",
    "drafted_histogram",
)


def raw_counts(summary: dict) -> dict:
    """The counters behind a `summarize_stats` summary's ratios, for results files whose readers
    recompute them: {name: count or None} over `RAW_COUNTS`."""
    return {k: summary.get(k) for k in RAW_COUNTS}


def summarize_stats(stats: list) -> dict:
    """α and tokens-per-iteration estimates from the counters of one or more decode calls.

    Args:
      stats: DecodeStats of calls with the same γ (counts are pooled across calls and rows).

    Returns:
      dict of call counts, tokens, and (speculative decoding) acceptance estimates.
    """
    host = [jax.device_get(s) for s in stats]
    iterations = int(sum(s.iterations.sum() for s in host))
    emitted = int(sum(s.emitted.sum() for s in host))
    out = {
        "target_calls": int(sum(s.target_calls for s in host)),
        "draft_calls": int(sum(s.draft_calls for s in host)),
        "tokens_emitted": emitted,
        "row_iterations": iterations,
        "tokens_per_iteration": emitted / max(iterations, 1),
    }
    accepted_at = np.sum([s.accepted_at for s in host], axis=0)  # [gamma]
    tested_at = np.sum([s.tested_at for s in host], axis=0)  # [gamma]
    if accepted_at.size:
        out["acceptance_by_position"] = (accepted_at / np.maximum(tested_at, 1)).tolist()
        # Acceptance events over acceptance trials: each iteration tests a row's drafts until
        # the first rejection or its last drafted token.
        accepted = int(accepted_at.sum())
        out["accepted"], out["tested"] = accepted, int(tested_at.sum())
        out["alpha_empirical"] = accepted / max(out["tested"], 1)
        # Tokens per iteration as the sampler produced them (n + 1), before EOS / budget
        # truncation of a row's last iteration: what (1 - α^{γ+1}) / (1 - α) predicts.
        out["sampler_tokens_per_iteration"] = 1.0 + accepted / max(iterations, 1)
        # P(draft i accepted | drafts 1..i-1 accepted), counting an iteration that drafted
        # fewer than i tokens (prompt lookup without a match, adaptive γ) as a rejection: the
        # positional model's rates, 1 + sum_i prod_{j<=i} of them = sampler tokens/iteration.
        # For drafters that always draft γ tokens it equals acceptance_by_position.
        before = np.concatenate([[iterations], accepted_at[:-1]])
        out["survival_by_position"] = (accepted_at / np.maximum(before, 1)).tolist()
        # Rows whose n (accepted drafts / tree depth) is >= d, for d = 0..gamma + 1.
        reached = np.concatenate([[iterations], accepted_at, [0]])
        out["accepted_depth_histogram"] = (reached[:-1] - reached[1:]).tolist()
    hists = [s.drafted_hist for s in host if getattr(s, "drafted_hist", None) is not None]
    if hists:
        hist = np.sum(hists, axis=0)  # [gamma + 1]
        # Adaptive γ: (row, iteration) pairs by tokens drafted, and their mean.
        out["drafted_histogram"] = hist.tolist()
        out["mean_gamma"] = float((hist * np.arange(hist.size)).sum() / max(hist.sum(), 1))
    ranks = [s.accepted_rank for s in host if getattr(s, "accepted_rank", None) is not None]
    if ranks:
        ranks = np.sum(ranks, axis=0)  # [depth, branch]
        # Acceptance by rank at each depth: accepted the k-th child / tested that depth.
        out["accepted_rank_by_depth"] = (ranks / np.maximum(tested_at, 1)[:, None]).tolist()
    return out
