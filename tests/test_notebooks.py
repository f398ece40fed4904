"""Every notebook in notebooks/ runs top to bottom, offline, without a cell error."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def test_the_notebooks_are_there():
    names = {p.name for p in NOTEBOOKS}
    for expected in ("00_quickstart.ipynb", "01_residual_stream_and_logit_lens.ipynb", "02_attention_patterns.ipynb",
                     "03_ffn_neurons.ipynb", "04_induction_heads.ipynb", "05_rome_fact_editing.ipynb"):
        assert expected in names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
