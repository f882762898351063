"""The notebooks in notebooks/: committed without outputs, and each runs top to bottom.

Execution: every notebook in its small mode (SPECJAX_NOTEBOOK_SMALL=1: seconds-sized models and
measurements) in a fresh Jupyter kernel, cell by cell, started in a notebooks/ directory beside
links to the checkout's code (so its install cell finds the repository root through `..`, as in a
checkout, and its runs/ land in a temporary directory); any cell that raises fails the test with the
cell's traceback. A setup cell (`KERNEL_SETUP`, the session's gc threshold; measured on this file at
-n 0, alternating runs: 67.1 / 63.8 s without, 56.8 / 59.8 s with) runs first in each kernel. The
notebooks use the test session's model cache (SPECJAX_CACHE, tests/conftest.py), so the tiny models
are trained once per session, by whoever asks first. Needs nbclient, nbformat and ipykernel (the
`[test]` extra).
"""

import glob
import os

import pytest
from gc_setting import KERNEL_SETUP  # run first in each test kernel (not part of the notebooks)

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(ROOT, "notebooks")
# In the order they run: quickstart trains the models the others load from the shared cache.
NAMES = ("quickstart", "reproduce_leviathan2023", "bring_your_own_models", "trees")
CELL_TIMEOUT_S = 600


def stored_outputs(notebook) -> list[str]:
    """Where a notebook carries outputs or execution counts: ["cell 3: outputs", ...]."""
    problems = []
    for i, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        if cell.get("outputs"):
            problems.append(f"cell {i}: outputs")
        if cell.get("execution_count") is not None:
            problems.append(f"cell {i}: execution_count")
    return problems


def _read(name: str):
    return nbformat.read(os.path.join(NOTEBOOKS, f"{name}.ipynb"), as_version=4)


def test_every_notebook_is_listed_here():
    found = sorted(os.path.basename(p)[: -len(".ipynb")] for p in glob.glob(f"{NOTEBOOKS}/*.ipynb"))
    assert found == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_committed_without_outputs(name):
    problems = stored_outputs(_read(name))
    assert not problems, (
        f"notebooks/{name}.ipynb was committed with {problems}; clear them "
        "(Jupyter: Edit > Clear All Outputs) so diffs stay readable"
    )


def test_the_output_check_sees_outputs():
    # A check that cannot fail is a defect: an executed cell must be reported.
    notebook = _read("quickstart")
    assert stored_outputs(notebook) == []
    cell = next(i for i, c in enumerate(notebook.cells) if c.cell_type == "code")
    notebook.cells[cell].execution_count = 1
    notebook.cells[cell].outputs = [nbformat.v4.new_output("stream", text="hi")]
    assert stored_outputs(notebook) == [f"cell {cell}: outputs", f"cell {cell}: execution_count"]


@pytest.fixture(scope="module")
def small_mode(tmp_path_factory):
    """Environment of the kernels: small mode (the session's model cache is inherited)."""
    saved = {k: os.environ.get(k) for k in ("SPECJAX_NOTEBOOK_SMALL",)}
    os.environ["SPECJAX_NOTEBOOK_SMALL"] = "1"
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _checkout_view(tmp_path) -> str:
    """tmp_path/notebooks, beside links to the checkout's code: a notebook started there finds
    the repository root through `..` (as in a checkout) and writes its runs/ into tmp_path."""
    for part in ("specjax", "experiments", "configs"):
        os.symlink(os.path.join(ROOT, part), tmp_path / part)
    (tmp_path / "notebooks").mkdir()
    return str(tmp_path / "notebooks")


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_runs_top_to_bottom(name, small_mode, tmp_path):
    notebook = _read(name)
    notebook.cells.insert(0, nbformat.v4.new_code_cell(KERNEL_SETUP))
    client = nbclient.NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": _checkout_view(tmp_path)}},
    )
    client.execute()  # raises CellExecutionError naming the failing cell
    errors = [o for c in notebook.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
