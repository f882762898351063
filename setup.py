"""Installs specjax: lossless speculative decoding in JAX/Flax.

CPU wheels of JAX are the default. On an accelerator install the matching JAX
build first (see README, "Installing on TPU / GPU"), then `pip install -e .`.

Only the library `specjax` is installed. `configs/`, `experiments/` and
`scripts/` are run from the checkout, as in the flax examples:
`python -m experiments.main --config=configs/...` from the repository root.
"""

import os
import sys
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

# specjax's CPU kernels (specjax/kernels/*.cc), called through the XLA FFI. Optional: a machine
# without a C++ compiler installs specjax without them, and packed models then run on XLA (with
# a warning; `specjax.kernels.status()` says why).
KERNELS = Extension(
    "specjax.kernels._packed_matmul",
    sources=[
        "specjax/kernels/packed_matmul.cc",
        "specjax/kernels/cache_attention.cc",
        "specjax/kernels/threefry.cc",
        "specjax/kernels/module.cc",
    ],
    depends=["specjax/kernels/common.h"],
    include_dirs=["specjax/kernels"],
    language="c++",
)


def _compile_sources_in_parallel(compiler):
    """Makes `compiler.compile` build an extension's sources on all cores at once.

    setuptools compiles the sources of one extension one after another; the kernels' four files
    took 12 s that way on a 2-core CPU, and `pip install -e ".[test]"` 36 s; in parallel and
    with -g0, 28-30 s (tests/TIMING.md, 2026-12-07). This uses the
    compiler class's own steps (`_setup_compile`, `_get_cc_args`, `_compile`); a compiler
    class without them keeps its serial `compile`.
    """
    if not all(hasattr(compiler, n) for n in ("_setup_compile", "_get_cc_args", "_compile")):
        return

    def compile(  # the signature of the method it replaces
        sources,
        output_dir=None,
        macros=None,
        include_dirs=None,
        debug=False,
        extra_preargs=None,
        extra_postargs=None,
        depends=None,
    ):
        macros, objects, extra, pp_opts, build = compiler._setup_compile(
            output_dir, macros, include_dirs, sources, depends, extra_postargs
        )
        cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)

        def one(obj):
            src, ext = build[obj]
            compiler._compile(obj, src, ext, cc_args, extra, pp_opts)

        with ThreadPoolExecutor(max(1, min(len(objects), os.cpu_count() or 1))) as pool:
            list(pool.map(one, objects))  # list(): re-raises the first compile error
        return objects

    compiler.compile = compile


class OptionalBuildExt(build_ext):
    """Builds the kernels with the XLA FFI headers of jaxlib; a failure warns, never fails."""

    def build_extension(self, ext):
        try:
            import jaxlib  # in pip's build environment (pyproject.toml's build requirements)

            ext.include_dirs.append(os.path.join(os.path.dirname(jaxlib.__file__), "include"))
        except ImportError:
            self.warn("jaxlib is not importable at build time: specjax's CPU kernels are skipped")
            return
        _compile_sources_in_parallel(self.compiler)
        # -ffp-contract=off: only the explicit fused multiply-adds fuse (see common.h).
        # -g0: no debug info (Python's own CFLAGS ask for -g), a third less compile time; the
        # machine code is the same.
        base = ["-O3", "-g0", "-std=c++17", "-pthread", "-ffp-contract=off"]
        # -march=native: the build runs on the machine that uses it (AVX2/FMA on x86-64).
        for flags in (base + ["-march=native"], base):
            ext.extra_compile_args = flags
            ext.extra_link_args = ["-pthread"]
            try:
                super().build_extension(ext)
                return
            except Exception as err:  # noqa: BLE001 - any compiler failure means "no kernels"
                self.warn(f"building specjax's CPU kernels with {flags} failed: {err}")
        print(
            "specjax: the CPU kernels were not built; packed models will run on XLA",
            file=sys.stderr,
        )


setup(
    name="specjax",
    version="0.1.0",
    description="Lossless speculative decoding for JAX/Flax research",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["specjax", "specjax.*"]),
    ext_modules=[KERNELS],
    cmdclass={"build_ext": OptionalBuildExt},
    install_requires=[
        # Lower bounds are the versions this project is tested with.
        "jax>=0.10.2",
        "flax>=0.12.8",
        "optax>=0.2.8",
        "orbax-checkpoint>=0.12.8",
        "numpy>=2.0",
        "absl-py>=2.1",
        "ml_collections>=1.1.0",
        "chex>=0.1.92",
        # The launcher's plots (speedup vs gamma, alpha bars).
        "matplotlib>=3.8",
        # Pretrained models: GGUF files (llama.cpp's reader and dequantizers), their
        # byte-level BPE tokenizers, and chat templates. None of them needs torch.
        "gguf>=0.19.0",
        "tokenizers>=0.23.3",
        "jinja2>=3.1.6",
    ],
    extras_require={
        # nbclient, nbformat, ipykernel: tests/test_notebooks.py runs notebooks/*.ipynb.
        # cmeel-mimalloc: the allocator the test session preloads into its workers (a 0.5 MB
        # wheel of the shared library; tests/allocator.py says why and what it saved).
        "test": [
            "pytest>=8",
            "pytest-xdist>=3.5",
            "scipy>=1.11",
            "ruff>=0.6",
            "nbclient>=0.10",
            "nbformat>=5.9",
            "ipykernel>=6.25",
            "cmeel-mimalloc>=3.4; sys_platform == 'linux'",
        ],
        # Hugging Face interop: torch is pinned to the CPU build the project is tested with;
        # accelerate is what transformers needs to load a GGUF file (the parity tests).
        "hf": ["torch==2.13.0", "transformers>=5.0", "safetensors>=0.4", "accelerate>=1.0"],
    },
)
