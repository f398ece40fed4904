"""Do a notebook's committed outputs still say what the code prints now?

``compare(committed, fresh)`` reads the text each code cell printed (stdout, and the ``text/plain`` of results and
displays; not stderr, which carries progress bars and warnings, not widgets, which are progress bars too, and not
HTML or images) in both notebooks and returns every line where they disagree. Words must match exactly (runs of
spaces count as one, so a table re-aligned around a longer number still matches); numbers must match to
:data:`RTOL` relative or to one unit in the last digit printed, whichever is larger, so that a last-digit rounding
flip on another CPU passes and a number edited by hand, or moved by a change to the code, does not. Integers
printed without a decimal point (layers, counts, token ids) get the relative tolerance only, never a whole unit.
Two numbers both smaller than :data:`ATOL` in magnitude agree (float32 round-off, such as a printed
``max |a - b|`` of 2e-06, is not a result).

What varies from run to run is excluded, and marked where it is:

* a number followed by a unit of time (``12.3 s``, ``4 min``, ``310 tokens/s``, ``it/s``) is not compared;
* a cell whose source has a line ``# drift: skip - <why>`` is not compared at all (the reason is required);
* a cell with ``# drift: rtol=<x> - <why>`` compares its numbers to that relative tolerance instead (for numbers
  that come out of training, whose last bits depend on the CPU's vector width);
* the provenance cell that :mod:`execute` puts first (commit, date, wall time, machine).
"""

from __future__ import annotations

import re

RTOL = 0.01
ATOL = 1e-4
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|\bnan\b|[-+]?\binf\b")
TIME_UNIT = re.compile(r"\s?(?:s|sec|seconds?|ms|min|minutes?|h|hours?|tokens/s|tok/s|it/s|s/it|records/s)\b")
MARK = re.compile(r"^\s*#\s*drift:\s*(skip|rtol=([0-9.eE+-]+))\s*(?:-|—)\s*(\S.*)$", re.M)
VOLATILE = [(re.compile(r"0x[0-9a-fA-F]+"), "0x…"), (re.compile(r"/tmp/\S+"), "/tmp/…")]
PROVENANCE_TAG = "provenance"
WIDGET = "application/vnd.jupyter.widget-view+json"


def cell_mark(source: str) -> tuple[str | None, float | None]:
    """``("skip", None)``, ``("rtol", x)`` or ``(None, None)`` from a cell's ``# drift:`` line."""
    m = MARK.search(source)
    if m is None:
        if re.search(r"^\s*#\s*drift:", source, re.M):
            raise ValueError(f"a '# drift:' line needs 'skip - <why>' or 'rtol=<x> - <why>'; got in:\n{source}")
        return None, None
    return ("skip", None) if m.group(1) == "skip" else ("rtol", float(m.group(2)))


def cell_text(cell) -> list[str]:
    """The lines a code cell printed, in order: stdout and the plain-text form of every result and display
    (a table's text, a view's fallback); stderr, HTML, images and widgets are left out. A widget in these
    notebooks is a progress bar, drawn only when there is work to show: on a clean machine the first
    ``interp.load`` draws transformers' GGUF conversion bars, and with the model cached it draws none."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream" and out.get("name") == "stdout":
            parts.append(out.get("text", ""))
        elif out.get("output_type") in ("execute_result", "display_data"):
            data = out.get("data", {})
            if WIDGET in data:                 # a progress bar (tqdm.auto), e.g. transformers' first GGUF load
                continue
            if "text/plain" in data:
                parts.append(data["text/plain"] if isinstance(data["text/plain"], str) else "".join(data["text/plain"]))
    text = "".join(p if p.endswith("\n") else p + "\n" for p in parts)
    for pattern, repl in VOLATILE:
        text = pattern.sub(repl, text)
    return [line for line in text.splitlines() if line.strip()]


def _split(line: str) -> tuple[list[str], list[tuple[str, bool]]]:
    """(the words between numbers, [(number, is_timing)])."""
    words, numbers, at = [], [], 0
    for m in NUMBER.finditer(line):
        words.append(" ".join(line[at:m.start()].split()))
        numbers.append((m.group(0), bool(TIME_UNIT.match(line, m.end()))))
        at = m.end()
    words.append(" ".join(line[at:].split()))
    return words, numbers


def _unit(text: str) -> float:
    """One unit in the last printed digit; 0 for an integer (integers get no whole-unit slack)."""
    mantissa = re.split(r"[eE]", text)[0]
    if "." not in mantissa:
        return 0.0
    decimals = len(mantissa.split(".")[1])
    exponent = int(re.split(r"[eE]", text)[1]) if re.search(r"[eE]", text) else 0
    return 10.0 ** (exponent - decimals)


def numbers_agree(a: str, b: str, rtol: float = RTOL) -> bool:
    if a == b:
        return True
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    if x != x or y != y:                       # nan against anything but nan
        return False
    if abs(x) < ATOL and abs(y) < ATOL:
        return True
    slack = max(_unit(a), _unit(b)) * 1.0001 + rtol * max(abs(x), abs(y))
    return abs(x - y) <= slack


def line_agrees(old: str, new: str, rtol: float = RTOL) -> bool:
    (w_old, n_old), (w_new, n_new) = _split(old), _split(new)
    if w_old != w_new or len(n_old) != len(n_new):
        return False
    return all(t_old or t_new or numbers_agree(a, b, rtol) for (a, t_old), (b, t_new) in zip(n_old, n_new))


def is_provenance(cell) -> bool:
    return PROVENANCE_TAG in cell.get("metadata", {}).get("tags", [])


def compare(committed, fresh, rtol: float = RTOL) -> list[str]:
    """Every disagreement between two executions of the same notebook, as ``cell N: committed '…' / now '…'``."""
    old_cells = [c for c in committed.cells if c.cell_type == "code"]
    new_cells = [c for c in fresh.cells if c.cell_type == "code"]
    if [c.source for c in old_cells] != [c.source for c in new_cells]:
        return ["the code cells differ: the committed notebook is not the one executed (rebuild it)"]
    found = []
    for i, (old, new) in enumerate(zip(old_cells, new_cells)):
        mark, cell_rtol = cell_mark(new.source)
        if mark == "skip":
            continue
        tol = cell_rtol if cell_rtol is not None else rtol
        a, b = cell_text(old), cell_text(new)
        first = new.source.strip().splitlines()[0][:50] if new.source.strip() else ""
        if len(a) != len(b):
            found.append(f"code cell {i} ({first!r}): {len(a)} lines committed, {len(b)} now")
        for x, y in zip(a, b):
            if not line_agrees(x, y, tol):
                found.append(f"code cell {i} ({first!r}): committed {x.strip()[:100]!r} / now {y.strip()[:100]!r}")
    return found
