"""specjax launcher: one absl entry point, one `run(config, workdir)` per mode.

    python -m experiments.main --config=configs/theory.py
    python -m experiments.main --config=configs/theory.py:alpha=0.8,c=0.05 --workdir=/tmp/run

Run from the repository root (configs/ and experiments/ live in the checkout, not in the installed
package). The mode comes from `--mode` if given, else from `config.mode`. Each mode is a module
`experiments/<mode>.py` exposing `run(config, workdir)`, so the same code runs from a Colab cell.
"""

import importlib
import os

from absl import app, flags, logging
from ml_collections import config_flags

import specjax

_CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")

# Modes and the module that runs each; modules are imported lazily so a mode's optional
# dependencies are only needed when that mode runs.
MODES = {
    "theory": "experiments.theory",
    "generate": "experiments.generate",
    "train": "experiments.train",
    "leviathan2023": "experiments.leviathan2023.pipeline",
    "trees": "experiments.trees.pipeline",
    "sequoia2024": "experiments.sequoia2024.pipeline",
}

FLAGS = flags.FLAGS
flags.DEFINE_string("mode", None, f"What to run; one of {sorted(MODES)}. Default: config.mode.")
flags.DEFINE_string("workdir", "runs/default", "Where outputs (tables, plots, checkpoints) go.")
flags.DEFINE_string(
    "hf_checkpoint", None, "generate mode: local Hugging Face checkpoint directory of the target."
)
flags.DEFINE_string(
    "draft_hf_checkpoint", None, "generate mode: local Hugging Face checkpoint of the draft."
)
config_flags.DEFINE_config_file(
    "config",
    os.path.join(_CONFIG_DIR, "theory.py"),
    "Path to a config file returning a ConfigDict from get_config(arg).",
    lock_config=False,
)


def run_mode(mode: str, config, workdir: str) -> None:
    """Runs one launcher mode.

    Args:
      mode: a key of `MODES`.
      config: the ConfigDict for that mode.
      workdir: output directory (created if missing).
    """
    if mode not in MODES:
        raise ValueError(f"--mode={mode!r} is not one of {sorted(MODES)}")
    os.makedirs(workdir, exist_ok=True)
    module = importlib.import_module(MODES[mode])
    module.run(config, workdir)


def main(argv):
    specjax.configure_cpu()  # before the first JAX computation (SPECJAX_NO_XLA_FLAGS=1 opts out)
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    config = FLAGS.config
    mode = FLAGS.mode or config.get("mode")
    if mode is None:
        raise app.UsageError("No mode: pass --mode or set config.mode in the config file.")
    for flag, field in (
        ("hf_checkpoint", "target_hf_checkpoint"),
        ("draft_hf_checkpoint", "draft_hf_checkpoint"),
    ):
        if FLAGS[flag].value is not None:
            if mode != "generate":
                raise app.UsageError(f"--{flag} applies to --mode=generate, not {mode}")
            config[field] = FLAGS[flag].value
    logging.info("mode=%s workdir=%s", mode, FLAGS.workdir)
    run_mode(mode, config, FLAGS.workdir)


if __name__ == "__main__":
    app.run(main)
