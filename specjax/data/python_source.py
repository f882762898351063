"""The "python" corpus: the `*.py` files of the running interpreter's standard library.

It is present on every machine that runs specjax, so experiments need no download. Which files:

- root: `sysconfig.get_paths()["stdlib"]`, walked without following symlinks;
- every `*.py` file except those under a directory named in `EXCLUDED_DIRS` (at any depth) or
  whose name starts with one of `EXCLUDED_FILE_PREFIXES`, and except directories whose name
  starts with "config-" (the build's Makefile dir);
- order: sorted relative POSIX paths;
- split: by file, `documents.in_validation(relative_path, VALIDATION_PERCENT)`;
- fingerprint: sha256 over "relpath<TAB>size<TAB>sha256(content)" lines of every selected file
  (both splits), so results can say exactly which stdlib they came from.

For CPython 3.11.7 on Linux this is 454 files, 8.79 MB (429 train files, 8.30 MB; 25
validation files, 0.49 MB); reading and tokenizing it takes ~0.15 s, so nothing is cached.
"""

from __future__ import annotations

import os
import sysconfig

from specjax.data import documents

# Directories left out, at any depth, and why:
#   site-packages, dist-packages: third-party code that differs between machines.
#   test, tests, idle_test: CPython's test suites (~17 MB, dominating the corpus), full of
#     deliberately malformed files and data tables rather than ordinary code.
#   idlelib, turtledemo: the IDLE GUI application and turtle demos, not library code.
#   lib2to3: deprecated Python 2 -> 3 converter; its grammar and fixers target Python 2.
#   encodings, pydoc_data: generated codec tables and documentation text, not code a person
#     writes; their repetitive tables would inflate draft acceptance rates.
#   __pycache__: bytecode caches (hold no *.py, skipped for speed).
EXCLUDED_DIRS = frozenset(
    {
        "site-packages",
        "dist-packages",
        "test",
        "tests",
        "idle_test",
        "idlelib",
        "turtledemo",
        "lib2to3",
        "encodings",
        "pydoc_data",
        "__pycache__",
    }
)
# File names left out: `_sysconfigdata*.py` is generated at build time and holds the build
# machine's paths, so it differs between otherwise identical Pythons.
EXCLUDED_FILE_PREFIXES = ("_sysconfigdata",)
# Share of files (by hash of their relative path) held out for validation.
VALIDATION_PERCENT = 5


def stdlib_root() -> str:
    """Returns the running interpreter's standard-library directory."""
    return sysconfig.get_paths()["stdlib"]


def list_source_files(root: str | None = None) -> list[str]:
    """Lists the corpus files.

    Args:
      root: directory to walk; None means `stdlib_root()`.

    Returns:
      Sorted relative POSIX paths of the selected `*.py` files.
    """
    root = stdlib_root() if root is None else root
    if not os.path.isdir(root):
        raise ValueError(f"root must be a directory, got {root!r}")
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        # Pruning in place stops os.walk from descending into excluded directories.
        dirnames[:] = [
            d for d in dirnames if d not in EXCLUDED_DIRS and not d.startswith("config-")
        ]
        for name in filenames:
            if not name.endswith(".py") or name.startswith(EXCLUDED_FILE_PREFIXES):
                continue
            full = os.path.join(dirpath, name)
            if os.path.isfile(full):
                found.append(os.path.relpath(full, root).replace(os.sep, "/"))
    return sorted(found)


def split_files(paths: list[str], split: str) -> list[str]:
    """Returns the paths of `split`, keeping their order.

    Args:
      paths: relative paths, e.g. from `list_source_files`.
      split: "train" or "validation".

    Returns:
      The subset on that side of the split.
    """
    documents.check_split(split)
    want_validation = split == "validation"
    return [p for p in paths if documents.in_validation(p, VALIDATION_PERCENT) == want_validation]


def fingerprint(paths: list[str], contents: dict[str, bytes]) -> str:
    """sha256 hex over the file list, sizes and contents (see module docstring)."""
    header = f"python-stdlib-corpus v1 validation_percent={VALIDATION_PERCENT}"
    return documents.fingerprint(header, ((p, contents[p]) for p in paths))


def load_python_source(split: str, tokenizer, root: str | None = None) -> documents.Corpus:
    """Reads and tokenizes one split of the stdlib corpus.

    Args:
      split: "train" or "validation".
      tokenizer: e.g. `ByteTokenizer()`; files are tokenized as raw bytes (no decoding).
      root: directory to read instead of the stdlib (tests).

    Returns:
      The split as a `Corpus`.
    """
    documents.check_split(split)
    root = stdlib_root() if root is None else root
    paths = list_source_files(root)
    if not paths:
        raise ValueError(f"no *.py files found under {root!r}")
    contents = {}
    for p in paths:
        with open(os.path.join(root, p), "rb") as f:
            contents[p] = f.read()
    chosen = split_files(paths, split)
    docs = [contents[p] for p in chosen]
    return documents.Corpus(
        name="python",
        split=split,
        tokens=documents.join_documents(docs, tokenizer),
        documents=tuple(chosen),
        num_bytes=sum(len(d) for d in docs),
        fingerprint=fingerprint(paths, contents),
    )
