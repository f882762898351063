"""Installs specjax: lossless speculative decoding in JAX/Flax.

CPU wheels of JAX are the default. On an accelerator install the matching JAX
build first (see README, "Installing on TPU / GPU"), then `pip install -e .`.

Only the library `specjax` is installed. `configs/`, `experiments/` and
`scripts/` are run from the checkout, as in the flax examples:
`python -m experiments.main --config=configs/...` from the repository root.
"""

from setuptools import find_packages, setup

setup(
    name="specjax",
    version="0.1.0",
    description="Lossless speculative decoding for JAX/Flax research",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["specjax", "specjax.*"]),
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
        "test": [
            "pytest>=8",
            "pytest-xdist>=3.5",
            "scipy>=1.11",
            "ruff>=0.6",
            "nbclient>=0.10",
            "nbformat>=5.9",
            "ipykernel>=6.25",
        ],
        # Hugging Face interop: torch is pinned to the CPU build the project is tested with;
        # accelerate is what transformers needs to load a GGUF file (the parity tests).
        "hf": ["torch==2.13.0", "transformers>=5.0", "safetensors>=0.4", "accelerate>=1.0"],
    },
)
