"""The library's import graph points one way: no package imports a package above it.

Nodes are specjax's top-level modules and subpackages (`specjax.decoding`, `specjax.alpha`, ...);
an arrow is an import (at any depth of a module, parsed with `ast`, nothing is executed). A node's
floor is `FLOORS` below; an arrow to a higher floor is an upward arrow, and so is an arrow between
two nodes of one floor that import each other (directly or not). The library never imports
`experiments/`, `configs/` or `scripts/`.

    python tests/test_layering.py     # prints the arrows and the counts
"""

from __future__ import annotations

import ast
import collections
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "specjax")

# Floors, lowest first: a node may import nodes on its own floor (without a cycle) or below.
FLOORS = {
    # Helpers with no specjax dependency beyond each other.
    "specjax.checks": 0,
    "specjax.runtime": 0,
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


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, ROOT)[: -len(".py")].split(os.sep)
    if rel[-1] == "__init__":
        rel = rel[:-1]
    return ".".join(rel)


def _node(module: str) -> str:
    """The graph node of a module: `specjax` itself, or its top-level module or subpackage."""
    parts = module.split(".")
    return ".".join(parts[:2])


def _is_module(name: str) -> bool:
    path = os.path.join(ROOT, *name.split("."))
    return os.path.isdir(path) or os.path.exists(path + ".py")


def _imports(path: str) -> set[str]:
    """Absolute names of the modules a file imports (relative imports resolved)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    here = _module_name(path)
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
                out.add(sub if _is_module(sub) else base)
    return out


def import_graph() -> dict[tuple[str, str], list[str]]:
    """{(from node, to node): [the files importing]} over the library, self-arrows left out."""
    arrows = collections.defaultdict(list)
    for dirpath, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            src = _node(_module_name(path))
            for target in _imports(path):
                top = target.split(".")[0]
                if top not in ("specjax", *OUTSIDE):
                    continue
                dst = _node(target) if top == "specjax" else top
                if dst != src:
                    arrows[(src, dst)].append(os.path.relpath(path, ROOT))
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


def test_no_upward_arrows():
    arrows = import_graph()
    assert arrows, "the graph is empty: the parser missed the imports"
    bad = upward_arrows(arrows)
    assert not bad, "\n".join(f"{a} -> {b} ({why}): {arrows[(a, b)]}" for a, b, why in bad)


def test_the_parser_sees_a_known_arrow():
    # A test that cannot fail is a defect: the graph must contain an arrow we know exists.
    assert ("specjax.decoding", "specjax.models") in import_graph()


if __name__ == "__main__":
    graph = import_graph()
    for (a, b), files in sorted(graph.items()):
        print(f"{a} -> {b}  ({', '.join(sorted(set(files)))})")
    bad = upward_arrows(graph)
    for a, b, why in bad:
        print(f"UPWARD {a} -> {b}: {why}")
    nodes = {n for arrow in graph for n in arrow}
    print(f"{len(nodes)} nodes, {len(graph)} arrows, {len(bad)} upward")
    sys.exit(1 if bad else 0)
