"""Rebuild and execute the notebooks in place, so that they are committed with their outputs (figures included).

    .venv/bin/python notebooks/execute.py               # every notebook
    .venv/bin/python notebooks/execute.py 00 03         # only those whose file name starts with 00 or 03
    .venv/bin/python notebooks/execute.py --no-build 01 # execute the .ipynb as it is (do not rerun its builder)
    .venv/bin/python notebooks/execute.py --build-only  # only rewrite the notebooks from their builders (no outputs)
    .venv/bin/python notebooks/execute.py --text-only 01 # a prose-only change: rebuild, keep the committed outputs
    .venv/bin/python notebooks/execute.py --profile 09   # execute, print each cell's seconds, write nothing back

Each notebook is first rewritten from its builder script (``_make_NN.py`` or ``build_NN_*.py``, which hold the
notebook's text), then executed top to bottom with nbclient in a fresh ``python3`` kernel, working directory
``notebooks/``, offline (``HF_HUB_OFFLINE=1``) and with ``MPLBACKEND`` removed from the kernel's environment, so
ipykernel's inline backend is active and every figure is stored as an inline PNG (library figures render at
dpi 100). A notebook is written back only when every cell ran without an error; otherwise the script reports
the failing cell and exits with status 1 (the notebook is then left as its builder wrote it, without outputs).
Cell ids are set from the cell's position, so a rebuild changes no line of a notebook whose text and outputs did
not change. An executed notebook opens with a provenance cell (:func:`stamp`): the commit its code was at, the
date, the wall time and the machine; ``tests/test_notebooks.py`` executes each notebook again and compares what it
prints now with what is committed (:mod:`drift`), so a change that moves a number must re-execute the notebook.

The tests use :func:`kernel_env` and :func:`execute` from here, so a notebook runs the same way in both.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
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


# Run in the kernel before the notebook: every figure the notebook displays or saves is drawn once more, recording
# each text drawn, and a text whose box leaves the figure's canvas is noted (a cut title, a tick off the edge).
FIGURE_CHECK = r"""
import json as _json
import matplotlib.backend_bases as _mb
import matplotlib.text as _mt
_interp_outside = []
def _interp_check(fig):
    drawn, draw = [], _mt.Text.draw
    def _record(self, renderer):
        draw(self, renderer)
        if self.get_visible() and self.get_text().strip():
            drawn.append((self, renderer))
    _mt.Text.draw = _record
    try:
        fig.draw_without_rendering()
    finally:
        _mt.Text.draw = draw
    box = fig.bbox
    for t, r in drawn:
        e = t.get_window_extent(r)
        if e.x0 < box.x0 - 1 or e.y0 < box.y0 - 1 or e.x1 > box.x1 + 1 or e.y1 > box.y1 + 1:
            titles = [x.get_text() for x, _ in drawn if x in fig.texts or any(x is a.title for a in fig.axes)]
            title = titles[0] if titles else ""
            _interp_outside.append(f"{t.get_text()[:40]!r} (in the figure drawn with {title[:40]!r})")
_print_figure = _mb.FigureCanvasBase.print_figure
def _checked(self, *args, **kwargs):
    try:
        _interp_check(self.figure)
    except Exception as err:
        _interp_outside.append(f"figure check failed: {err!r}")
    return _print_figure(self, *args, **kwargs)
_mb.FigureCanvasBase.print_figure = _checked
"""
FIGURE_REPORT = "print(_json.dumps(sorted(set(_interp_outside))))"

# Run in the kernel first when INTERP_KERNEL_THREADS is set (the test suite's workers set it to 1): the notebook's
# own torch.set_num_threads(2) is capped at that, so a kernel does not contend with the worker beside it. Without
# the variable (a reader, `execute.py` itself) nothing changes.
THREAD_CAP = r"""
import os as _os
if _os.environ.get("INTERP_KERNEL_THREADS"):
    import torch as _torch
    _interp_cap, _interp_set = int(_os.environ["INTERP_KERNEL_THREADS"]), _torch.set_num_threads
    _torch.set_num_threads = lambda n: _interp_set(max(1, min(int(n), _interp_cap)))
    _torch.set_num_threads(_interp_cap)
"""


def execute(nb, cwd: str | Path = HERE, timeout: int = 1800, timing: bool = False):
    """Execute ``nb`` (an nbformat notebook) in place in a fresh ``python3`` kernel; raises on the first cell
    error (``nbclient.exceptions.CellExecutionError``). Returns ``(nb, outside)``: ``outside`` lists every figure
    text drawn outside its figure's canvas (:data:`FIGURE_CHECK`; [] when none). The check's own two cells are
    removed again and the execution counts are those a reader would see. ``timing``: each cell keeps nbclient's
    timestamps (:func:`cell_seconds` reads them), which a committed notebook should not carry."""
    import json

    import nbformat
    from nbclient import NotebookClient

    cells = nb.cells
    first, last = nbformat.v4.new_code_cell(THREAD_CAP + FIGURE_CHECK), nbformat.v4.new_code_cell(FIGURE_REPORT)
    nb.cells = [first] + cells + [last]
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=timing,
                            resources={"metadata": {"path": str(cwd)}})
    try:
        client.execute(env=kernel_env(), cwd=str(cwd))
        report = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("name") == "stdout")
    finally:
        nb.cells = cells
    for cell in (c for c in cells if c.cell_type == "code"):
        if cell.execution_count is not None:   # the check's cell ran first: number the rest from 1
            cell.execution_count -= 1
            for out in cell.outputs:
                if "execution_count" in out:
                    out["execution_count"] = cell.execution_count
    return nb, json.loads(report or "[]")


def cell_seconds(nb) -> list[tuple[float, int, str]]:
    """(seconds, cell index, first line) of each code cell that :func:`execute` ran with ``timing=True``."""
    out = []
    for i, cell in enumerate(nb.cells):
        stamps = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in stamps and "shell.execute_reply" in stamps:
            start, end = (datetime.datetime.fromisoformat(stamps[k].replace("Z", "+00:00"))
                          for k in ("iopub.execute_input", "shell.execute_reply"))
            out.append(((end - start).total_seconds(), i, (cell.source.strip().splitlines() or [""])[0][:80]))
    return out


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


def drift():
    """The :mod:`drift` module beside this file (loaded by path: the tests load this file the same way)."""
    import importlib.util

    if "notebooks_drift" not in sys.modules:
        spec = importlib.util.spec_from_file_location("notebooks_drift", HERE / "drift.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["notebooks_drift"] = module
        spec.loader.exec_module(module)
    return sys.modules["notebooks_drift"]


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def machine() -> str:
    """The CPU's model name, its cores and torch's version: what the numbers and the wall time were made on."""
    cpu = platform.processor() or platform.machine()
    try:
        names = [ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                 if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    try:
        import torch
        version = f", torch {torch.__version__}"
    except ImportError:
        version = ""
    return f"{cpu}, {os.cpu_count()} cores{version}"


def stamp(nb, wall_s: float):
    """Put the provenance cell first (replacing an older one): commit, date, wall time, machine."""
    import nbformat

    PROVENANCE_TAG = drift().PROVENANCE_TAG
    commit = _git("rev-parse", "--short=10", "HEAD") or "unknown"
    dirty = bool(_git("status", "--porcelain", "--", "../interp", "../data", "."))
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    text = (f"*Executed at commit `{commit}`{' with the changes committed beside this notebook' if dirty else ''}, "
            f"on {when}, in {wall_s:.0f} s, on {machine()}. Every number below is what that code printed; "
            f"`tests/test_notebooks.py` runs the notebook again and fails if a number drifts "
            f"(tolerance and exclusions: `notebooks/drift.py`).*")
    cell = nbformat.v4.new_markdown_cell(text, metadata={"tags": [PROVENANCE_TAG]})
    nb.cells = [cell] + [c for c in nb.cells if PROVENANCE_TAG not in c.get("metadata", {}).get("tags", [])]
    return stable_ids(nb)


def keep_outputs(built, committed):
    """``built`` (a builder's fresh notebook) with ``committed``'s outputs and provenance, for a change to prose
    only: refused (ValueError) when any code cell's source differs, since then the outputs would not be its."""
    is_prov = drift().is_provenance
    old = [c for c in committed.cells if c.cell_type == "code"] if committed is not None else []
    new = [c for c in built.cells if c.cell_type == "code"]
    if [c.source for c in old] != [c.source for c in new]:
        raise ValueError("a code cell changed (or the notebook was never executed): execute it instead")
    for a, b in zip(old, new):
        b.outputs, b.execution_count = a.outputs, a.execution_count
    built.cells = [c for c in committed.cells if is_prov(c)] + built.cells
    return stable_ids(built)


def rebuild_text(path: Path, builder: Path) -> bool:
    """Rerun ``builder`` and keep ``path``'s committed outputs (:func:`keep_outputs`); False, with the committed
    notebook left as it was, when a code cell changed."""
    import nbformat

    committed = nbformat.read(path, as_version=4) if path.exists() else None
    subprocess.run([sys.executable, builder.name], cwd=HERE, check=True, stdout=subprocess.DEVNULL)
    try:
        nbformat.write(keep_outputs(nbformat.read(path, as_version=4), committed), path)
    except ValueError as err:
        if committed is not None:
            nbformat.write(committed, path)
        print(f"{path.name}: {err}", file=sys.stderr)
        return False
    print(f"rebuilt {path.name} from {builder.name}, outputs kept")
    return True


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
    ap.add_argument("--text-only", action="store_true",
                    help="rebuild from the builders and keep the committed outputs; refused if a code cell changed")
    ap.add_argument("--profile", action="store_true",
                    help="execute the committed notebook, print each cell's seconds (slowest first), write nothing")
    ap.add_argument("--timeout", type=int, default=1800, help="per-cell timeout in seconds (default 1800)")
    args = ap.parse_args(argv)

    notebooks = [p for p in sorted(HERE.glob("*.ipynb")) if not args.only or p.name.startswith(tuple(args.only))]
    if not notebooks:
        print(f"no notebook in {HERE} matches {args.only}", file=sys.stderr)
        return 2
    failed = []
    for path in notebooks:
        builder = None if args.no_build or args.profile else builder_for(path)   # profile: the committed file
        if args.text_only:
            if builder is not None and not rebuild_text(path, builder):
                failed.append(path.name)
            continue
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
            nb, outside = execute(nb, HERE, args.timeout, timing=args.profile)
        except CellExecutionError as err:
            failed.append(path.name)
            print(f"FAILED {path.name} ({time.perf_counter() - t0:.0f} s): not written back\n{err}", file=sys.stderr)
            continue
        if args.profile:
            cells = sorted(cell_seconds(nb), reverse=True)
            print(f"{path.name}: {time.perf_counter() - t0:.0f} s in all, {sum(c[0] for c in cells):.0f} s in cells")
            for sec, i, line in cells[:8]:
                print(f"  {sec:7.1f} s  cell {i:3d}  {line}")
            continue
        nbformat.write(stamp(nb, time.perf_counter() - t0), path)
        if outside:
            failed.append(path.name)
            print(f"{path.name}: figure text outside its canvas: {outside}", file=sys.stderr)
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
