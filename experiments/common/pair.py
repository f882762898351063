"""Which pair a demo run decodes with (trained or random weights), and why it shows no speedup.

The generate mode (experiments/generate/) and scripts/bench_decoding.py both run the tiny
pipeline's trained pair when it is cached, else random weights with one line that says why
and how to get the pair: `tiny_pair`. When speculation was not faster, both say why in one
line: `why_no_speedup`.
"""

from __future__ import annotations

import os

from experiments import zoo

WEIGHTS = ("auto", "trained", "random")


def tiny_pair(
    weights: str, *, need_draft: bool = True, option: str = "--config.weights"
) -> tuple[dict | None, str | None]:
    """The tiny pipeline's trained target (and distilled draft), as `weights` allows.

    Args:
      weights: "auto": the pair when cached, else None and a note; "trained": the pair, or an
        error; "random": None (random weights asked for, no note).
      need_draft: whether the distilled draft is needed (a transformer draft) besides the target.
      option: how the caller's users set `weights` ("--config.weights", "--weights"), for the
        messages.

    Returns:
      ({"target": dir, "draft": dir or None}, None) when the pair is cached and allowed;
      (None, note) when "auto" falls back to random weights (`note`: one line for the user);
      (None, None) for "random".

    Raises:
      ValueError: an unknown `weights`.
      FileNotFoundError: weights="trained" and the pair is not cached (naming `option`).
    """
    if weights not in WEIGHTS:
        raise ValueError(f"{option.lstrip('-')} must be one of {WEIGHTS}, got {weights!r}")
    if weights == "random":
        return None, None
    dirs = zoo.tiny_pair_model_dirs()
    needed = ["target"] + (["draft"] if need_draft else [])
    missing = [name for name in needed if not os.path.isdir(dirs[name])]
    if missing:
        where = os.path.dirname(dirs["target"])
        models = " and ".join(missing)
        what = f"the tiny pipeline's trained {models} are not in the model cache {where}"
        if weights == "trained":
            raise FileNotFoundError(
                f"{option.lstrip('-')}='trained': {what}; train them once (~7 min on a 2-core "
                f"CPU) with `{zoo.TINY_PIPELINE}`, or set {option}=auto"
            )
        note = (
            f"note: random weights, so the draft agrees with the target by chance only (no "
            f"speedup to expect): {what}. Run `{zoo.TINY_PIPELINE}` once (~7 min on a 2-core CPU) "
            f"and this run uses them ({option}=random silences this)."
        )
        return None, note
    return {"target": dirs["target"], "draft": dirs["draft"] if need_draft else None}, None


def why_no_speedup(
    speedup: float | None, alpha: float, *, random_weights: bool, self_draft: str | None = None
) -> str | None:
    """One line on why speculation was not faster, or None when it was (or was not measured).

    Args:
      speedup: AR time per token over the speculative decoder's (None: not measured).
      alpha: the measured acceptance rate.
      random_weights: the target or the draft had random weights.
      self_draft: when the draft is the target itself, how the user asked for it ("draft=self").
    """
    if speedup is None or speedup >= 1.0:
        return None
    if self_draft is not None:
        why = (
            f"{self_draft} drafts with the target itself (α = 1 but every draft costs a target "
            "call)"
        )
    elif random_weights:
        why = (
            f"the models are random, so the draft agrees with the target by chance only "
            f"(α = {alpha:.2f}); the tiny pipeline's trained pair shows the method"
        )
    else:
        why = (
            f"α = {alpha:.2f} does not pay for the draft calls and the wider verification on "
            "this machine (python -m experiments.main --config=configs/theory.py shows what α "
            "and c need)"
        )
    return f"why no speedup: {why}."
