"""The README's Quickstart runs as written, on the embedded model, and leaves the weights as it found them.

The ```python block under "## Quickstart" is run in a fresh interpreter (as a reader would paste it), split at its
ROME edit so that the weights digest can be taken just before the edit; after the whole block (which reverts the
edit) the digest must be the same. On a machine without cached key statistics the edit first collects them.
"""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

README = Path(__file__).parent.parent / "README.md"


def quickstart_block() -> str:
    text = README.read_text(encoding="utf-8")
    section = re.search(r"^## Quickstart\s*$(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert section, "README.md has no '## Quickstart' section"
    block = re.search(r"^```python\n(.*?)^```", section.group(1), re.MULTILINE | re.DOTALL)
    assert block, "the Quickstart section has no ```python block"
    return block.group(1)


def test_the_quickstart_block_is_found_and_edits_then_reverts():
    code = quickstart_block()
    assert "interp.load(" in code and "rome.edit(" in code and ".revert()" in code


DRIVER = textwrap.dedent("""
    import json, sys
    code = open(sys.argv[1], encoding="utf-8").read()
    lines = code.splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "rome.edit(" in line)
    scope = {"__name__": "__main__"}
    exec(compile("".join(lines[:cut]), "README Quickstart", "exec"), scope)
    before = scope["model"].weights_digest()
    exec(compile("\\n" * cut + "".join(lines[cut:]), "README Quickstart", "exec"), scope)
    after = scope["model"].weights_digest()
    print("DIGESTS " + json.dumps({"before_edit": before, "after_block": after}))
""")


@pytest.mark.slow
def test_readme_quickstart_runs_and_reverts_its_edit(tmp_path):
    block = tmp_path / "quickstart.py"
    block.write_text(quickstart_block(), encoding="utf-8")
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env.update(HF_HUB_OFFLINE="1", MPLBACKEND="Agg")       # a script: no display, and nothing reaches a hub
    proc = subprocess.run([sys.executable, str(driver), str(block)], cwd=tmp_path, env=env, check=False,
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, f"the README Quickstart raised:\n{proc.stderr[-4000:]}"
    line = next((x for x in proc.stdout.splitlines() if x.startswith("DIGESTS ")), None)
    assert line, f"the driver printed no digests:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    digests = json.loads(line[len("DIGESTS "):])
    assert digests["after_block"] == digests["before_edit"], "the Quickstart left the weights edited"


# Every name a notebook uses is public and listed in the README's API table.

NOTEBOOKS = sorted((README.parent / "notebooks").glob("*.ipynb"))
PUBLIC_MODULES = ("interp", "interp.rome", "interp.memit", "interp.patching", "interp.induction", "interp.features")
MODEL_NAMES = ("model", "m", "exact", "toy")        # the notebooks' variables that hold an interp.Model


def _notebook_names(path) -> tuple[set[str], list[str]]:
    """(every ``interp`` name and ``model.<attr>`` the notebook's code uses, imports from non-public modules)."""
    import ast

    import nbformat

    alias, used, private = {}, set(), []
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        tree = ast.parse("\n".join(ln for ln in cell.source.splitlines() if not ln.lstrip().startswith(("%", "!"))))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                alias.update({a.asname or a.name: a.name for a in node.names if a.name.startswith("interp")})
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("interp"):
                if node.module not in PUBLIC_MODULES:
                    private.append(node.module)
                for a in node.names:
                    alias[a.asname or a.name] = f"{node.module}.{a.name}"
                    used.add(f"{node.module}.{a.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id in alias:
                    used.add(f"{alias[node.value.id]}.{node.attr}")
                elif node.value.id in MODEL_NAMES:
                    used.add(f"model.{node.attr}")
    return used, private


def _api_section() -> str:
    text = README.read_text()
    return text[text.index("## Public API"):text.index("## Command line")]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebooks_use_only_the_public_api_and_the_readme_lists_it(path):
    used, private = _notebook_names(path)
    assert not private, f"{path.name} imports from {sorted(set(private))}: use {PUBLIC_MODULES}"
    api = _api_section()
    missing = sorted(n for n in used
                     if not re.search(rf"(?<![\w]){re.escape(n.split('.')[-1])}\b", api)
                     and n.split(".")[-1] not in {m.split(".")[-1] for m in PUBLIC_MODULES})
    assert not missing, f"{path.name} uses names the README's Public API section does not list: {missing}"
