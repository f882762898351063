"""specjax is a guest in the process: importing it leaves XLA_FLAGS alone; configure_cpu opts in.

Each case runs in a fresh interpreter (the test session itself has configured the flag and
started JAX long ago), with XLA_FLAGS and the opt-out variable cleared.
"""

import json
import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAG = "--xla_cpu_copy_insertion_use_region_analysis"


def _run(code: str, **env_extra) -> dict:
    """Runs `code` in a fresh Python; it prints one JSON line, which is returned."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "SPECJAX_NO_XLA_FLAGS")}
    env["PYTHONPATH"] = os.pathsep.join([REPO, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["JAX_PLATFORMS"] = "cpu"
    env.update(env_extra)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


_PRELUDE = """
import json, os, warnings
warnings.simplefilter("always")
import specjax
from specjax import runtime
"""


def test_import_leaves_xla_flags_alone_and_configure_cpu_sets_the_flag():
    out = _run(
        _PRELUDE
        + """
after_import = os.environ.get("XLA_FLAGS")
first = specjax.configure_cpu()
flags_once = os.environ["XLA_FLAGS"]
second = specjax.configure_cpu()
import jax
jax.numpy.zeros(1).block_until_ready()
print(json.dumps(dict(after_import=after_import, first=first, second=second,
                      once=flags_once, twice=os.environ["XLA_FLAGS"])))
"""
    )
    assert out["after_import"] is None
    assert out["first"] and out["second"]
    assert out["once"] == f"{FLAG}=true"
    assert out["twice"] == out["once"]  # idempotent: not appended twice


def test_configure_cpu_keeps_other_flags_and_respects_the_opt_out():
    code = _PRELUDE + 'print(json.dumps([specjax.configure_cpu(), os.environ.get("XLA_FLAGS")]))'
    assert _run(code, XLA_FLAGS="--xla_dump_to=/tmp/x") == [
        True,
        f"--xla_dump_to=/tmp/x {FLAG}=true",
    ]
    assert _run(code, SPECJAX_NO_XLA_FLAGS="1") == [False, None]
    assert _run(code, XLA_FLAGS=f"{FLAG}=false") == [False, f"{FLAG}=false"]


def test_configure_cpu_after_the_backend_started_warns_and_changes_nothing():
    out = _run(
        _PRELUDE
        + """
import jax
jax.numpy.zeros(1).block_until_ready()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ok = specjax.configure_cpu()
print(json.dumps(dict(ok=ok, flags=os.environ.get("XLA_FLAGS"),
                      messages=[str(w.message) for w in caught],
                      kinds=[w.category.__name__ for w in caught])))
"""
    )
    assert out["ok"] is False and out["flags"] is None
    assert out["kinds"] == ["CpuFlagWarning"]
    assert "before the first JAX computation" in out["messages"][0]


def test_warn_if_cpu_unconfigured_warns_once_and_not_when_configured():
    code = (
        _PRELUDE
        + """
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(3):
        specjax.warn_if_cpu_unconfigured()
print(json.dumps([w.category.__name__ for w in caught]))
"""
    )
    assert _run(code) == ["CpuFlagWarning"]
    assert _run(code, SPECJAX_NO_XLA_FLAGS="1") == []
    assert _run(code, XLA_FLAGS=f"{FLAG}=true") == []


def test_a_cpu_decode_without_configure_cpu_warns_once():
    code = (
        _PRELUDE
        + """
import jax
from specjax.decoding import AutoregressiveDecoder, make_warper
from specjax.models import NgramLM, fit_ngram
model = NgramLM(8, 2)
params = fit_ngram([0, 1, 2, 3, 4, 5, 6, 7], 8, 2)
decoder = AutoregressiveDecoder(model, make_warper(0.0), cache_len=32)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(2):
        decoder.generate(params, [[1, 2]], jax.random.PRNGKey(0), 3)
print(json.dumps([w.category.__name__ for w in caught if "XLA_FLAGS" in str(w.message)]))
"""
    )
    assert _run(code) == ["CpuFlagWarning"]
    configured = code.replace("import jax\n", "specjax.configure_cpu()\nimport jax\n", 1)
    assert _run(configured) == []


def test_accelerators_warn_once_about_inexact_matmuls(monkeypatch):
    """On a GPU/TPU backend with JAX's unset matmul precision (TF32/bfloat16 passes), the
    decoders' settings check warns once, naming the fix; an explicit precision (the fix, or a
    deliberate "tensorfloat32") and the CPU backend are silent."""
    import warnings

    import jax
    import pytest

    from specjax import runtime

    monkeypatch.setattr(runtime, "_warned_precision", False)
    before = jax.config.jax_default_matmul_precision
    try:
        jax.config.update("jax_default_matmul_precision", None)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            runtime.warn_if_inexact_matmuls()  # the CPU: silent
        monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
        with pytest.warns(runtime.PrecisionWarning, match="configure_accelerator"):
            runtime.warn_if_inexact_matmuls()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            runtime.warn_if_inexact_matmuls()  # once per process
            monkeypatch.setattr(runtime, "_warned_precision", False)
            for explicit in ("tensorfloat32", "highest"):
                jax.config.update("jax_default_matmul_precision", explicit)
                runtime.warn_if_inexact_matmuls()
        jax.config.update("jax_default_matmul_precision", None)
        assert runtime.configure_accelerator()
        assert jax.config.jax_default_matmul_precision == "highest"
        monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
        jax.config.update("jax_default_matmul_precision", None)
        assert not runtime.configure_accelerator()
        assert jax.config.jax_default_matmul_precision is None
    finally:
        jax.config.update("jax_default_matmul_precision", before)
