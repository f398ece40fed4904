"""The interactive view of :class:`interp.analyses.attribution.DLAResult`: the same numbers as ``plot_heads()``
(layer x head) and ``plot()`` (layer-level components and the norm's remainder), to 6 significant digits."""

from __future__ import annotations

from pathlib import Path

from ..core.views import View, rounded

SCRIPT = Path(__file__).with_name("attribution_view.js")  # draws the view kind "dla"


def dla_view(res) -> View:
    d = res.decomposition
    f = res.to_frame("layer")
    parts = [{"label": str(lab), "kind": kind, "value": rounded([v], 6)[0]}
             for lab, kind, v in zip(f.index, f["kind"], f["contribution"])]
    data = {"title": f"direct logit attribution ({d.source or 'model'})", "summary": res.summary(), "what": res.what,
            "position": d.pos, "position_token": d.str_tokens[d.pos], "value": res.model_value,
            "total": res.total(), "remainder": res.remainder, "heads": rounded(res.head_matrix(), 6),
            "parts": parts, "embedding": res.embedding_share()}
    return View("dla", data["title"], data, script=SCRIPT)
