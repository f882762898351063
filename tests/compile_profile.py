"""Where the suite's time goes: XLA compilations per test file (a pytest plugin, opt-in).

    python -m pytest -p tests.compile_profile            # the table after the run
    python -m pytest -p tests.compile_profile tests/test_eagle.py -n 0

Every process of the session (the controller, each xdist worker) listens to jax's compile
events (`jax.monitoring`): XLA backend compilations, split at `SMALL_S` into programs and the
tiny ones an eager op costs (flax run op by op, a library function called outside jit), plus
tracing and lowering to MLIR. Workers write their sums into the session directory
(tests/conftest.py); the controller adds them up and prints, per file, the test seconds (setup,
call and teardown) beside the compile seconds, and the totals; then the jitted functions that
cost the most compile, trace and lower seconds over the whole run (what showed that each decoder
program traced its models anew: TIMING.md). Notebook kernels and other subprocesses are not seen
(their files show 0 compilations).
"""

from __future__ import annotations

import collections
import glob
import json
import os

from jax import monitoring

SMALL_S = 0.25  # an eager op compiles in ~0.02-0.1 s; a decoder program in 1-10 s
_FILE = "compile-profile-{}.json"
_EVENTS = {
    "/jax/core/compile/backend_compile_duration": "compile",
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
}

_BY_NAME = "fn:"  # rows keyed by jitted function, not by test file
_current = {"file": "<collection>"}
_sums: dict = collections.defaultdict(collections.Counter)  # file -> column -> seconds or count


def _listen(event: str, seconds: float, **kwargs) -> None:
    column = _EVENTS.get(event)
    if column is None:
        return
    # Per jitted function too (jax names it in the event: "jit(generate_jit)", "generate_jit").
    name = str(kwargs.get("fun_name", "?")).removeprefix("jit(").removesuffix(")")
    _sums[_BY_NAME + name][column] += seconds
    sums = _sums[_current["file"]]
    if column == "compile":
        column = "eager" if seconds < SMALL_S else "programs"
        sums[column + "_n"] += 1
    sums[column] += seconds


monitoring.register_event_duration_secs_listener(_listen)


def pytest_runtest_setup(item):
    _current["file"] = item.nodeid.split("::")[0]


def pytest_runtest_logreport(report):
    if "PYTEST_XDIST_WORKER" not in os.environ:  # the controller sees every worker's reports
        _sums[report.nodeid.split("::")[0]]["test_s"] += report.duration


def _directory() -> str:
    return os.environ.get("SPECJAX_TEST_SESSION_DIR") or os.getcwd()


def pytest_sessionfinish(session):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is not None:
        compiles = {f: {k: v for k, v in c.items() if k != "test_s"} for f, c in _sums.items()}
        with open(os.path.join(_directory(), _FILE.format(worker)), "w") as f:
            json.dump(compiles, f)


def pytest_terminal_summary(terminalreporter):
    total = collections.defaultdict(collections.Counter)
    for path in glob.glob(os.path.join(_directory(), _FILE.format("*"))):
        with open(path) as f:
            for name, sums in json.load(f).items():
                total[name].update(sums)
    for name, sums in _sums.items():  # the controller's own (all of it without xdist)
        total[name].update(sums)
    write = terminalreporter.write_line
    by_name = {k[len(_BY_NAME) :]: v for k, v in total.items() if k.startswith(_BY_NAME)}
    total = {k: v for k, v in total.items() if not k.startswith(_BY_NAME)}
    columns = ("test_s", "programs", "programs_n", "eager", "eager_n", "trace", "lower")
    write("compile profile (seconds; _n: counts), the 30 files with the most test seconds:")
    write(f"{'file':48s}" + "".join(f"{c:>11s}" for c in columns))
    rows = sorted(total.items(), key=lambda kv: -kv[1]["test_s"])
    for name, sums in rows[:30]:
        write(f"{name:48s}" + "".join(f"{sums[c]:11.0f}" for c in columns))
    grand = collections.Counter()
    for sums in total.values():
        grand.update(sums)
    write(f"{'all files':48s}" + "".join(f"{grand[c]:11.0f}" for c in columns))
    stages = tuple(_EVENTS.values())  # compile (programs and eager ops together), trace, lower
    write("the 15 jitted functions with the most compile + trace + lower seconds:")
    write(f"{'function':48s}" + "".join(f"{c:>11s}" for c in stages))
    ranked = sorted(by_name.items(), key=lambda kv: -sum(kv[1][c] for c in stages))
    for name, sums in ranked[:15]:
        write(f"{name[:48]:48s}" + "".join(f"{sums[c]:11.0f}" for c in stages))
