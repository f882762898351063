"""The test session's memory allocator: mimalloc in the processes it starts, where installed.

Why, and what it saved: tests/conftest.py's module docstring and tests/TIMING.md. The
controller calls `preload(os.environ)` before the xdist workers start; workers, notebook
kernels and subprocesses inherit `LD_PRELOAD`. The controller's own process keeps glibc's
malloc (so do the tests of a `-n 0` run). Linux only (macOS has no LD_PRELOAD). Set
`SPECJAX_TEST_ALLOCATOR=system` to keep glibc's malloc everywhere.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys

OPT_OUT = "SPECJAX_TEST_ALLOCATOR"  # "system": no preload
NAME = "libmimalloc.so"


def library() -> str | None:
    """The path of the installed libmimalloc.so, or None where it is absent."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        files = importlib.metadata.distribution("cmeel-mimalloc").files or ()
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == NAME:
            # Not dlopen'd to test it: a malloc replacement belongs in a process from its start,
            # and pip installed the wheel built for this platform.
            path = str(file.locate())
            return path if os.path.isfile(path) else None
    return None


def preload(environ: dict) -> str | None:
    """Puts mimalloc first in environ's LD_PRELOAD, unless opted out; returns its path or None.

    Processes started afterwards with this environment allocate through it.
    """
    if environ.get(OPT_OUT) == "system":
        return None
    path = library()
    if path is None:
        return None
    present = [p for p in environ.get("LD_PRELOAD", "").split(":") if p]
    if path not in present:
        environ["LD_PRELOAD"] = ":".join([path, *present])
    return path


def active() -> bool:
    """Whether this process has libmimalloc mapped (Linux's /proc; False elsewhere)."""
    try:
        with open(f"/proc/{os.getpid()}/maps", encoding="utf-8", errors="replace") as f:
            return any(NAME in line for line in f)
    except OSError:
        return False
