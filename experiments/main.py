"""specjax launcher: one absl entry point, one `run(config, workdir)` per mode.

    python -m experiments.main --config=configs/theory.py
    python -m experiments.main --config=configs/theory.py:alpha=0.8,c=0.05 --workdir=/tmp/run

Run from the repository root (configs/ and experiments/ live in the checkout, not in the installed
package). The mode comes from `--mode` if given, else from `config.mode`. Each mode is a module
`experiments/<mode>.py` exposing `run(config, workdir)`, so the same code runs from a Colab cell.

A bad option (a ValueError or FileNotFoundError raised by the project's own code: a config file,
a mode, specjax) is printed as one line naming the option and the fix, with exit status 2;
`--traceback` (or SPECJAX_TRACEBACK=1) shows the full traceback instead. So is an override
`--config.x=...` of a field the config does not have, and a common field out of range (`gammas`,
`temperatures`, `repeats`, ...: experiments/common/config_checks.py), checked before the mode
runs. Other errors raised inside other libraries keep their traceback.
"""

import difflib
import importlib
import importlib.util
import os
import sys

import ml_collections
from absl import app, flags, logging
from ml_collections import config_flags

import specjax
from experiments.common.config_checks import check_config

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CONFIG_DIR = os.path.join(_REPO_ROOT, "configs")
# Code whose ValueErrors are option errors: the checkout's configs/, experiments/, scripts/
# and the specjax package (wherever it is installed).
_PROJECT_DIRS = tuple(
    os.path.join(os.path.realpath(d), "")
    for d in (
        os.path.join(_REPO_ROOT, "configs"),
        os.path.join(_REPO_ROOT, "experiments"),
        os.path.join(_REPO_ROOT, "scripts"),
        os.path.dirname(os.path.abspath(specjax.__file__)),
    )
)
_USER_ERRORS = (ValueError, FileNotFoundError)
EXIT_USAGE = 2

# Modes and the module that runs each; modules are imported lazily so a mode's optional
# dependencies are only needed when that mode runs.
MODES = {
    "theory": "experiments.theory",
    "generate": "experiments.generate",
    "train": "experiments.train",
    "leviathan2023": "experiments.leviathan2023.pipeline",
    "trees": "experiments.trees.pipeline",
    "sequoia2024": "experiments.sequoia2024.pipeline",
    "extensions": "experiments.extensions.pipeline",
    "heads": "experiments.heads.train",
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
flags.DEFINE_bool(
    "traceback",
    False,
    "Show the full traceback of an option error instead of one line (or SPECJAX_TRACEBACK=1).",
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
      config: the ConfigDict for that mode (its common fields are checked first:
        `experiments/common/config_checks.py`; then its own, by the mode's optional
        `check(config)`).
      workdir: output directory (created if missing).
    """
    if mode not in MODES:
        raise ValueError(f"--mode={mode!r} is not one of {sorted(MODES)}")
    check_config(config)  # γ, temperatures, repeats, ...: named, before any model is loaded
    module = importlib.import_module(MODES[mode])
    if hasattr(module, "check"):
        module.check(config)  # the mode's own fields, also before the workdir exists
    os.makedirs(workdir, exist_ok=True)
    module.run(config, workdir)


def _raised_in_project(exc: BaseException) -> bool:
    """True if the innermost frame of `exc`'s traceback is the project's own code."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    path = os.path.join(os.path.realpath(tb.tb_frame.f_code.co_filename), "")
    return path.startswith(_PROJECT_DIRS)


def option_error(exc: BaseException) -> BaseException | None:
    """The project's own ValueError / FileNotFoundError behind `exc`, or None.

    Follows the cause and context chain: a config file's error reaches the launcher wrapped
    by ml_collections and absl (flag parsing).
    """
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, _USER_ERRORS) and _raised_in_project(exc):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def one_line(exc: BaseException) -> str:
    """`exc`'s message on one line, prefixed like a command-line tool's error."""
    message = " ".join(str(exc).split())
    return f"error: {message}  (--traceback shows where)"


def want_traceback(argv=None) -> bool:
    """--traceback given (even if flag parsing failed) or SPECJAX_TRACEBACK set."""
    if os.environ.get("SPECJAX_TRACEBACK", "") not in ("", "0"):
        return True
    if FLAGS.is_parsed():
        return FLAGS.traceback
    return any(a in ("--traceback", "--traceback=true", "--traceback=1") for a in argv or ())


def _load_config(argv):
    """The ConfigDict that `--config=path[:arg]` in argv names (the flag's default if absent).

    Loaded again here: ml_collections applies the overrides while it parses `--config` itself,
    so when one fails the flag holds no value yet."""
    value = None
    for i, a in enumerate(argv):
        if a.startswith("--config="):
            value = a.split("=", 1)[1]
        elif a == "--config" and i + 1 < len(argv):
            value = argv[i + 1]
    path, _, arg = (value or FLAGS["config"].default).partition(":")
    spec = importlib.util.spec_from_file_location("_launcher_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg or None), value or FLAGS["config"].default


def unknown_override(argv) -> str | None:
    """The one-line error for a `--config.a.b=v` naming no field of the config, or None.

    ml_collections reports such an override as a bare AttributeError traceback; this names the
    flag, the config and the fields that level does have (closest first).
    """
    overrides = [a[len("--config.") :].split("=", 1)[0] for a in argv if a.startswith("--config.")]
    if not overrides:
        return None
    try:
        config, where = _load_config(argv)
    except Exception:  # noqa: BLE001 (the config's own error is reported by absl instead)
        return None
    for name in overrides:
        node = config
        for depth, part in enumerate(parts := name.split(".")):
            parent = ".".join(["config", *parts[:depth]])
            if not isinstance(node, ml_collections.ConfigDict):
                return (
                    f"error: --config.{name}: {parent} of {where} is of type "
                    f"{type(node).__name__}, not a group of fields"
                )
            if part not in node:
                fields = sorted(node.keys())
                close = difflib.get_close_matches(part, fields, n=3)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                return (
                    f"error: --config.{name}: {parent} of {where} has no field {part!r}{hint} "
                    f"(its fields: {', '.join(fields)})"
                )
            node = node[part]
    return None


def parse_flags(argv):
    """absl's flag parsing, but a config file's own option error is one line (exit status 2),
    and so is a `--config.x=...` override of a field the config does not have."""
    try:
        return FLAGS(argv)
    except (AttributeError, KeyError):
        message = None if want_traceback(argv) else unknown_override(argv)
        if message is None:
            raise
        print(message, file=sys.stderr, flush=True)
        sys.exit(EXIT_USAGE)
    except flags.Error as error:
        cause = option_error(error)
        if cause is None or want_traceback(argv):
            return app.parse_flags_with_usage(argv)  # absl's report (re-parses, exits 1)
        print(one_line(cause), file=sys.stderr, flush=True)
        sys.exit(EXIT_USAGE)


def main(argv):
    try:
        _main(argv)
    except _USER_ERRORS as error:
        if want_traceback() or option_error(error) is not error:
            raise
        print(one_line(error), file=sys.stderr, flush=True)
        sys.exit(EXIT_USAGE)


def _main(argv):
    specjax.configure_cpu()  # before the first JAX computation (SPECJAX_NO_XLA_FLAGS=1 opts out)
    specjax.configure_accelerator()  # float32 products on GPU/TPU: greedy speculative = greedy
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
    app.run(main, flags_parser=parse_flags)
