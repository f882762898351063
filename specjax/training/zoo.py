"""Named model sizes, the model config of a run, and where finished runs are cached.

Sizes (GPT-2 family, byte vocabulary of 259, learned positions up to `max_len`):

| name        | layers | d   | heads | mlp  | params  | role                              |
|-------------|--------|-----|-------|------|---------|-----------------------------------|
| target      | 6      | 384 | 6     | 1536 | 10.8 M  | the model speculative decoding speeds up |
| draft_l     | 3      | 160 | 5     | 640  | 1.01 M  | ~1/11 of the target               |
| draft_m     | 2      | 128 | 4     | 512  | 0.46 M  | ~1/23                             |
| draft_s     | 2      | 64  | 2     | 256  | 0.13 M  | ~1/83                             |
| tiny_target | 2      | 32  | 2     | 64   | tests   |                                   |
| tiny_draft  | 1      | 16  | 1     | 32   | tests   |                                   |

A finished run's parameters are exported to `model_cache_dir(config)` =
`$SPECJAX_CACHE/models/<config.name>-<fingerprint>` (default `~/.cache/specjax/models/...`),
where the fingerprint hashes every field that changes the trained weights (model, data,
optimizer, steps, seeds, distillation), so later experiments find exactly the weights their
config describes, and a changed recipe never silently reuses stale weights.

Processes sharing a cache (two launches, a test session's workers) take `cache_lock(dir)`
around "load if present, else train and export": the second waits for the first's export
instead of training the same model again or reading a half-written directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os

try:
    import fcntl
except ImportError:  # not POSIX: no inter-process lock (one process per cache)
    fcntl = None

MODEL_SIZES = {
    "target": dict(num_layers=6, num_heads=6, embed_dim=384, mlp_dim=1536),
    "draft_l": dict(num_layers=3, num_heads=5, embed_dim=160, mlp_dim=640),
    "draft_m": dict(num_layers=2, num_heads=4, embed_dim=128, mlp_dim=512),
    "draft_s": dict(num_layers=2, num_heads=2, embed_dim=64, mlp_dim=256),
    "tiny_target": dict(num_layers=2, num_heads=2, embed_dim=32, mlp_dim=64),
    "tiny_draft": dict(num_layers=1, num_heads=1, embed_dim=16, mlp_dim=32),
}

# Config fields that do not change the trained weights: they may differ between a run and its
# resumption and are left out of the fingerprint.
RUN_ONLY_FIELDS = frozenset(
    {
        "mode",
        "name",
        "log_every",
        "eval_every",
        "eval_windows",
        "final_eval_windows",
        "eval_batch_size",
        "checkpoint_every",
        "keep_checkpoints",
        "async_checkpoints",
        "export",
        "ngrams",
        "stop_at_step",
        "alpha_windows",
    }
)


def size_fields(name: str) -> dict:
    """The `TransformerConfig` fields of a named size (a copy)."""
    if name not in MODEL_SIZES:
        raise ValueError(f"model size must be one of {sorted(MODEL_SIZES)}, got {name!r}")
    return dict(MODEL_SIZES[name])


def fingerprint_fields(config_dict: dict) -> dict:
    """The part of a run config (as a plain dict) that determines the trained weights."""
    return {k: v for k, v in config_dict.items() if k not in RUN_ONLY_FIELDS}


def run_fingerprint(config_dict: dict) -> str:
    """12 hex digits of sha256 over `fingerprint_fields`, as canonical JSON."""
    blob = json.dumps(fingerprint_fields(config_dict), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def cache_root() -> str:
    """`$SPECJAX_CACHE/models`, or `~/.cache/specjax/models` if SPECJAX_CACHE is unset."""
    root = os.environ.get("SPECJAX_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "specjax"
    )
    return os.path.join(root, "models")


def model_cache_name(config_dict: dict) -> str:
    """The model-cache directory name of a run: `<name>-<fingerprint>`."""
    return f"{config_dict['name']}-{run_fingerprint(config_dict)}"


def model_cache_dir(config_dict: dict) -> str:
    """Where a finished run with this config exports its parameters (see module docstring)."""
    return os.path.join(cache_root(), model_cache_name(config_dict))


@contextlib.contextmanager
def cache_lock(cache_dir: str):
    """Holds an exclusive inter-process lock on `<cache_dir>.lock` (POSIX `flock`).

    Use it around checking for, training and exporting the model of `cache_dir`. The lock is
    released when the block ends or the process dies; on systems without `fcntl` it is a no-op.
    """
    os.makedirs(os.path.dirname(os.path.abspath(cache_dir)), exist_ok=True)
    if fcntl is None:
        yield
        return
    with open(f"{cache_dir}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
