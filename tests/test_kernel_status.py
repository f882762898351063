"""`kernels.status()`: the one line benchmarks print about which matmul path runs, and why.

Off the CPU it names the backend, whether or not the CPU library loads (on a GPU it used to
print the CPU build's missing module and tell the user to reinstall). On the CPU it gives the
library's own reason when it is off.
"""

from specjax import kernels
from specjax.kernels import ops


def test_off_the_cpu_the_status_names_the_backend(monkeypatch):
    monkeypatch.setattr(ops.jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(ops, "_load", lambda: "the compiled module is missing")
    line = kernels.status()
    assert line == "XLA reference (the kernels are CPU-only; the default backend is gpu)"
    assert not kernels.available()


def test_on_the_cpu_the_status_gives_the_librarys_reason(monkeypatch):
    monkeypatch.setattr(ops.jax, "default_backend", lambda: "cpu")
    monkeypatch.setattr(ops, "_load", lambda: "the compiled module is missing")
    assert kernels.status() == "XLA reference (the compiled module is missing)"
    assert not kernels.available()
    monkeypatch.setattr(ops, "_load", lambda: None)
    assert kernels.status() == "specjax CPU kernels (jax.ffi)"
    assert kernels.available()
