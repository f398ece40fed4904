"""The fallback view: a result's summary and its table, for results without an interactive view of their own."""

from __future__ import annotations

from pathlib import Path

from .encode import plain
from .page import View

MAX_ROWS = 500  # enough to browse; to_frame() has the rest
SCRIPT = Path(__file__).with_name("table.js")  # draws the view kind "table"


def table_view(title: str, summary: str, frame) -> View:
    """``frame`` (pandas) as a sortable table under ``summary``; only the first ``MAX_ROWS`` rows."""
    if frame.index.name is not None or any(n is not None for n in frame.index.names):
        frame = frame.reset_index()
    head = frame.head(MAX_ROWS)
    rows = [[_cell(v) for v in row] for row in head.itertuples(index=False, name=None)]
    return View("table", title, {"title": title, "summary": summary, "columns": [str(c) for c in frame.columns],
                                 "rows": rows, "n_rows": len(frame)}, script=SCRIPT)


def _cell(v):
    v = plain(v)
    if v is None or isinstance(v, (bool, int, float, str)):
        return float(f"{v:.6g}") if isinstance(v, float) else v
    return str(v)
