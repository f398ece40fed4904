"""The interactive view of :class:`interp.analyses.attention.AttentionResult` (``res.show()``, ``res.save_html``).

Every selected head's pattern travels as 8-bit codes (value = code / 255, so within 1/510 of the pattern) of its
causal lower triangle only: 30 layers x 9 heads over 64 tokens take ~0.56 MB of codes, ~0.75 MB in base64.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.views import View, check_size, rounded, u8
from ..core.views.select import pick, pick_positions

SCRIPT = Path(__file__).with_name("attention_view.js")  # draws the view kind "attention"


def attention_view(res, *, layers=None, heads=None, positions=None, stats=None, max_bytes=None) -> View:
    """``layers`` / ``heads`` / ``positions`` narrow the view (default: everything in ``res``); ``stats``: a
    function patterns [..., q, k] -> {name: [...]} of per-head statistics shown with each head."""
    n_heads = res.patterns.shape[1]
    lay = pick("layers", layers, list(res.layers))
    hs = pick("heads", heads, list(range(n_heads)))
    pos = pick_positions(positions, len(res.str_tokens))
    n = len(pos)
    cells = len(lay) * len(hs) * n * (n + 1) // 2
    check_size(cells * 4 // 3 + 60 * n, f"the attention view of {len(lay)} layers x {len(hs)} heads over {n} tokens",
               "layers=[...], heads=[...] or positions=range(a, b)", max_bytes)
    rows = [res.layers.index(layer) for layer in lay]
    p = res.patterns[rows][:, hs].detach().cpu().float().numpy()  # [L, H, n_all, n_all]
    full = len(pos) == len(res.str_tokens)
    if not full:
        idx = np.asarray(pos)
        p = p[:, :, idx][:, :, :, idx]
    iq, ik = np.tril_indices(n)  # row-major: query q holds keys 0..q, at q (q + 1) / 2 + k
    data = {"title": f"attention patterns ({getattr(res, 'source', '') or 'model'})", "summary": res.summary(),
            "tokens": [res.str_tokens[i] for i in pos], "positions": pos, "layers": lay, "heads": hs,
            "kv_groups": [res.kv_groups[h] for h in hs], "n_kv_heads": res.n_kv_heads,
            "patterns": u8(p[:, :, iq, ik], 0.0, 1.0)}
    windows = getattr(res, "windows", None)  # sliding-window layers (Gemma's local attention)
    if windows is not None:
        data["windows"] = [windows[r] for r in rows]
    if stats is not None:
        s = stats(res.patterns[rows][:, hs])
        data["stats"] = {k: rounded(v, 4) for k, v in s.items()}
    if not full:
        data["summary"] += (f"; view of positions {pos[0]}..{pos[-1]} ({n} of {len(res.str_tokens)}): attention "
                            "to keys outside them is not shown")
    return View("attention", data["title"], data, script=SCRIPT)
