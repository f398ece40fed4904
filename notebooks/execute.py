"""Rebuild and execute the notebooks in place, so that they are committed with their outputs (figures included).

    .venv/bin/python notebooks/execute.py               # every notebook
    .venv/bin/python notebooks/execute.py 00 03         # only those whose file name starts with 00 or 03
    .venv/bin/python notebooks/execute.py --no-build 01 # execute the .ipynb as it is (do not rerun its builder)
    .venv/bin/python notebooks/execute.py --build-only  # only rewrite the notebooks from their builders (no outputs)

Each notebook is first rewritten from its builder script (``_make_NN.py`` or ``build_NN_*.py``, which hold the
notebook's text), then executed top to bottom with nbclient in a fresh ``python3`` kernel, working directory
``notebooks/``, offline (``HF_HUB_OFFLINE=1``) and with ``MPLBACKEND`` removed from the kernel's environment, so
ipykernel's inline backend is active and every figure is stored as an inline PNG (library figures render at
dpi 100). A notebook is written back only when every cell ran without an error; otherwise the script reports
the failing cell and exits with status 1 (the notebook is then left as its builder wrote it, without outputs).
Cell ids are set from the cell's position, so a rebuild changes no line of a notebook whose text and outputs did
not change.

The tests use :func:`kernel_env` and :func:`execute` from here, so a notebook runs the same way in both.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def kernel_env() -> dict[str, str]:
    """The environment the kernel starts with: ours, offline, and without ``MPLBACKEND`` (ipykernel then selects
    its inline backend; ``MPLBACKEND=Agg`` would make every ``plt`` figure vanish)."""
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env["HF_HUB_OFFLINE"] = "1"
    return env


def execute(nb, cwd: str | Path = HERE, timeout: int = 1800):
    """Execute ``nb`` (an nbformat notebook) in place in a fresh ``python3`` kernel; raises on the first cell
    error (``nbclient.exceptions.CellExecutionError``). Returns ``nb``."""
    from nbclient import NotebookClient

    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(cwd)}})
    client.execute(env=kernel_env(), cwd=str(cwd))
    return nb


def builder_for(notebook: Path) -> Path | None:
    """``_make_NN.py`` or ``build_NN_*.py`` next to ``NN_*.ipynb``, if there is one."""
    prefix = notebook.name.split("_", 1)[0]
    found = sorted(notebook.parent.glob(f"_make_{prefix}.py")) + sorted(notebook.parent.glob(f"build_{prefix}_*.py"))
    return found[0] if found else None


def stable_ids(nb):
    """Cell ids from the cell's position (``cell-00``, ...) instead of nbformat's random ones, so that rebuilding
    a notebook changes no line of its file unless its text or outputs changed."""
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:02d}"
    return nb


def png_bytes(nb) -> tuple[int, int]:
    """(number of PNG outputs, their total size in bytes as stored, base64)."""
    pngs = [o["data"]["image/png"] for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if "image/png" in o.get("data", {})]
    return len(pngs), sum(len(p) for p in pngs)


def main(argv=None) -> int:
    import nbformat
    from nbclient.exceptions import CellExecutionError

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("only", nargs="*", help="file-name prefixes to execute (default: every notebook)")
    ap.add_argument("--no-build", action="store_true", help="do not rerun the builder scripts first")
    ap.add_argument("--build-only", action="store_true", help="rewrite the notebooks from their builders, no execution")
    ap.add_argument("--timeout", type=int, default=1800, help="per-cell timeout in seconds (default 1800)")
    args = ap.parse_args(argv)

    notebooks = [p for p in sorted(HERE.glob("*.ipynb")) if not args.only or p.name.startswith(tuple(args.only))]
    if not notebooks:
        print(f"no notebook in {HERE} matches {args.only}", file=sys.stderr)
        return 2
    failed = []
    for path in notebooks:
        builder = None if args.no_build else builder_for(path)
        if builder is not None:
            subprocess.run([sys.executable, builder.name], cwd=HERE, check=True, stdout=subprocess.DEVNULL)
        nb = stable_ids(nbformat.read(path, as_version=4))
        if builder is not None:
            nbformat.write(nb, path)
        if args.build_only:
            print(f"built {path.name}" + (f" from {builder.name}" if builder else " (no builder: unchanged)"))
            continue
        t0 = time.perf_counter()
        try:
            execute(nb, HERE, args.timeout)
        except CellExecutionError as err:
            failed.append(path.name)
            print(f"FAILED {path.name} ({time.perf_counter() - t0:.0f} s): not written back\n{err}", file=sys.stderr)
            continue
        nbformat.write(nb, path)
        n, size = png_bytes(nb)
        print(f"executed {path.name}{' (rebuilt from ' + builder.name + ')' if builder else ''}: "
              f"{time.perf_counter() - t0:.0f} s, {n} figures, {size / 1024:.0f} KiB of PNG, "
              f"file {path.stat().st_size / 1024:.0f} KiB", flush=True)
    if failed:
        print(f"{len(failed)} notebook(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
