"""specjax: lossless speculative decoding for JAX/Flax research.

Importing specjax changes no process state. On CPU call `specjax.configure_cpu()` before the
first JAX computation (see `specjax.runtime`): without it XLA:CPU copies the KV caches on every
decoding step.
"""

from specjax.runtime import configure_cpu, warn_if_cpu_unconfigured

__version__ = "0.1.0"

__all__ = ["__version__", "configure_cpu", "warn_if_cpu_unconfigured"]
