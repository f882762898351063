"""Test-session setup: the XLA:CPU copy-insertion flag, set before any test starts JAX.

`import specjax` no longer touches XLA_FLAGS (the library is a guest in the process), so the test
session opts in here, as applications do. tests/test_cache_copies.py needs the flag: without it
XLA:CPU copies the KV caches in every decoding step, which is what that test guards against.
Subprocesses started by tests inherit the environment, flag included.
"""

import specjax

specjax.configure_cpu()
