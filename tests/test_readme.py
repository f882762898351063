"""The README's code runs as written (issue #21).

Every ```python block of README.md is executed, each in a fresh namespace, on CPU (`ruff
format --check` in CI already keeps them formatted). A block that cannot run here (it needs
files we do not ship) is preceded by `<!-- no-run: reason -->`; the reason is required, and
such blocks must still define every name they use (checked statically, as for every block).
The theory example's numbers are checked against what its command computes.
"""

import ast
import builtins
import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
NO_RUN = re.compile(r"<!--\s*no-run:(.*?)-->")
# Blocks allowed to be skipped: keep this list short (each needs files the CI does not have, or
# minutes: the real-model block fetches and compiles SmolLM2; tests/test_real_model_hf.py runs it).
MAX_NO_RUN = 2


def _blocks():
    """[(first code line number, source, no-run reason or None)] of README's python blocks."""
    lines = README.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i + 1
            end = next(j for j in range(start, len(lines)) if lines[j].strip() == "```")
            marker = NO_RUN.search(lines[i - 1]) if i else None
            reason = None if marker is None else marker.group(1).strip()
            blocks.append((start + 1, "\n".join(lines[start:end]) + "\n", reason))
            i = end
        i += 1
    return blocks


BLOCKS = _blocks()


def _undefined_names(source: str) -> set:
    """Names a block reads but never binds (imports, assignments, defs, arguments, loops)."""
    tree = ast.parse(source)
    bound, loaded = set(dir(builtins)), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return loaded - bound


def test_readme_has_python_blocks_and_few_no_run_markers():
    assert len(BLOCKS) >= 8
    text = README.read_text(encoding="utf-8")
    markers = NO_RUN.findall(text)
    assert len(markers) == sum(reason is not None for _, _, reason in BLOCKS), (
        "every <!-- no-run: ... --> marker must sit on the line just before a ```python fence"
    )
    for reason in markers:
        assert len(reason.strip()) >= 20, f"a no-run marker needs a reason, got {reason!r}"
    assert len(markers) <= MAX_NO_RUN


@pytest.mark.parametrize("line, source, reason", BLOCKS, ids=[f"line{b[0]}" for b in BLOCKS])
def test_block_defines_every_name_it_uses(line, source, reason):
    del reason
    assert not _undefined_names(source), f"README.md:{line} uses undefined names"


RUNNABLE = [b for b in BLOCKS if b[2] is None]


@pytest.mark.parametrize("line, source, reason", RUNNABLE, ids=[f"line{b[0]}" for b in RUNNABLE])
def test_block_runs(line, source, reason):
    del reason
    code = compile(source, f"README.md:{line}", "exec")
    exec(code, {"__name__": "__readme__"})  # a fresh namespace per block


def test_theory_example_matches_its_command():
    """The text quotes the second theory command's best γ and speedups; recompute them."""
    from configs import theory as theory_config
    from experiments import theory

    text = README.read_text(encoding="utf-8")
    command = re.search(r"--config=configs/theory\.py:alpha=([\d.]+),c=([\d.]+)", text)
    example = re.search(
        r"Example \(the second\s+command\): α = ([\d.]+), c = ([\d.]+)\s+→ best γ = (\d+), "
        r"([\d.]+)×; with the CPU cost curve\s+→ γ = (\d+), ([\d.]+)×",
        text,
    )
    assert command and example
    assert example.group(1, 2) == command.group(1, 2)
    config = theory_config.get_config(f"alpha={command.group(1)},c={command.group(2)}")
    result = theory.compute(config)
    assert int(example.group(3)) == result["formula"]["optimal_gamma"][0]
    assert float(example.group(4)) == round(result["formula"]["best_speedup"][0], 2)
    assert int(example.group(5)) == result["measured"]["optimal_gamma"][0]
    assert float(example.group(6)) == round(result["measured"]["best_speedup"][0], 2)
