"""The library's import graph points one way, module by module: no cycle, no upward arrow.

Nodes are specjax's modules (`specjax.decoding.rules.block`; a package is its `__init__`), and an
arrow is an import anywhere in a module, inside functions included (parsed with `ast`, nothing
is executed). `import a.b.c` and `from a.b import c` are arrows to `a.b.c`; `from a.b import
name` is an arrow to `a.b`. Importing `a.b.c` runs `a/__init__.py` and `a/b/__init__.py` first,
but that is not counted as an arrow: a package's `__init__` that imports its own modules is the
package's facade, and a module that imports its facade back is the cycle we look for.

Three checks:
  * no cycle among modules (`module_cycles`): a lazy import inside a function is still an arrow,
    so the cycle `acceptance.py` <-> `block.py` of 88c36a1 would be caught;
  * floors between the top-level nodes (`FLOORS`): a module may import modules of its own node,
    of nodes on its floor, or below; the library never imports `experiments/`, `configs/` or
    `scripts/`;
  * rooms inside `specjax.decoding` (`DECODING_FLOORS`): the top-level modules (loop, state,
    sampling, ...) import no room; rules, drafters and trees do not import decoders; nothing
    in the package imports its facade.

    python tests/test_layering.py     # prints the arrows and the counts
"""

from __future__ import annotations

import ast
import collections
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "specjax"

# Floors, lowest first: a node may import nodes on its own floor (without a cycle) or below.
FLOORS = {
    # Helpers with no specjax dependency beyond each other.
    "specjax.checks": 0,
    "specjax.runtime": 0,
    # CPU kernels behind jax.ffi (C++ sources and their JAX wrappers).
    "specjax.kernels": 0,
    "specjax.theory": 0,
    "specjax.plotting": 0,
    # Models and data know nothing of decoding or training.
    "specjax.data": 1,
    "specjax.models": 1,
    # Decoding, sharding, checkpoints and converters use models.
    "specjax.decoding": 2,
    "specjax.sharding": 2,
    "specjax.checkpoint": 2,
    "specjax.convert": 2,
    # Measurements use models, data and decoding.
    "specjax.alpha": 3,
    "specjax.benchmark": 3,
    "specjax.rank_acceptance": 3,
    # The lossless test kit checks decoding's acceptance rules (and any user's).
    "specjax.testing": 3,
    # Training uses all of the above.
    "specjax.training": 4,
    # Loading a model + tokenizer from a path (checkpoints, HF conversion, the byte tokenizer).
    "specjax.pretrained": 3,
    # The one-call text API builds on decoding, loading and timing.
    "specjax.pipeline": 4,
    # The package's own __init__ re-exports the top of the library (`specjax.Pipeline`, lazily),
    # so it sits above everything; nothing in the library imports bare `specjax`.
    "specjax": 5,
}
OUTSIDE = ("experiments", "configs", "scripts", "tests")

# Inside specjax.decoding: a module may import its own room, rooms on its floor (without a
# cycle) or below. Top-level modules (loop.py, sampling.py, ...) are the room "".
DECODING = "specjax.decoding"
DECODING_FLOORS = {
    "": 0,  # loop, state, stats, prompts, prefill, sampling, categorical, argmax
    "rules": 1,
    "drafters": 1,
    "trees": 1,
    "decoders": 2,
    "facade": 3,  # specjax/decoding/__init__.py
}


def _module_name(path: str, root: str) -> str:
    rel = os.path.relpath(path, root)[: -len(".py")].split(os.sep)
    if rel[-1] == "__init__":
        rel = rel[:-1]
    return ".".join(rel)


def _is_module(name: str, root: str) -> bool:
    path = os.path.join(root, *name.split("."))
    return os.path.isdir(path) or os.path.exists(path + ".py")


def _imports(path: str, root: str) -> set[str]:
    """Absolute names of the modules a file imports, at any depth (relative imports resolved)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    here = _module_name(path, root)
    is_package = path.endswith("__init__.py")
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = here.split(".")
                parent = parent if is_package else parent[:-1]
                parent = parent[: len(parent) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if _is_module(sub, root) else base)
    return out


def module_graph(root: str = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    """{module: the modules it imports}: every module of `package` under `root`, imports of
    the package's own modules and of the checkout directories (`OUTSIDE`), self-imports left
    out."""
    graph = {}
    for dirpath, _, files in os.walk(os.path.join(root, package)):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            here = _module_name(path, root)
            graph[here] = {
                target
                for target in _imports(path, root)
                if target.split(".")[0] in (package, *OUTSIDE) and target != here
            }
    return graph


def module_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each one holds a cycle)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(out)


def _node(module: str) -> str:
    """The floor node of a module: `specjax` itself, or its top-level module or subpackage."""
    return ".".join(module.split(".")[:2])


def import_graph() -> dict[tuple[str, str], list[str]]:
    """{(from node, to node): [the importing modules]} between top-level nodes."""
    arrows = collections.defaultdict(list)
    for module, targets in module_graph().items():
        src = _node(module)
        for target in targets:
            top = target.split(".")[0]
            dst = _node(target) if top == PACKAGE else top
            if dst != src:
                arrows[(src, dst)].append(module)
    return dict(arrows)


def _reachable(arrows, start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        for a, b in arrows:
            if a == node and b not in seen:
                seen.add(b)
                todo.append(b)
    return seen


def upward_arrows(arrows) -> list[tuple[str, str, str]]:
    """[(from, to, why)] for arrows to a higher floor, in a cycle, or out of the library."""
    out = []
    for a, b in sorted(arrows):
        if b in OUTSIDE:
            out.append((a, b, "the library imports a checkout directory"))
        elif a not in FLOORS or b not in FLOORS:
            out.append((a, b, "node without a floor: add it to FLOORS in tests/test_layering.py"))
        elif FLOORS[b] > FLOORS[a]:
            out.append((a, b, f"floor {FLOORS[a]} imports floor {FLOORS[b]}"))
        elif FLOORS[b] == FLOORS[a] and a in _reachable(arrows, b):
            out.append((a, b, "cycle"))
    return out


def _room(module: str) -> str:
    """A decoding module's room: "rules", "drafters", "trees", "decoders", "" or "facade"."""
    if module == DECODING:
        return "facade"
    rest = module[len(DECODING) + 1 :].split(".")
    return rest[0] if len(rest) > 1 or rest[0] in DECODING_FLOORS else ""


def room_violations(graph: dict[str, set[str]]) -> list[tuple[str, str, str]]:
    """[(module, target, why)] for imports inside specjax.decoding that point up a room."""
    out = []
    for module, targets in sorted(graph.items()):
        if not (module == DECODING or module.startswith(DECODING + ".")):
            continue
        for target in sorted(targets):
            if not (target == DECODING or target.startswith(DECODING + ".")):
                continue
            a, b = _room(module), _room(target)
            if a not in DECODING_FLOORS or b not in DECODING_FLOORS:
                out.append((module, target, "room without a floor: add it to DECODING_FLOORS"))
            elif DECODING_FLOORS[b] > DECODING_FLOORS[a]:
                out.append((module, target, f"room {a or 'top'!r} imports room {b!r}"))
    return out


def test_no_module_cycles():
    graph = module_graph()
    assert len(graph) > 50, "the graph is nearly empty: the walk missed the modules"
    cycles = module_cycles(graph)
    assert not cycles, "import cycles between modules:\n" + "\n".join(map(str, cycles))


def test_no_upward_arrows():
    arrows = import_graph()
    assert arrows, "the graph is empty: the parser missed the imports"
    bad = upward_arrows(arrows)
    assert not bad, "\n".join(f"{a} -> {b} ({why}): {arrows[(a, b)]}" for a, b, why in bad)


def test_decoding_rooms_point_down():
    bad = room_violations(module_graph())
    assert not bad, "\n".join(f"{a} -> {b} ({why})" for a, b, why in bad)


def test_the_parser_sees_known_arrows():
    # A test that cannot fail is a defect: the graphs must contain arrows we know exist.
    assert ("specjax.decoding", "specjax.models") in import_graph()
    graph = module_graph()
    assert "specjax.decoding.rules._common" in graph["specjax.decoding.rules.block"]
    assert "specjax.decoding.loop" in graph["specjax.decoding.decoders.steps"]


def _plant(tmp_path, files: dict[str, str]) -> dict[str, set[str]]:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return module_graph(str(tmp_path), "pkg")


def test_a_planted_cycle_through_a_lazy_import_is_caught(tmp_path):
    # The 88c36a1 cycle's shape: one module imports the other at the top, the other imports it
    # back inside a function (executed on first use only, so Python never complained).
    graph = _plant(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/rules/__init__.py": "",
            "pkg/rules/acceptance.py": (
                "def __getattr__(name):\n    from pkg.rules.block import block_accept\n"
                "    return block_accept\n"
            ),
            "pkg/rules/block.py": "from pkg.rules.acceptance import _check_args\n",
            "pkg/other.py": "import pkg.rules.block\n",
        },
    )
    assert module_cycles(graph) == [["pkg.rules.acceptance", "pkg.rules.block"]]


def test_a_module_importing_its_own_facade_is_a_cycle(tmp_path):
    graph = _plant(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.loop import run\n\nLIMIT = 8\n",
            "pkg/loop.py": "from pkg import helper\n\n\ndef run():\n    from pkg import LIMIT\n",
            "pkg/helper.py": "",
        },
    )
    # `from pkg import helper` is an arrow to the module, `from pkg import LIMIT` to the facade.
    assert graph["pkg.loop"] == {"pkg", "pkg.helper"}
    assert module_cycles(graph) == [["pkg", "pkg.loop"]]


def test_a_room_importing_a_decoder_is_caught():
    graph = {
        "specjax.decoding.rules.block": {"specjax.decoding.decoders.speculative"},
        "specjax.decoding.loop": {"specjax.decoding.drafters.base"},
        "specjax.decoding.decoders.tree": {"specjax.decoding.trees.topology"},
    }
    bad = {(a, b) for a, b, _ in room_violations(graph)}
    assert bad == {
        ("specjax.decoding.rules.block", "specjax.decoding.decoders.speculative"),
        ("specjax.decoding.loop", "specjax.decoding.drafters.base"),
    }


if __name__ == "__main__":
    graph = import_graph()
    for (a, b), modules in sorted(graph.items()):
        print(f"{a} -> {b}  ({', '.join(sorted(set(modules)))})")
    bad = upward_arrows(graph)
    for a, b, why in bad:
        print(f"UPWARD {a} -> {b}: {why}")
    modules = module_graph()
    cycles = module_cycles(modules)
    for cycle in cycles:
        print(f"CYCLE {' <-> '.join(cycle)}")
    rooms = room_violations(modules)
    for a, b, why in rooms:
        print(f"ROOM {a} -> {b}: {why}")
    arrows = sum(len(t) for t in modules.values())
    print(
        f"{len(modules)} modules, {arrows} module arrows, {len(cycles)} cycles; "
        f"{len(graph)} node arrows, {len(bad)} upward; {len(rooms)} room violations"
    )
    sys.exit(1 if bad or cycles or rooms else 0)
