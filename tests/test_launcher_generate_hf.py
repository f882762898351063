"""generate mode with local Hugging Face checkpoints: --hf_checkpoint / --draft_hf_checkpoint.

Skipped unless the `[hf]` extra (torch, transformers >= 5) is installed. The checkpoints are
tiny random GPT-2 models with a word-level tokenizer, saved to a temporary directory.
"""

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", minversion="5.0")

from configs import generate as generate_config  # noqa: E402
from experiments import generate  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ["<s>", "<unk>", "</s>"] + [w for w in "the cat sat on a mat and dog ran far".split()]


def _checkpoint(path, layers, embed, seed):
    from tokenizers import Tokenizer, models, pre_tokenizers

    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        vocab_size=len(WORDS),
        n_positions=64,
        n_embd=embed,
        n_layer=layers,
        n_head=2,
        bos_token_id=0,
        eos_token_id=2,
    )
    transformers.GPT2LMHeadModel(config).eval().save_pretrained(path)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    ).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    target = _checkpoint(tmp_path_factory.mktemp("target"), 2, 32, 0)
    draft = _checkpoint(tmp_path_factory.mktemp("draft"), 1, 16, 1)
    return target, draft


def _config(**fields):
    config = generate_config.get_config("tiny")
    config.prompts = ["the cat sat", "a dog ran far and"]
    config.max_new_tokens = 8
    config.cache_len = 48
    config.timing_repeats = 1
    for key, value in fields.items():
        config[key] = value
    return config


def test_hf_pair_speculative_equals_autoregressive_greedy(checkpoints, tmp_path):
    target, draft = checkpoints
    config = _config(target_hf_checkpoint=target, draft_hf_checkpoint=draft, temperature=0.0)
    result = generate.run(config, str(tmp_path))
    assert result["greedy_identical"] is True
    assert result["speculative"]["stats"]["target_calls"] >= 1
    assert os.path.exists(tmp_path / "generate.json")


def test_hf_target_with_prompt_lookup_draft(checkpoints, tmp_path):
    target, _ = checkpoints
    config = _config(target_hf_checkpoint=target, draft_kind="prompt_lookup", temperature=0.0)
    assert generate.run(config, str(tmp_path))["greedy_identical"] is True


def test_hf_target_rejects_byte_level_drafts(checkpoints, tmp_path):
    target, _ = checkpoints
    with pytest.raises(ValueError, match="draft_kind"):
        generate.run(_config(target_hf_checkpoint=target, draft_kind="bigram"), str(tmp_path))


def test_draft_checkpoint_needs_target_checkpoint(checkpoints, tmp_path):
    _, draft = checkpoints
    with pytest.raises(ValueError, match="target_hf_checkpoint"):
        generate.run(_config(draft_hf_checkpoint=draft), str(tmp_path))


@pytest.mark.slow
def test_launcher_flags(checkpoints, tmp_path):
    target, draft = checkpoints
    cmd = [
        sys.executable,
        "-m",
        "experiments.main",
        "--config=configs/generate.py:tiny",
        f"--hf_checkpoint={target}",
        f"--draft_hf_checkpoint={draft}",
        "--config.max_new_tokens=4",
        "--config.cache_len=48",
        "--config.timing_repeats=1",
        f"--workdir={tmp_path}",
    ]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert os.path.exists(tmp_path / "generate.json")
