"""Test-session setup: the XLA:CPU copy-insertion flag, and compiled programs released per module.

`import specjax` no longer touches XLA_FLAGS (the library is a guest in the process), so the test
session opts in here, as applications do. tests/test_cache_copies.py needs the flag: without it
XLA:CPU copies the KV caches in every decoding step, which is what that test guards against.
Subprocesses started by tests inherit the environment, flag included.

Every XLA:CPU executable keeps its JIT-compiled code in its own memory mappings, and jax keeps
every executable it compiled. The whole suite in one process compiles well over a thousand
programs: measured at 43,000 mappings half way through, against Linux's default
vm.max_map_count of 65,530, past which LLVM's next allocation fails and XLA segfaults while
compiling (CI, exit 139, at 95% of the suite). So each module's programs are dropped when the
module ends; a module that needs one again compiles it again.
"""

import gc

import jax
import pytest

import specjax

specjax.configure_cpu()


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """After each test module: drop jax's compiled programs and tracing caches."""
    yield
    jax.clear_caches()
    gc.collect()
