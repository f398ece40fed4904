"""The notebooks in notebooks/: each runs top to bottom, offline, without a cell error, in a real kernel with
ipykernel's own (inline) backend; and each is committed executed, so that a reader browsing the repository sees
its outputs and figures. ``python notebooks/execute.py`` rebuilds and executes them in place."""

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOK_DIR = Path(__file__).parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
IDS = [p.name for p in NOTEBOOKS]
PLOT_CALL = re.compile(r"\.plot(_\w+)?\(")     # res.plot(...), res.plot_layer(...), dla.plot_heads(...)
VIEW_CALL = re.compile(r"\.show\(")               # res.show(...): the interactive view, an <iframe> of HTML
VIEW_MAX_BYTES = 400_000                          # per view output, so the committed notebooks stay small


def _execute_module():
    spec = importlib.util.spec_from_file_location("notebooks_execute", NOTEBOOK_DIR / "execute.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _code_cells(nb):
    return [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]


def _where(path, i, cell, pattern=None):
    """``NAME cell I ('its line')``: the first line matching ``pattern``, else the cell's first line."""
    lines = cell.source.strip().splitlines() or [""]
    line = next((x for x in lines if pattern is not None and pattern.search(x)), lines[0])
    return f"{path.name} cell {i} ({line.strip()[:60]!r})"


def _plot_cells_without_figure(path, nb):
    return [_where(path, i, c, PLOT_CALL) for i, c in _code_cells(nb)
            if PLOT_CALL.search(c.source) and not any("image/png" in o.get("data", {}) for o in c.get("outputs", []))]


def _views(cell) -> list[str]:
    return [o["data"]["text/html"] for o in cell.get("outputs", [])
            if "<iframe" in (o.get("data", {}).get("text/html") or "")]


def _view_cells_without_view(path, nb):
    return [_where(path, i, c, VIEW_CALL) for i, c in _code_cells(nb) if VIEW_CALL.search(c.source) and not _views(c)]


def test_the_notebooks_are_there():
    names = {p.name for p in NOTEBOOKS}
    for expected in ("00_quickstart.ipynb", "01_residual_stream_and_logit_lens.ipynb", "02_attention_patterns.ipynb",
                     "03_ffn_neurons.ipynb", "04_induction_heads.ipynb", "05_rome_fact_editing.ipynb",
                     "06_activation_patching.ipynb"):
        assert expected in names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_executes(path, monkeypatch):
    """Executed as ``notebooks/execute.py`` does: fresh python3 kernel, cwd notebooks/, HF_HUB_OFFLINE=1 and no
    MPLBACKEND in the kernel's environment (so the inline backend is active, as for a user)."""
    monkeypatch.delenv("MPLBACKEND", raising=False)
    nb = nbformat.read(path, as_version=4)
    _execute_module().execute(nb, NOTEBOOK_DIR, timeout=900)
    errors = [(_where(path, i, c), o.get("ename"), o.get("evalue")) for i, c in _code_cells(nb)
              for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    missing = _plot_cells_without_figure(path, nb)
    assert not missing, f"plot cells that displayed no figure: {missing}"
    missing = _view_cells_without_view(path, nb)
    assert not missing, f"view cells that displayed no view: {missing}"


# The committed files themselves, read without executing anything.

@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_committed_notebook_shows_its_views(path):
    """Each analysis notebook shows an interactive view next to its static plot; views stay small."""
    nb = nbformat.read(path, as_version=4)
    missing = _view_cells_without_view(path, nb)
    assert not missing, (f"{path.name}: view cells committed without their HTML view: {missing}. "
                         f"Run: .venv/bin/python notebooks/execute.py {path.name[:2]}")
    views = [v for _, c in _code_cells(nb) for v in _views(c)]
    if path.name[:2] in ("01", "02", "03", "04", "05"):
        assert views, f"{path.name} shows no interactive view"
    big = [len(v) for v in views if len(v) > VIEW_MAX_BYTES]
    assert not big, f"{path.name}: views of {big} bytes; narrow them (layers=, heads=, positions=)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_committed_notebook_is_executed(path):
    nb = nbformat.read(path, as_version=4)
    not_run = [_where(path, i, c) for i, c in _code_cells(nb) if c.source.strip() and c.execution_count is None]
    assert not not_run, (f"{path.name} is committed unexecuted: {len(not_run)} code cells have no execution count, "
                         f"first {not_run[0]}. Run: .venv/bin/python notebooks/execute.py {path.name[:2]}")
    errors = [_where(path, i, c) for i, c in _code_cells(nb) for o in c.get("outputs", [])
              if o.output_type == "error"]
    assert not errors, f"{path.name} is committed with error outputs in {errors}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_committed_notebook_shows_its_figures(path):
    nb = nbformat.read(path, as_version=4)
    missing = _plot_cells_without_figure(path, nb)
    assert not missing, (f"{path.name}: plot cells committed without an image/png output: {missing}. "
                         f"Run: .venv/bin/python notebooks/execute.py {path.name[:2]}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_committed_notebook_matches_its_builder(path, tmp_path):
    """The builder script (``_make_NN.py`` / ``build_NN_*.py``) holds the text; the committed notebook must be what
    it writes (then executed), so an edit to one is not lost in the other."""
    import shutil
    import subprocess
    import sys

    builder = _execute_module().builder_for(path)
    if builder is None:
        pytest.skip(f"{path.name} has no builder script")
    shutil.copy(builder, tmp_path / builder.name)
    subprocess.run([sys.executable, builder.name], cwd=tmp_path, check=True, capture_output=True)
    built = nbformat.read(tmp_path / path.name, as_version=4)
    committed = nbformat.read(path, as_version=4)
    assert [(c.cell_type, c.source) for c in committed.cells] == [(c.cell_type, c.source) for c in built.cells], \
        f"{path.name} differs from what {builder.name} writes: run .venv/bin/python notebooks/execute.py {path.name[:2]}"
