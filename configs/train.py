r"""Train mode: the model zoo (a target and three drafts per corpus) and draft distillation.

Launch from the repository root (CPU; `runs/` is git-ignored):

    python -m experiments.main --config=configs/train.py:model=target --workdir=runs/target-python

Every run resumes from its latest checkpoint when started again with the same workdir, and
exports its final parameters to `~/.cache/specjax/models/<name>-<fingerprint>` ($SPECJAX_CACHE
overrides the root), where later experiments load them (`experiments/zoo.py`).
`scripts/train_zoo.sh` trains the whole zoo in the order below.

Zoo, seq_len 256, batch 16, the same batches for every model (data seed 0). Times are
wall-clock training time on our 2-core AMD EPYC, mostly while other jobs shared it (load 2-6), so
an idle machine should be somewhat faster; bits/byte on 512 validation windows spread evenly over
the split (131k tokens). α is the target's acceptance rate for the draft at temperature 0 / 1 on
those validation windows (`scripts/zoo_alpha.py`; the Leviathan pipeline measures it again on
target-generated text).

Python corpus (stdlib source; 8.3 M training tokens):

| model (option)                         | params | steps | min  | bits/byte | α t=0 | α t=1 |
|----------------------------------------|--------|-------|------|-----------|-------|-------|
| model=target                           | 10.8 M | 600   | 58.3 | 2.702     |       |       |
| model=draft_l                          | 1.01 M | 600   | 14.5 | 2.815     | .732  | .816  |
| model=draft_m                          | 0.46 M | 600   | 7.8  | 2.753     | .726  | .803  |
| model=draft_s                          | 0.13 M | 600   | 2.1  | 3.145     | .619  | .732  |
| model=draft_m,distill=target,init=data | 0.46 M | +200  | +4.2 | 2.815     | .811  | .870  |
| bigram (fitted with any run)           | table  | —     | —    | —         | .502  | .603  |
| unigram                                | table  | —     | —    | —         | .345  | .398  |

Shakespeare corpus (`corpus=shakespeare`; 8.5 M training tokens):

| model (option)                         | params | steps | min  | bits/byte | α t=0 | α t=1 |
|----------------------------------------|--------|-------|------|-----------|-------|-------|
| model=target                           | 10.8 M | 600   | 42.7 | 3.221     |       |       |
| model=draft_l                          | 1.01 M | 600   | 14.6 | 3.197     | .769  | .841  |
| model=draft_m                          | 0.46 M | 600   | 2.8  | 3.065     | .707  | .795  |
| model=draft_s                          | 0.13 M | 600   | 2.3  | 3.467     | .694  | .799  |
| model=draft_m,distill=target,init=data | 0.46 M | +200  | +4.0 | 3.227     | .864  | .912  |
| bigram                                 | table  | —     | —    | —         | .617  | .730  |
| unigram                                | table  | —     | —    | —         | .301  | .456  |

(The Shakespeare target's export records 52.7 min: it includes 10 min during which the process
was stopped with SIGSTOP for benchmarks; draft_m's 2.8 min ran on an idle machine.)

At 600 steps the 10.8M target is undertrained: on Shakespeare a 0.46M draft fits the text
better (3.07 vs 3.22 bits/byte), on Python it is only slightly ahead (2.70 vs 2.75). Larger models
need more tokens than this CPU budget gives them; α measures agreement with the target, which is
what speculative decoding needs, whatever the target's quality.

The distilled draft (total-variation objective, i.e. aimed at α, fine-tuning the data-trained
draft_m for 200 more steps) beats every data-trained draft, draft_l included, at both
temperatures, while its bits/byte on the data gets worse: it models the target, not the text.

Each row's command: `python -m experiments.main --config=configs/train.py:<option>
--workdir=runs/<name>` with <name> as `config.name` (e.g. draft_m-distill_tv_ft-python); add
`,corpus=shakespeare` for the Shakespeare zoo (run `python scripts/fetch_shakespeare.py` first).

String options after the colon (comma-separated, big_vision style):
    model=target         a size of specjax.training.zoo.MODEL_SIZES (target, draft_l, draft_m,
                         draft_s, tiny_target, tiny_draft)
    corpus=python        python | shakespeare
    steps=600            training steps
    family=gpt2          gpt2 | llama
    distill=target       distil from that size's exported run on the same corpus (train it first)
    objective=tv         distillation loss: tv | kl | tv_kl | greedy (specjax/training/distill.py)
    init=data            with distill: start from the same-size draft trained on data (train it
                         first) and fine-tune for steps=200 by default, instead of from scratch
    tiny                 seconds-long smoke/test settings (short windows, few steps)
Any field can also be set with `--config.<field>=...` flags.
"""

import ml_collections

from configs.options import parse_options
from specjax.training import zoo

# Steps of each size: the target's fill about an hour of our CPU; drafts see the same batches.
_STEPS = {"target": 600, "draft_l": 600, "draft_m": 600, "draft_s": 600}
# Peak learning rate of each size, from 60-step probes on the python corpus (training loss at
# step 60, same batches): target 5e-4: 2.62, 7.5e-4: 2.61, 1.5e-3: 2.70, 3e-3: 2.79;
# draft_l 1.5e-3: 2.68, 3e-3: 2.75; draft_m 5e-4: 2.94, 1e-3: 2.70, 3e-3: 2.67. Wider and
# deeper models want smaller steps (as muP predicts); draft_s was not probed.
_PEAK_LR = {"target": 7.5e-4, "draft_l": 1.5e-3, "draft_m": 3e-3, "draft_s": 3e-3}

_STR_OPTIONS = ("model", "corpus", "family", "distill", "objective", "init")
_INT_OPTIONS = ("steps",)
_SWITCHES = ("tiny",)


def _parse_arg(arg: str | None) -> dict:
    """Parses "k=v,k2=v2,switch" into a dict (switches map to True)."""
    return parse_options(arg, ints=_INT_OPTIONS, strs=_STR_OPTIONS, switches=_SWITCHES)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """Returns the train-mode config; `arg` holds the string options of the module docstring."""
    options = _parse_arg(arg)
    size = options.get("model", "target")
    tiny = options.get("tiny", False) or size.startswith("tiny")
    config = ml_collections.ConfigDict()
    config.mode = "train"

    # The model: a named size (its fields spelled out below, so flags can change any of them).
    config.model = ml_collections.ConfigDict()
    config.model.size = size
    config.model.family = options.get("family", "gpt2")
    for key, value in zoo.size_fields(size).items():
        config.model[key] = value
    # Longest sequence: the learned position table; also the longest KV cache in decoding.
    config.model.max_len = 64 if tiny else 256

    # Data: deterministic batches, a pure function of (seed, step).
    config.data = ml_collections.ConfigDict()
    config.data.corpus = options.get("corpus", "python")
    # Corpus location override ("" = the corpus default: stdlib / ~/.cache/specjax).
    config.data.data_dir = ""
    config.data.seq_len = 32 if tiny else 256
    config.data.batch_size = 4 if tiny else 16
    config.data.seed = 0

    # AdamW, linear warm-up then cosine decay to end_lr_fraction * peak_lr.
    config.optim = ml_collections.ConfigDict()
    config.optim.peak_lr = _PEAK_LR.get(size, 3e-3)
    config.optim.warmup_steps = 5 if tiny else 30
    config.optim.end_lr_fraction = 0.1
    config.optim.weight_decay = 0.1
    config.optim.clip_norm = 1.0
    config.optim.b1 = 0.9
    config.optim.b2 = 0.95

    default_steps = 20 if tiny else _STEPS.get(size, 600)
    if options.get("init"):  # a fine-tune of a trained draft: a third of its steps
        default_steps = max(default_steps // 3, 1)
    config.num_steps = options.get("steps", default_steps)
    # Parameter initialisation seed.
    config.seed = 0

    # Distillation from a frozen target: "" (off), an exported model directory, or the name of a
    # directory under the model cache (what `distill=<size>` sets).
    config.distill = ml_collections.ConfigDict()
    config.distill.target = ""
    config.distill.objective = options.get("objective", "tv")
    # Temperature of both models in the tv / kl objectives.
    config.distill.temperature = 1.0
    # Weight of KL in the "tv_kl" objective.
    config.distill.kl_weight = 0.1
    if "distill" in options:
        config.distill.target = _cache_name(options["distill"], config.data.corpus, tiny)
        # Only present when set, so the fingerprints of runs without it stay as they were.
        init = options.get("init", "")
        if init not in ("", "data"):
            raise ValueError(f"init must be 'data' (or absent), got {init!r}")
        if init:
            config.distill.init = _cache_name(size, config.data.corpus, tiny)
    elif "init" in options:
        raise ValueError("init=data needs distill=<target size>: it sets a distillation's start")

    # Logging, evaluation and checkpoints (none of these change the trained weights).
    config.log_every = 5 if tiny else 10
    config.eval_every = 10 if tiny else 120
    # Validation windows (evenly spread over the split) in periodic evals and the final eval
    # (0 = the whole split). 512 windows are 131k tokens: 27% of python's validation split, 12%
    # of shakespeare's; the whole split would cost the target ~10 min of CPU per evaluation.
    config.eval_windows = 4 if tiny else 64
    config.final_eval_windows = 8 if tiny else 512
    config.eval_batch_size = 4 if tiny else 16
    # Windows for the distillation evals' alpha (0 = the same as the eval).
    config.alpha_windows = 4 if tiny else 64
    config.checkpoint_every = 5 if tiny else 40
    config.keep_checkpoints = 3
    config.async_checkpoints = True
    # Export final params to the model cache; fit unigram/bigram tables next to the checkpoints.
    config.export = not tiny
    config.ngrams = not tiny
    # Stop (after saving) at this step, as if interrupted; 0 = run to num_steps. For tests.
    config.stop_at_step = 0

    suffix = ""
    if config.distill.target:
        suffix = f"-distill_{config.distill.objective}"
        if config.distill.get("init"):
            suffix += "_ft"
    config.name = f"{size}{suffix}-{config.data.corpus}"
    if config.model.family != "gpt2":
        config.name += f"-{config.model.family}"
    return config


def _cache_name(size: str, corpus: str, tiny: bool) -> str:
    """The model-cache directory name of the data-trained `size` on `corpus`."""
    config = get_config(f"model={size},corpus={corpus}" + (",tiny" if tiny else ""))
    return zoo.model_cache_name(config.to_dict())
