r"""Token trees vs chains: tokens per target call, walltime speedup and the verification cost T(N).

Issue #14's "Measure and report": for a trained target/draft pair on the Python corpus, at t=0
and t=1, every chain γ = 1..8 and trees of 4, 8, 16 and 32 nodes (wide, spine, best-first; both
sibling rules at t=1), against autoregressive decoding of the same prompts with the same key,
timed round-robin. Results and analysis: experiments/trees/RESULTS.md.

    # Default: the leviathan2023 mini pair (0.86M target, 83K TV-distilled draft), trained in
    # ~2.5 min on 2 CPU cores if not cached (the cache is shared with leviathan2023:tiny).
    python -m experiments.main --config=configs/trees.py --workdir=runs/trees
    # Smoke test, < 1 min: seconds-trained test models, γ = 1 and one tree (wide, 4 nodes).
    python -m experiments.main --config=configs/trees.py:tiny --workdir=runs/trees-tiny
    # The trained zoo pairs of leviathan2023 (10.8M target; trains the zoo first if it is not
    # cached: ~1.5-3 h on 2 cores, see experiments/leviathan2023/README.md).
    python -m experiments.main --config=configs/trees.py:zoo --workdir=runs/trees-zoo

Hardware: our 2-core CPU; runtimes in experiments/trees/README.md.

String options (comma-separated): `tiny`, `zoo`, `gammas=1/2/4`, `sizes=4/8`,
`shapes=wide/spine`, `drafts=mini_draft`, `repeats=5`, `temperatures=0/1`.
"""

import ml_collections

from configs.options import parse_options


def _parse(arg):
    return parse_options(
        arg,
        ints=("repeats",),
        lists=("temperatures",),
        int_lists=("gammas", "sizes"),
        str_lists=("shapes", "drafts"),
        switches=("tiny", "zoo"),
    )


def get_config(arg=None) -> ml_collections.ConfigDict:
    """The trees pipeline config; see the module docstring for `arg`."""
    options = _parse(arg)
    tiny, zoo = bool(options.get("tiny")), bool(options.get("zoo"))
    if tiny and zoo:
        raise ValueError("choose one of `tiny` and `zoo`")
    config = ml_collections.ConfigDict()
    config.mode = "trees"
    config.tiny = tiny
    config.zoo = zoo
    config.corpus = "python"

    # Models, built and cached by experiments/common/models.py: the target and one pair
    # per draft. mini_* are leviathan2023's MINI_SIZES (same training config, same cache entry);
    # "<draft>_distilled" is fine-tuned towards the target with the TV objective (aimed at α).
    if tiny:
        config.target, drafts = "tiny_target", ("tiny_draft",)
    elif zoo:
        config.target, drafts = "target", ("draft_m_distilled", "draft_s")
    else:
        config.target, drafts = "mini_target", ("mini_draft_distilled",)
    config.drafts = options.get("drafts", drafts)
    # Training of the mini models: leviathan2023's values, so the cache entry is shared.
    config.mini_steps = 300
    config.mini_seq_len = 160

    config.temperatures = tuple(options.get("temperatures", (0.0, 1.0)))
    # Chains: SpeculativeDecoder with each γ.
    config.gammas = options.get("gammas", (1,) if tiny else (1, 2, 3, 4, 5, 6, 7, 8))
    # Trees: N = nodes the target scores per call, the root included (a chain of γ is N = γ + 1),
    # in each named shape of experiments/trees/shapes.py:
    #   wide   the root's N - 1 children (depth 1);
    #   spine  a rank-0 path of depth ceil((N - 1) / 2), an alternative child at its top depths;
    #   best   the N - 1 nodes most likely to be reached under `rank_prior` (best-first, the
    #          optimum of Sequoia's positional acceptance model for that prior).
    config.sizes = options.get("sizes", (4,) if tiny else (4, 8, 16, 32))
    config.shapes = options.get("shapes", ("wide",) if tiny else ("wide", "spine", "best"))
    # Further trees as TokenTree.parse strings ("3/2/1": branching per depth; 16 nodes).
    config.extra_trees = () if tiny else ("3/2/1",)
    # Sizes at which the chain also runs as a tree (TreeSpeculativeDecoder with TokenTree.chain):
    # same proposals as the chain decoder, so the difference is the tree machinery's cost.
    config.chain_trees = (2,) if tiny else (4, 8)
    # P(the child of rank r is the one accepted | its parent was reached), for `best`.
    config.rank_prior = (0.75, 0.12, 0.05, 0.03, 0.02, 0.01)
    # Sibling rules at t > 0 (at t = 0 children are the draft's top-k, which both rules verify
    # alike): False = Sequoia (without replacement), True = SpecInfer (with replacement).
    config.replacement = (False, True)

    # Walltime: prompts of the validation split decoded at batch 1, one call after another;
    # every decoder of a temperature is timed in each round (round-robin), medians over rounds.
    config.walltime_prompts = 2 if tiny else 4
    config.prompt_len = 8 if tiny else 32
    config.max_new_tokens = 16 if tiny else 128
    config.repeats = int(options.get("repeats", 1 if tiny else 7))
    # Tokens per target call are counted on more prompts (same bucket: no new programs).
    config.stats_prompts = 2 if tiny else 16
    config.cache_len = 64 if tiny else 256

    # T(N): calls per timed device loop, cached context before the call, timed loops per
    # round, and rounds (every T is measured once per round: round-robin against drift).
    config.cost_steps = 2 if tiny else 64
    config.cost_context = 16 if tiny else 64
    config.cost_repeats = 1 if tiny else 3
    config.cost_rounds = 1 if tiny else 5
    config.seed = 0
    return config
