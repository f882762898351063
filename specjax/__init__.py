"""specjax: lossless speculative decoding for JAX/Flax research."""

import os as _os

# XLA:CPU otherwise copies every KV-cache buffer once per decode step inside the while_loop
# (measured: 4 cache-sized copies per step for a 2-layer model, 0 with the flag). XLA reads
# XLA_FLAGS when the backend starts, so this must run before the first JAX computation; import
# specjax first. Opt out with SPECJAX_NO_XLA_FLAGS=1.
_FLAG = "--xla_cpu_copy_insertion_use_region_analysis"
if not _os.environ.get("SPECJAX_NO_XLA_FLAGS") and _FLAG not in _os.environ.get("XLA_FLAGS", ""):
    _os.environ["XLA_FLAGS"] = (_os.environ.get("XLA_FLAGS", "") + f" {_FLAG}=true").strip()

__version__ = "0.1.0"
