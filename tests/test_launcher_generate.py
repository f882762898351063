"""Tests for the generate launcher mode and its config."""

import dataclasses
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from configs import generate as generate_config
from experiments import generate as generate_mode
from experiments.generate import report as generate_report
from specjax import checkpoint
from specjax.data import EOS_ID, ByteTokenizer
from specjax.decoding import block_accept, speculative_accept
from specjax.decoding.rules import accept_rule
from specjax.models import TransformerLM

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _check_decoder_report(report, prompts, max_new):
    tokenizer = ByteTokenizer()
    assert len(report["new_tokens"]) == len(prompts)
    for tokens, text in zip(report["new_tokens"], report["continuations"], strict=True):
        assert max_new >= len(tokens) >= 1
        # A row is cut short only by EOS, which is then its last token.
        assert len(tokens) == max_new or tokens[-1] == EOS_ID
        assert text == tokenizer.decode(np.array(tokens), stop_at_eos=True)
    assert report["stats"]["tokens_emitted"] == sum(len(t) for t in report["new_tokens"])
    assert report["ms_per_token"] > 0 and report["first_call_s"] >= report["median_s"] > 0


def test_run_in_process_bigram_draft_greedy(tmp_path, capsys):
    config = generate_config.get_config("tiny,draft=bigram")
    result = generate_mode.run(config, str(tmp_path))
    printed = capsys.readouterr().out
    assert "autoregressive:" in printed and "speculative:" in printed and "speedup" in printed
    # A readable header: no raw reprs, tiny models counted in K, the warper in words.
    header = printed.split("\n\n")[0]
    assert "()" not in header and "0.0M" not in header and "random weights" in header
    assert "K params" in header and "gamma=4; greedy; up to 16 new tokens" in header
    assert "bigram: NgramLM fitted on 20,000 python tokens" in header
    assert "target calls: one per loop iteration of the whole batch (2 rows" in printed

    with open(tmp_path / "generate.json", encoding="utf-8") as f:
        saved = json.load(f)
    assert saved["config"]["draft_kind"] == "bigram"
    assert saved["warper"] == "greedy" and saved["config"]["weights"] == "random"
    assert saved["greedy_identical"] is True  # lossless: greedy outputs are identical
    for name in ("autoregressive", "speculative"):
        _check_decoder_report(saved[name], config.prompts, config.max_new_tokens)
    spec = saved["speculative"]["stats"]
    assert spec["draft_calls"] == config.gamma * spec["target_calls"]
    assert 0.0 <= spec["alpha_empirical"] <= 1.0
    assert saved["speedup"] == pytest.approx(
        saved["autoregressive"]["ms_per_token"] / saved["speculative"]["ms_per_token"]
    )
    assert result["speculative"]["new_tokens"] == saved["speculative"]["new_tokens"]


def test_target_checkpoint_is_loaded(tmp_path):
    """A run from an exported checkpoint of the weights a run would draw itself decodes the same
    text (the loaded model is really used), and a vocabulary mismatch is named."""
    config = generate_config.get_config("tiny,draft=none")
    reference = generate_mode.run(config, str(tmp_path / "a"))
    target, params, _ = generate_mode.build_models(config, ByteTokenizer().vocab_size)
    meta = {"model": checkpoint.model_config_to_dict(target.config), "step": 0}
    path = checkpoint.export_model(str(tmp_path / "export"), params, meta)
    config.target_checkpoint = path
    config.target.num_layers = 7  # ignored: the checkpoint carries its own model config
    loaded = generate_mode.run(config, str(tmp_path / "b"))
    assert loaded["autoregressive"]["new_tokens"] == reference["autoregressive"]["new_tokens"]

    small = dataclasses.replace(target.config, vocab_size=100)
    meta = {"model": checkpoint.model_config_to_dict(small), "step": 0}
    small_params = jax.eval_shape(TransformerLM(small).init_params, jax.random.PRNGKey(0))
    small_params = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), small_params)
    config.target_checkpoint = checkpoint.export_model(str(tmp_path / "v100"), small_params, meta)
    with pytest.raises(ValueError, match="vocab_size=100"):
        generate_mode.run(config, str(tmp_path / "c"))


def test_block_verification_is_selectable_and_greedy_identical(tmp_path, capsys):
    config = generate_config.get_config("tiny,draft=bigram,accept=block")
    assert config.accept == "block"
    result = generate_mode.run(config, str(tmp_path))
    assert result["accept"] == "block" and result["greedy_identical"] is True
    assert "gamma=4, block" in capsys.readouterr().out
    assert result["lossless"] is True


def test_a_lossy_rule_is_recorded_and_said():
    shape = {"speculative": {}, "tree": None, "gamma": 4, "accept": "lenient:0.5"}
    assert "LOSSY" in generate_report._shape({**shape, "lossless": False})
    assert "LOSSY" not in generate_report._shape({**shape, "lossless": True})


def test_accept_rule_names():
    assert generate_config.get_config("").accept == "tokenwise"
    assert accept_rule("tokenwise") is speculative_accept
    assert accept_rule(" block ") is block_accept
    with pytest.raises(ValueError, match=r"unknown acceptance rule 'blocky'.*'block'.*'tokenwise'"):
        accept_rule("blocky")
    with pytest.raises(ValueError, match="takes no arguments"):
        accept_rule("block:0.5")


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("accept", "blocky", "unknown acceptance rule"),
        ("accept", "lenient", "acceptance rule 'lenient': takes one argument, lenience"),
        ("tree", "2/1", "verified by tree_accept"),
    ],
)
def test_bad_accept_raises_before_building_models(tmp_path, field, value, match):
    config = generate_config.get_config("tiny,accept=block")
    config[field] = value
    with pytest.raises(ValueError, match=match):
        generate_mode.run(config, str(tmp_path))


def test_run_in_process_autoregressive_only(tmp_path):
    result = generate_mode.run(generate_config.get_config("tiny,draft=none"), str(tmp_path))
    assert result["speculative"] is None and result["speedup"] is None
    assert result["greedy_identical"] is None
    assert os.path.exists(tmp_path / "generate.json")


def test_config_string_options():
    config = generate_config.get_config(
        "draft=prompt_lookup,gamma=3,temperature=0.7,top_k=40,top_p=0.9,max_new_tokens=8,seed=5"
    )
    assert config.mode == "generate" and config.draft_kind == "prompt_lookup"
    assert (config.gamma, config.top_k, config.max_new_tokens, config.seed) == (3, 40, 8, 5)
    assert (config.temperature, config.top_p) == (0.7, 0.9)
    assert config.target_checkpoint is None and config.draft_checkpoint is None
    assert config.target.embed_dim == 512 and config.target.num_layers == 8
    tiny = generate_config.get_config("tiny,target_family=llama")
    assert tiny.target.family == "llama" and tiny.target.embed_dim == 64
    for bad in ("draft=trigram", "gamma=two", "speed=3", "huge"):
        with pytest.raises(ValueError):
            generate_config.get_config(bad)


@pytest.mark.parametrize(
    "field, value, error, match",
    [
        ("target_checkpoint", "/nonexistent/ckpt", FileNotFoundError, "config.target_checkpoint"),
        ("draft_kind", "trigram", ValueError, "config.draft_kind"),
        ("prompts", [], ValueError, "config.prompts"),
        ("prompts", ["ok", ""], ValueError, "config.prompts"),
        ("timing_repeats", 0, ValueError, "config.timing_repeats"),
        ("top_k", -3, ValueError, r"config.top_k must be an integer >= 0 \(0 disables top-k\)"),
        ("top_p", 0.0, ValueError, r"config.top_p must lie in \(0, 1\]"),
        ("gamma", 0, ValueError, "config.gamma must be an integer >= 1"),
        ("weights", "pretrained", ValueError, "config.weights must be one of"),
        ("prompt", "ok||also", ValueError, "config.prompt must give non-empty prompts"),
        # tiny's target has 128 learned positions: the message names the option the user set.
        ("cache_len", 256, ValueError, r"config.cache_len=256 exceeds the target model's learned"),
    ],
)
def test_bad_config_values_raise_naming_the_field(tmp_path, field, value, error, match):
    config = generate_config.get_config("tiny")
    config[field] = value
    with pytest.raises(error, match=match):
        generate_mode.run(config, str(tmp_path))


def test_missing_draft_checkpoint_and_bad_family_raise(tmp_path):
    config = generate_config.get_config("tiny,draft=transformer")
    config.draft_checkpoint = str(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="config.draft_checkpoint"):
        generate_mode.run(config, str(tmp_path))
    config = generate_config.get_config("tiny")
    config.target.family = "bert"
    with pytest.raises(ValueError, match="config.target.family"):
        generate_mode.run(config, str(tmp_path))


def test_launcher_subprocess_self_draft_sampling(tmp_path):
    """draft=self in sampling mode: q == p, so every draft is accepted (α = 1 exactly)."""
    workdir = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.main",
            "--config=configs/generate.py:tiny,draft=self,temperature=0.8,top_k=20",
            "--config.prompt=def f(x):\\n|import re",
            f"--workdir={workdir}",
        ],
        cwd=_REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "speculative:" in proc.stdout
    with open(workdir / "generate.json", encoding="utf-8") as f:
        saved = json.load(f)
    stats = saved["speculative"]["stats"]
    assert stats["alpha_empirical"] == 1.0
    assert stats["acceptance_by_position"] == [1.0] * 4
    assert saved["greedy_identical"] is None
    _check_decoder_report(saved["speculative"], saved["prompts"], saved["max_new_tokens"])
    # --config.prompt: "|" separates prompts, "\n" is a newline.
    assert saved["prompts"] == ["def f(x):\n", "import re"]
    assert saved["warper"] == "sampling: temperature 0.8, top-k 20"
    assert "sampling: temperature 0.8, top-k 20;" in proc.stdout
    assert "the two texts differ: at temperature > 0" in proc.stdout
    assert "why no speedup: draft=self" in proc.stdout or saved["speedup"] >= 1


@pytest.mark.parametrize(
    "options",
    ["tiny,draft=transformer,tree=2/2/1,temperature=0", "tiny,draft=prompt_lookup,tree=3/1"],
)
def test_generate_mode_verifies_a_token_tree(tmp_path, capsys, options):
    """`tree=...` swaps the chain for a token tree (model drafts level by level; prompt lookup
    proposes several earlier matches); greedy output must still equal autoregressive output."""
    config = generate_config.get_config(options + ",max_new_tokens=12")
    generate_mode.run(config, str(tmp_path))
    assert "tree of" in capsys.readouterr().out
    with open(tmp_path / "generate.json", encoding="utf-8") as f:
        saved = json.load(f)
    tree = saved["tree"]
    expected_nodes = {"2/2/1": 11, "3/1": 7}[config.tree]
    assert tree["nodes"] == expected_nodes and tree["depth"] == len(config.tree.split("/"))
    assert saved["greedy_identical"] is True
    stats = saved["speculative"]["stats"]
    assert len(stats["accepted_depth_histogram"]) == tree["depth"] + 1
    assert len(stats["accepted_rank_by_depth"]) == tree["depth"]


def test_tree_option_errors_name_the_option():
    with pytest.raises(ValueError, match="rule="):
        generate_config.get_config("tiny,tree=2/1,rule=maybe")
    config = generate_config.get_config("tiny,tree=2/x")
    with pytest.raises(ValueError, match="tree='2/x'"):
        generate_mode.run(config, "/tmp/unused-generate-tree")


def test_run_with_an_adaptive_gamma_policy(tmp_path):
    """`gamma_policy=confidence:0.3` reaches the decoder: greedy output unchanged, γ varies."""
    config = generate_config.get_config("tiny,draft=bigram,gamma_policy=confidence:0.3")
    assert config.gamma_policy == "confidence:0.3"
    saved = generate_mode.run(config, str(tmp_path))
    assert saved["gamma_policy"] == "confidence:0.3"
    assert saved["greedy_identical"] is True
    stats = saved["speculative"]["stats"]
    assert sum(stats["drafted_histogram"]) == stats["row_iterations"]
    assert stats["draft_calls"] <= config.gamma * stats["target_calls"]
    assert "adaptive γ: mean" in generate_mode.format_report(saved)


def test_theory_policy_uses_measured_costs():
    config = generate_config.get_config("tiny,draft=bigram,gamma=2,gamma_policy=theory")
    target, params, draft = generate_mode.build_models(config, ByteTokenizer().vocab_size)
    policy = generate_mode.build_gamma_policy(config, target, params, draft)
    assert len(policy.target_costs) == config.gamma + 1 and policy.target_costs[0] == 1.0
    assert policy.c > 0
    configured = generate_config.get_config("tiny,gamma_policy=theory:0.25")
    assert generate_mode.build_gamma_policy(configured).c == 0.25


def test_bad_gamma_policy_is_named(tmp_path):
    config = generate_config.get_config("tiny,draft=bigram,gamma_policy=bandit")
    with pytest.raises(ValueError, match="gamma_policy"):
        generate_mode.run(config, str(tmp_path))


def test_prompt_option_replaces_prompts():
    config = generate_config.get_config("tiny")
    assert generate_mode.prompts_of(config) == list(config.prompts)
    config.prompt = "def f(x):"
    assert generate_mode.prompts_of(config) == ["def f(x):"]
    config.prompt = "a\\tb|c\\nd|e"
    assert generate_mode.prompts_of(config) == ["a\tb", "c\nd", "e"]


def test_describe_warper_and_counts():
    from specjax.decoding import make_warper

    assert generate_mode.describe_warper(make_warper(0)) == "greedy"
    assert generate_mode.describe_warper(make_warper(1.0)) == "sampling: temperature 1"
    text = generate_mode.describe_warper(make_warper(0.7, 40, 0.95))
    assert text == "sampling: temperature 0.7, top-k 40, top-p 0.95"
    counts = [generate_report.format_count(n) for n in (12, 83_100, 859_300, 25_600_000)]
    assert counts == ["12", "83.1K", "859.3K", "25.6M"]


def _export_random(path, fields, seed):
    """Exports a random model where the model cache would hold a trained one."""
    from specjax.models import build

    model, params = build.init_model(fields, ByteTokenizer().vocab_size, jax.random.PRNGKey(seed))
    meta = {"model": checkpoint.model_config_to_dict(model.config), "step": 0}
    checkpoint.export_model(path, params, meta)


def test_weights_auto_uses_the_tiny_pipelines_models_when_cached(tmp_path, monkeypatch, capsys):
    """weights=auto: the tiny pipeline's cached models when present, else random weights and one
    line that says why and how to get them; weights=trained insists."""
    from experiments import zoo

    monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path / "cache"))
    config = generate_config.get_config("tiny,weights=auto,max_new_tokens=6")
    config.timing_repeats = 1
    missing = generate_mode.run(config, str(tmp_path / "a"))
    assert (
        missing["note"].startswith("note: random weights") and zoo.TINY_PIPELINE in missing["note"]
    )
    assert missing["random_weights"] and "random weights" in missing["target"]
    assert "note: random weights" in capsys.readouterr().out
    with pytest.raises(FileNotFoundError, match="config.weights='trained'.*leviathan2023.py:tiny"):
        generate_mode.run(generate_config.get_config("tiny,weights=trained"), str(tmp_path))

    dirs = zoo.tiny_pair_model_dirs()
    assert dirs["target"].startswith(str(tmp_path / "cache"))
    fields = dict(num_layers=1, num_heads=2, embed_dim=32, mlp_dim=64, max_len=64)
    _export_random(dirs["target"], fields, 1)
    _export_random(dirs["draft"], dict(fields, embed_dim=16), 2)
    found = generate_mode.run(config, str(tmp_path / "b"))
    assert found["note"] is None and not found["random_weights"]
    assert "trained (the tiny pipeline's target)" in found["target"]
    assert "d=16 L=1" in found["draft"] and "distilled draft" in found["draft"]
    assert found["greedy_identical"] is True
    # Explicit random weights ignore the cache.
    config.weights = "random"
    assert generate_mode.run(config, str(tmp_path / "c"))["random_weights"]


def test_launcher_errors_are_one_line_with_exit_status_2(tmp_path):
    """The project's own option errors: one line naming the option, exit 2; --traceback (or
    SPECJAX_TRACEBACK=1) gives the traceback."""

    def launch(*args, env=None):
        cmd = [sys.executable, "-m", "experiments.main", *args, f"--workdir={tmp_path}"]
        env = {**os.environ, **(env or {})}
        return subprocess.run(
            cmd, cwd=_REPO_ROOT, capture_output=True, text=True, timeout=300, env=env
        )

    proc = launch("--config=configs/generate.py:tiny", "--config.top_k=-3")
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert lines == [
        "error: config.top_k must be an integer >= 0 (0 disables top-k), got -3  "
        "(--traceback shows where)"
    ]
    assert "Traceback" not in proc.stderr
    # An error in the config file's own options, raised while absl parses the flags.
    proc = launch("--config=configs/generate.py:draft=trigram")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: draft='trigram' is not one of")
    proc = launch("--config=configs/generate.py:tiny", "--config.top_k=-3", "--traceback")
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "config.top_k" in proc.stderr
    proc = launch("--config=configs/generate.py:draft=trigram", env={"SPECJAX_TRACEBACK": "1"})
    assert proc.returncode == 1 and "Traceback" in proc.stderr
    # An override of a field the config does not have (ml_collections: a bare AttributeError
    # traceback) is one line naming the flag, the level and its fields, closest first.
    proc = launch("--config", "configs/train.py:tiny", "--config.optim.peak_l=0.1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: --config.optim.peak_l: config.optim of configs/train.py:tiny has no field "
        "'peak_l'; did you mean peak_lr? (its fields: b1, b2, clip_norm, end_lr_fraction, "
        "peak_lr, warmup_steps, weight_decay)"
    )
    proc = launch("--config=configs/train.py:tiny", "--config.seed.x=1")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1] == (
        "error: --config.seed.x: config.seed of configs/train.py:tiny is of type int, not a group "
        "of fields"
    )
    proc = launch("--config=configs/train.py:tiny", "--config.seed.x=1", "--traceback")
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "seed.x" in proc.stderr


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_option_error_finds_only_the_projects_own_errors():
    from experiments import main as launcher

    try:
        generate_config.get_config("draft=trigram")
    except ValueError as e:
        assert launcher.option_error(e) is e
    try:
        np.zeros(3).reshape(2, 2)  # raised inside NumPy: a bug to show with its traceback
    except ValueError as e:
        assert launcher.option_error(e) is None
    try:
        try:
            generate_config.get_config("gamma=two")
        except ValueError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as e:
        assert "gamma='two'" in launcher.one_line(launcher.option_error(e))


def test_pretrained_target_validation_names_the_fields(tmp_path):
    """config.target_pretrained: one target only, a draft kind that works on its tokenizer,
    and config.chat only where a chat template exists (all raised before anything compiles)."""
    config = generate_config.get_config("tiny")
    config.target_pretrained = "smollm2-135m-instruct"
    config.target_hf_checkpoint = str(tmp_path)
    with pytest.raises(ValueError, match="target_pretrained and config.target_hf_checkpoint"):
        generate_mode.run(config, str(tmp_path))
    config = generate_config.get_config("tiny")
    config.target_pretrained = "smollm2-135m-instruct"
    config.draft_kind = "bigram"
    with pytest.raises(ValueError, match="draft_kind='bigram'.*target_pretrained"):
        generate_mode.run(config, str(tmp_path))
    config = generate_config.get_config("tiny,weights=random")
    config.target_pretrained = str(tmp_path / "missing.gguf")
    config.draft_kind = "none"
    with pytest.raises(FileNotFoundError, match="config.target_pretrained="):
        generate_mode.run(config, str(tmp_path))
    config = generate_config.get_config("tiny,weights=random")
    config.chat = "hello"
    with pytest.raises(ValueError, match="config.chat: the byte tokenizer has no chat template"):
        generate_mode.run(config, str(tmp_path))
