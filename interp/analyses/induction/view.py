"""The interactive view of :class:`interp.analyses.induction.InductionScan`: every score as a layer x head
heatmap with hover values, coloured as ``plot()`` colours it (viridis on 0..1; the copying score RdBu_r on -1..1)."""

from __future__ import annotations

from ...core.views import View, grid_view, panel


def induction_view(scan) -> View:
    panels = []
    for name, vals in scan.scores.items():
        copying = name == "copying_score"
        n_layers, n_heads = vals.shape
        panels.append(panel(name.replace("_score", "").replace("_", " "), vals, list(range(n_layers)),
                            list(range(n_heads)), cmap="RdBu_r" if copying else "viridis", vmin=-1 if copying else 0,
                            vmax=1, row_name="layer", col_name="head", value_name=name, pid=f"induction-{name}",
                            cell=(18, 14)))
    return grid_view("induction head scores", scan.summary(), panels,
                     f"[BOS] + R + R, seq_len {scan.seq_len}, batch {scan.batch}; hover a head for its score")
