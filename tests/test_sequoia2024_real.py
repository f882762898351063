"""The sequoia2024 pipeline on a real-target path (`configs/sequoia2024.py:smollm2`).

A tiny random Llama written as a GGUF file with a chat template (tests/gguf_writer.py) stands in
for SmolLM2; its distilled one-layer draft is trained here for a few steps (the heads mode, as
the real run trains distilled2). Checks the real path's own pieces: the chat prompts cut to one
length, the draft loaded as a model, greedy tree rows equal to autoregressive decoding, and the
report rendered from results.json. The real run's figures: experiments/sequoia2024/README.md.
"""

import json
import os

import pytest

from configs import sequoia2024 as seq_config
from experiments.common import real_drafts
from experiments.sequoia2024 import pipeline, real, report
from specjax.models import ReducedVocabLM
from tests.gguf_writer import write_tiny_chat_pair


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    path, head_dir = write_tiny_chat_pair(tmp_path_factory.mktemp("seq-real"))
    root = os.path.dirname(path)
    config = seq_config.get_config("smollm2,sizes=1/2/4,methods=chain/sequoia,gammas=1,repeats=1")
    config.pretrained = path
    config.draft_head = head_dir
    config.temperatures = (0.0,)
    config.ranks = 2
    config.rank_samples = 2
    config.reference_tokens = 4
    config.max_new_tokens = 6
    config.stats_prompts = 2
    config.walltime_prompts = 1
    config.cost_steps = 2
    config.cost_rounds = 1
    workdir = os.path.join(root, "run")
    return pipeline.run(config, workdir), config, workdir


def test_prompts_are_cut_to_the_shortest_chat_prompt(results):
    out, config, _ = results
    assert out["config"]["prompt_len"] == config.prompt_len
    assert out["target"]["name"] == config.pretrained
    assert out["draft"]["name"] == "distilled1-tiny"
    stats, wall = real.prompt_sets(config)
    assert len(stats) == 2 and len(wall) == 1 and not set(stats) & set(wall)


def test_greedy_trees_equal_autoregressive_decoding(results):
    out, _, _ = results
    rows = out["temperatures"]["0"]["tokens_per_call"]
    checked = [r for r in rows if r["n"] > 1 and "same_as" not in r]
    assert [r["n"] for r in checked if r["method"] == "chain"] == [2, 4]
    assert all(r["matches_ar"] is True for r in checked)  # the DP trees among them, if any


def test_report_renders_from_results_json(results):
    _, _, workdir = results
    with open(os.path.join(workdir, "results.json"), encoding="utf-8") as f:
        saved = json.load(f)
    text = report.format_all(saved)
    assert "distilled1-tiny" in text and "our chat prompts" in text


def test_the_draft_over_its_training_datas_frequent_tokens(results):
    """`draft_vocab=N`: the same trained draft as a ReducedVocabLM over N ids, read from its
    cached training data (a real run's data is cached; this draft's was built by the fixture)."""
    _, config, _ = results
    reduced = config.copy_and_resolve_references()
    reduced.draft_vocab = 8
    *_, draft, dparams, name = real_drafts.distilled_pair(reduced, log=lambda _: None)
    assert isinstance(draft, ReducedVocabLM) and len(draft.draft_ids) == 8
    assert name == "distilled1-tiny over 8 tokens" and dparams["columns"].shape[1] == 8
    assert seq_config.get_config("smollm2,draft_vocab=4096").draft_vocab == 4096
    reduced.draft_vocab = -8
    with pytest.raises(ValueError, match="config.draft_vocab: a draft vocabulary must hold"):
        real_drafts.distilled_pair(reduced, log=lambda _: None)


def test_the_smollm2_preset_excludes_tiny_and_zoo():
    config = seq_config.get_config("smollm2")
    with pytest.raises(ValueError, match="choose one of"):
        seq_config.get_config("smollm2,tiny")
    assert config.draft_head == "distilled2" and config.sizes == (1, 2, 4, 8, 16)
    assert config.draft_vocab == 0
