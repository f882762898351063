"""The test session's memory allocator: mimalloc in every worker process, where it is installed.

XLA's compiler and the LLVM under it allocate and free millions of small objects per program:
a perf profile of three decoder programs compiling put 16 % of the process in glibc's malloc
and free (`_int_malloc`, `_int_free`, `malloc_consolidate`, `unlink_chunk`). The suite is
compile-bound, so the session preloads mimalloc (the `cmeel-mimalloc` wheel of the `[test]`
extra ships it as a shared library) into the processes it starts: the xdist workers, the
notebook kernels and every subprocess inherit `LD_PRELOAD` from the controller, which sets it
before the workers start (tests/conftest.py). The controller itself keeps glibc's allocator:
it compiles nothing under xdist, and a `-n 0` run (one process) keeps glibc's for its tests,
while the notebook kernels and subprocesses it starts get mimalloc. Allocation changes no
numerics: the decoding fixture is bit-identical either way. Measured: tests/TIMING.md.

Linux only (macOS has no LD_PRELOAD; the wheel has no Windows build). Set
`SPECJAX_TEST_ALLOCATOR=system` to keep glibc's malloc everywhere.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import sys

OPT_OUT = "SPECJAX_TEST_ALLOCATOR"  # "system": no preload
NAME = "libmimalloc.so"


def library() -> str | None:
    """The path of the installed libmimalloc.so, or None where it is absent or does not load."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        files = importlib.metadata.distribution("cmeel-mimalloc").files or ()
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == NAME:
            path = str(file.locate())
            try:
                ctypes.CDLL(path)  # a wrong architecture or a broken file: no preload
            except OSError:
                return None
            return path
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
