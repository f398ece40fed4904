"""Figures display inline in a real Jupyter kernel, and the library never switches the user's matplotlib backend.

The notebook is built here from a few cells on a tiny random model and executed with nbclient in a real ipykernel
("python3") whose environment has no MPLBACKEND, as a new user's would: ipykernel then selects its inline backend.
Every cell that ends in a result's ``.plot(...)`` must emit exactly one ``image/png`` (before and after the user
imports pyplot); a following plain ``plt.plot`` cell must still emit one (it would not if the library had switched
the backend to Agg); the backend printed at the end is the inline backend the kernel started with.
"""

import os

import nbformat
import pytest
from nbclient import NotebookClient

PLOT_CELLS = [
    'interp.logit_lens(model, "abc").plot()',
    'interp.attention(model, "abcd").plot(0, 1)',
    'interp.attention(model, "abcd").plot_layer(1)',
    'interp.decompose(model, "abc").plot()',
    'interp.direct_logit_attribution(model, "abc", "d").plot()',
    'interp.neurons(model, 0).activations("abcd").plot()',
]
# after the user's own pyplot cell, ipykernel's inline figure formatter is active too: still one image per cell
AFTER_PYPLOT = 'interp.logit_lens(model, "abcd").plot()'


def kernel_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env["HF_HUB_OFFLINE"] = "1"
    return env


def images(cell, output_type=None) -> list:
    return [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})
            and (output_type is None or o["output_type"] == output_type)]


def streamed(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o["output_type"] == "stream" and o.get("name") == "stdout")


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    sources = (["import matplotlib\nprint(matplotlib.get_backend())",
                "import interp\nmodel = interp.load_tiny(\"llama\")"]
               + PLOT_CELLS
               + ["import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])",
                  AFTER_PYPLOT,
                  "import os, matplotlib\nprint(matplotlib.get_backend())\nprint(os.environ.get('MPLBACKEND'))"])
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cwd = tmp_path_factory.mktemp("kernel")
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}) \
        .execute(env=kernel_env(), cwd=str(cwd))
    return nb


def test_no_cell_raised(executed):
    errors = [(i, o.get("ename"), o.get("evalue")) for i, c in enumerate(executed.cells)
              for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert not errors


@pytest.mark.parametrize("source", PLOT_CELLS + [AFTER_PYPLOT])
def test_a_plot_cell_shows_its_figure(executed, source):
    cell = next(c for c in executed.cells if c.source == source)
    shown = images(cell)
    assert shown, f"{source!r} displayed no image/png; outputs: {[o.get('data', o) for o in cell.outputs]}"
    # exactly one: the library leaves no figure open in pyplot for the inline backend to show a second time
    assert len(shown) == 1, f"{source!r} displayed {len(shown)} images"


def test_the_users_own_pyplot_figure_still_shows_after_the_library_plotted(executed):
    cell = next(c for c in executed.cells if c.source.startswith("import matplotlib.pyplot as plt"))
    assert len(images(cell, "display_data")) == 1, [o.get("data", o) for o in cell.outputs]


def test_the_library_did_not_switch_the_backend(executed):
    before = streamed(executed.cells[0]).strip()
    after, env_backend = streamed(executed.cells[-1]).strip().splitlines()
    assert "inline" in before.lower(), f"the kernel did not start on its inline backend: {before!r}"
    assert after == before, f"backend was {before!r} before the library plotted, {after!r} after"
    assert "inline" in env_backend and "agg" not in env_backend.lower()
