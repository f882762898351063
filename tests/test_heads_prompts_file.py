"""A draft head's self-distillation data from training prompts of your own
(`configs/heads.py`: `config.data.prompts_file`, JSON Lines as `real_prompts.load_prompts` reads).

On a tiny Llama written as a GGUF file with a chat template (tests/gguf_writer.py): the data
holds the target's replies to exactly the file's prompts, in order, under a fingerprint of
their content; a file holding one of our evaluation prompts, or a target without a chat
tokenizer, is refused before any generation.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from configs.heads import get_config
from experiments.common.real_prompts import EXAMPLE_FILE, PROMPTS, load_prompts
from experiments.heads import data as heads_data
from experiments.heads import train as heads_train
from specjax.convert.gguf import load_gguf
from tests.gguf_writer import write_tiny_gguf


def _write(path, lines) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(x) + "\n" for x in lines)
    return os.fspath(path)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    path = os.fspath(tmp_path_factory.mktemp("heads-file") / "tiny.gguf")
    write_tiny_gguf(path, context=1024, tied=True)
    return load_gguf(path)


def test_the_data_is_the_targets_replies_to_the_files_prompts(target, tmp_path):
    model, params, tokenizer = target
    lines = [
        {"task": "a", "text": "Name a colour."},
        {"task": "b", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Count to three."},
        ]},
        {"task": "a", "text": "Name a fruit."},
    ]  # fmt: skip
    prompts = load_prompts(_write(tmp_path / "train.jsonl", lines))
    kw = dict(num_prompts=99, max_new_tokens=4, batch_size=2, log=lambda *_: None)
    out = os.fspath(tmp_path / "data.npz")
    data = heads_data.feature_data(
        model, params, tokenizer, prompts_file=str(tmp_path / "train.jsonl"), path=out, **kw
    )
    meta = data.meta
    assert meta["num_prompts"] == 3 and meta["sequences"] == 3 and "stdlib" not in meta
    assert meta["prompts_skipped"] == 0
    assert meta["prompts_sha256"] == heads_data._prompts_sha256(prompts)
    for s, prompt in enumerate(prompts):  # t = 0 for the first two, t = 1 for the last
        ids = np.asarray(tokenizer.apply_chat_template(prompt.messages), np.int32)
        start = int(data.offsets[s])
        np.testing.assert_array_equal(data.tokens[start : start + len(ids)], ids)
        assert data.offsets[s + 1] - start == len(ids) + 4  # four reply tokens (no EOS drawn)
    # The same file again is the cached data; a changed prompt is other data.
    again = heads_data.feature_data(
        model, params, tokenizer, prompts_file=str(tmp_path / "train.jsonl"), path=out, **kw
    )
    assert again.meta == meta
    lines[2]["text"] = "Name a vegetable."
    changed = _write(tmp_path / "changed.jsonl", lines)
    with pytest.raises(ValueError, match="was built from other data"):
        heads_data.feature_data(model, params, tokenizer, prompts_file=changed, path=out, **kw)
    # A prompt longer than max_prompt_tokens after the chat template is skipped, and counted.
    lengths = [len(tokenizer.apply_chat_template(p.messages)) for p in prompts]
    cap = max(lengths) - 1
    short = heads_data.feature_data(
        model, params, tokenizer, prompts_file=str(tmp_path / "train.jsonl"),
        path=os.fspath(tmp_path / "short.npz"), max_prompt_tokens=cap, **kw,
    )  # fmt: skip
    over = sum(n > cap for n in lengths)
    assert over >= 1 and short.meta["prompts_skipped"] == over
    assert short.meta["sequences"] == 3 - over == len(short.offsets) - 1


def test_a_file_holding_an_evaluation_prompt_is_refused(target, tmp_path):
    model, params, tokenizer = target
    system = {"role": "system", "content": "Be brief."}
    for prompt, before in ((PROMPTS[5], []), (load_prompts(EXAMPLE_FILE)[7], [system])):
        messages = before + prompt.messages  # an added system turn does not hide it
        messages[-1] = dict(messages[-1], content=" " + messages[-1]["content"] + "\n")
        path = _write(tmp_path / "leak.jsonl", [{"task": "x", "text": "fine"}, {
            "task": prompt.task, "messages": messages}])  # fmt: skip
        with pytest.raises(ValueError, match="1 of its prompts are evaluation prompts"):
            heads_data.feature_data(
                model, params, tokenizer, num_prompts=1, max_new_tokens=2, prompts_file=path,
                path=os.fspath(tmp_path / "never.npz"),
            )  # fmt: skip
        assert not os.path.exists(tmp_path / "never.npz")


def test_a_target_without_a_chat_tokenizer_refuses_a_prompts_file(tmp_path):
    config = get_config("tiny,distilled,layers=1")
    config.data.prompts_file = _write(tmp_path / "p.jsonl", [{"task": "a", "text": "hi"}])
    with pytest.raises(ValueError, match="config.data.prompts_file=.*no chat tokenizer"):
        heads_train.run(config, os.fspath(tmp_path / "run"))
    config.target = "/nonexistent.gguf"  # never loaded: the file is checked first
    config.data.prompts_file = _write(
        tmp_path / "leak.jsonl", [{"task": "a", "text": PROMPTS[0].text}]
    )
    with pytest.raises(ValueError, match="are evaluation prompts"):
        heads_train.run(config, os.fspath(tmp_path / "run"))
