"""The test session's threshold for Python's cycle collector, one value for every process.

tests/conftest.py sets it in the pytest processes (the measurement is in its docstring); the
sharding workers call `apply()` and the notebook test kernels run `KERNEL_SETUP` first, since
they are fresh interpreters that do not load the conftest.
"""

import gc

GC_THRESHOLD = (50_000, 20, 100)  # Python's default is (700, 10, 10)
KERNEL_SETUP = f"import gc\n\ngc.set_threshold(*{GC_THRESHOLD!r})"  # a cell's source


def apply() -> None:
    """Sets `GC_THRESHOLD` in this process."""
    gc.set_threshold(*GC_THRESHOLD)
