"""Checks of a benchmark script's flags that must run before any measuring.

A script that opens its output only after minutes of timing threw every result away on a bad
path (a missing or unwritable folder, a directory where a file goes); `prepare_output` makes and
checks the output's place first. `gguf_model` resolves a `--model` flag that must be a GGUF file
with an error naming the flag and the registered names, not a loader's "no such GGUF file".
"""

from __future__ import annotations

import os


def prepare_output(path, flag: str, *, folder: bool = False) -> str:
    """Makes sure results can later be written to `path`, before the work starts.

    Args:
      path: the output file (or, `folder=True`, the output directory); its parent folders
        (or the directory itself) are created.
      flag: the flag or argument it came from ("--out"), for messages.
      folder: `path` is a directory the script writes files into.

    Returns:
      `path`. ValueError naming `flag` when the path is of the wrong kind or not writable.
    """
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"{flag} must be a non-empty path; got {path!r}")
    path = os.fspath(path)
    target = path if folder else os.path.dirname(os.path.abspath(path))
    if not folder and os.path.isdir(path):
        raise ValueError(f"{flag}={path!r} is a directory; give a file path")
    try:
        os.makedirs(target, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:
        kind = "" if folder else " the folder of"
        raise ValueError(f"{flag}={path!r}:{kind} {target!r} cannot be a directory ({e})") from e
    except OSError as e:
        raise ValueError(f"{flag}={path!r}: cannot create {target!r} ({e})") from e
    if not os.access(target, os.W_OK):
        raise ValueError(f"{flag}={path!r}: the folder {target!r} is not writable")
    return path


def gguf_model(model, flag: str = "--model") -> str:
    """The local GGUF file of `model` (a .gguf path, or a registered name, fetched once);
    FileNotFoundError or ValueError naming `flag` otherwise."""
    from specjax import pretrained  # prepare_output alone works with any tree's specjax

    path = pretrained.check_path(model, flag)  # lists the registered names
    if not pretrained.is_gguf_file(path):
        raise ValueError(
            f"{flag}={model!r} is not a GGUF file; this script needs a .gguf file or a "
            f"registered model name ({', '.join(sorted(pretrained.REGISTRY))})"
        )
    return path
