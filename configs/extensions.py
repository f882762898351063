r"""The paper's open extensions (Leviathan et al. 2023, §6), built and measured on our pairs.

    # Every part on the trained mini pair (Python corpus; trained first if not cached).
    python -m experiments.main --config=configs/extensions.py --workdir=runs/extensions
    # One part, on Shakespeare (python scripts/fetch_shakespeare.py first).
    python -m experiments.main --config=configs/extensions.py:parts=adaptive,corpus=shakespeare \
        --workdir=runs/ext-shakespeare
    # Smoke test (tested in CI): seconds-sized models, short measurements.
    python -m experiments.main --config=configs/extensions.py:tiny --workdir=/tmp/ext-tiny

Parts (experiments/extensions/<part>.py, each with its own `config(tiny)` of knobs): `adaptive`
(adaptive γ policies vs every fixed γ), `hierarchy` (target ← middle ← small speculation vs each
two-level pair), `beam` (speculative beam search vs beam search). Results: README.md there.

String options (comma-separated): `tiny`, `parts=adaptive/hierarchy/beam`,
`corpus=python|shakespeare`, `temperatures=0/1`, `repeats=5`.
"""

import importlib

import ml_collections

from configs.options import parse_options

PARTS = ("adaptive", "hierarchy", "beam")


def get_config(arg=None) -> ml_collections.ConfigDict:
    """The extensions config: shared options, then one sub-config per part."""
    options = parse_options(
        arg,
        ints=("repeats",),
        strs=("corpus",),
        lists=("temperatures",),
        str_lists=("parts",),
        switches=("tiny",),
    )
    parts = tuple(options.get("parts", PARTS))
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise ValueError(f"parts must be among {PARTS}; got {unknown}")
    config = ml_collections.ConfigDict()
    config.mode = "extensions"
    config.tiny = bool(options.get("tiny", False))
    config.parts = parts
    for part in parts:
        sub = importlib.import_module(f"experiments.extensions.{part}").config(config.tiny)
        for key in ("corpus", "temperatures", "repeats"):
            if key in options and key in sub:
                sub[key] = type(sub[key])(options[key])
        config[part] = sub
    return config
