"""Heatmap panels for the ``grid`` view kind (causal traces, patching grids, per-head scores): each panel carries
its colour rule (colormap, vmin, vmax, which way up) so that it matches the static plot it mirrors."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .encode import as_numpy, rounded
from .page import View, check_size

SCRIPT = Path(__file__).with_name("grid.js")  # draws the view kind "grid"


def finite_range(values) -> tuple[float, float]:
    """(min, max) over the finite values (NaN: not computed); (0, 1) if there are none."""
    a = as_numpy(values)
    a = a[np.isfinite(a)]
    return (float(a.min()), float(a.max())) if a.size else (0.0, 1.0)


def panel(title: str, values, rows, cols, *, cmap: str, vmin: float, vmax: float, row_name: str, col_name: str,
          value_name: str, extra: dict | None = None, lower_origin: bool = False, pid: str | None = None,
          cell=None) -> dict:
    """One heatmap: ``values`` [rows, cols] (NaN shown blank), labels, and ``extra`` {name: [rows, cols]} shown on
    hover beside the value."""
    out = {"title": title, "values": rounded(values, 5), "rows": [str(r) for r in rows],
           "cols": [str(c) for c in cols], "cmap": cmap, "vmin": float(vmin), "vmax": float(vmax),
           "row_name": row_name, "col_name": col_name, "value_name": value_name,
           "extra": {k: rounded(v, 5) for k, v in (extra or {}).items()}, "lower_origin": lower_origin,
           "flat_cols": all(len(str(c)) <= 3 for c in cols)}
    if pid:
        out["id"] = pid
    if cell:
        out["cell"] = list(cell)
    return out


def grid_view(title: str, summary: str, panels: list[dict], note: str = "", max_bytes=None) -> View:
    cells = sum(len(p["rows"]) * len(p["cols"]) * (1 + len(p["extra"])) for p in panels)
    check_size(cells * 9, f"{title} ({cells} cells)", "layers=/positions= of the analysis", max_bytes)
    data = {"title": title, "summary": summary, "panels": panels, "note": note}
    return View("grid", title, data, script=SCRIPT)
