r"""Reproduce the structure of Leviathan et al. 2023's Tables 2 and 3 on our corpora.

Paper: "Fast Inference from Transformers via Speculative Decoding", ICML 2023,
https://arxiv.org/abs/2211.17192 . Results and the paper's figures beside ours:
experiments/leviathan2023/README.md.

    # The README's main job: tiny models, the embedded Python-stdlib corpus, end to end.
    python -m experiments.main --config=configs/leviathan2023.py:tiny --workdir=runs/lev-tiny
    # Full size: the model zoo of configs/train.py (trains it first if not cached; hours on CPU).
    python -m experiments.main --config=configs/leviathan2023.py --workdir=runs/lev-python
    python -m experiments.main --config=configs/leviathan2023.py:corpus=shakespeare \
        --workdir=runs/lev-shakespeare

Trained models are cached under ~/.cache/specjax/models (keyed by their training config), so a
second run only measures. Hardware: our 2-core CPU; runtimes in the README.

    # Seconds-sized models and measurements (what CI runs the notebooks with; no useful figures).
    python -m experiments.main --config=configs/leviathan2023.py:smoke --workdir=/tmp/lev-smoke

String options (comma-separated): `tiny`, `smoke`, `corpus=python|shakespeare`, `gammas=1/2/4`,
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
        int_lists=("gammas",),
        str_lists=("drafts",),
        switches=("tiny", "smoke", "compare_block"),
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
    return config


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
