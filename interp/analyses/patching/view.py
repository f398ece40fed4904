"""The interactive view of a patching grid (:class:`interp.analyses.patching.PatchingResult`): a heatmap with
row and column labels and hover values, coloured by the rules of its static plot."""

from __future__ import annotations

from ...core.views import View, finite_range, grid_view, panel


def value_label(res) -> str:
    """What a grid's numbers are: signed and normalised, or an unsigned magnitude (GradDrop)."""
    if getattr(res, "signed", True):
        return "normalised (0 = corrupted, 1 = clean)"
    return "|effect| / |clean - corrupted| (unsigned)"


def patching_view(res) -> View:
    """The grid of ``res.plot()``: rows (layers or hooks) x columns (positions, heads or KV groups), diverging
    colours centred at 0 and symmetric about it; hover shows the normalised value and the raw metric."""
    lo, hi = finite_range(res.values)
    lim = max(abs(lo), abs(hi), 1e-9)
    cols = [repr(c) if res.col_name == "position" else str(c) for c in res.col_labels]
    p = panel(f"{res.method} {res.direction} patching: {res.over} ({res.metric})", res.values, res.rows, cols,
              cmap="RdBu_r", vmin=-lim, vmax=lim, row_name=res.row_name, col_name=res.col_name,
              value_name=value_label(res), extra={"raw metric (mean)": res.raw.mean(-1)},
              pid="patching")
    note = f"clean {float(res.clean.mean()):.4g}, corrupted {float(res.corrupted.mean()):.4g} ({len(res.clean)} pairs)"
    return grid_view(f"{res.method} patching over {res.over}", res.summary(), [p], note)
