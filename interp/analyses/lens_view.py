"""The interactive view of :class:`interp.analyses.lens.LogitLensResult` (the logit lens, and the tuned lens: a
result whose ``tuned`` is true is titled so). Top-k ids per cell, their probabilities to 4 significant digits,
each token's text once, and every target's probability and rank per cell: ~60 KB for 31 rows x 12 positions."""

from __future__ import annotations

from pathlib import Path

from ..core.views import View, check_size, rounded
from ..core.views.select import pick_positions

SCRIPT = Path(__file__).with_name("lens_view.js")  # draws the view kind "lens"


def lens_view(res, *, positions=None, max_bytes=None) -> View:
    """``positions``: input positions to show (default: every analysed one)."""
    wanted = pick_positions(positions, len(res.str_tokens))
    missing = [p for p in wanted if p not in res.positions]
    if missing:
        raise ValueError(f"positions {missing} were not analysed; analysed positions: {res.positions}")
    cols = [res.positions.index(p) for p in wanted]
    L1, k, T = res.top_ids.shape[0], res.top_ids.shape[2], len(res.targets)
    tuned = bool(getattr(res, "tuned", False))
    what = "tuned lens" if tuned else "logit lens"
    check_size(L1 * len(cols) * (k * 16 + T * 14), f"the {what} view of {len(cols)} positions",
               "positions=[...] (the positions to show)", max_bytes)
    ids = res.top_ids[:, cols].reshape(-1).tolist()
    targets = [{"label": t, "scored": res.scored_tokens[j], "id": res.target_ids[j], "name": res.target_name(j),
                "prob": rounded(res.target_probs[:, cols, j].reshape(-1), 4),
                "rank": res.target_ranks[:, cols, j].reshape(-1).tolist()} for j, t in enumerate(res.targets)]
    data = {"title": f"{what} ({getattr(res, 'source', '') or 'model'})", "summary": res.summary(), "tuned": tuned,
            "labels": list(res.labels), "tokens": list(res.str_tokens), "positions": wanted, "k": k,
            "top_ids": ids, "top_probs": rounded(res.top_probs[:, cols].reshape(-1), 4),
            "vocab": {str(i): res.token(i) for i in sorted(set(ids))}, "targets": targets}
    return View("lens", data["title"], data, script=SCRIPT)
