"""A view's data: JSON that cannot end its ``<script>`` block, and large arrays as 8-bit codes in base64.

Every string a view shows (token strings, prompts, labels) travels as JSON inside
``<script type="application/json">``. The browser ends such a block at the first ``</script``, whatever the JSON
says, so ``<``, ``>`` and ``&`` are written as ``\\u003c``-style escapes (JSON.parse restores them), and so are
U+2028/U+2029 (line terminators to older JavaScript parsers) and lone surrogates (which UTF-8 cannot encode).
The page's script then puts text into the page with ``textContent`` only, so the text is never parsed as markup.
"""

from __future__ import annotations

import base64
import json
import math
import re

import numpy as np

_UNSAFE = re.compile("[<>&\u2028\u2029\ud800-\udfff]")


def script_json(data) -> str:
    """``data`` as JSON that is safe inside ``<script type="application/json">`` (and in any HTML text)."""
    text = json.dumps(plain(data), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def plain(x):
    """numpy / torch values, tuples and non-finite floats -> plain JSON types (NaN, inf -> None)."""
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if hasattr(x, "detach") and hasattr(x, "tolist"):  # a torch tensor, without importing torch here
        return plain(x.detach().cpu().tolist())
    if isinstance(x, np.ndarray):
        return plain(x.tolist())
    if isinstance(x, np.generic):
        return plain(x.item())
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def as_numpy(values) -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach().cpu().double().numpy()
    return np.asarray(values, dtype=np.float64)


def u8(values, lo: float = 0.0, hi: float = 1.0) -> dict:
    """Values in [lo, hi] (flattened) as 8-bit codes: ``lo + code * (hi - lo) / 255`` is within half a step
    ``(hi - lo) / 510`` of the value. A quarter of the size of float32, a ninth of decimal JSON."""
    if not hi > lo:
        raise ValueError(f"u8 range [{lo}, {hi}] is empty; need hi > lo")
    a = as_numpy(values).ravel()
    codes = np.clip(np.rint((np.nan_to_num(a, nan=lo) - lo) * (255.0 / (hi - lo))), 0, 255).astype(np.uint8)
    return {"enc": "u8", "lo": float(lo), "hi": float(hi), "n": int(codes.size),
            "b64": base64.b64encode(codes.tobytes()).decode("ascii")}


def rounded(values, digits: int = 4) -> list:
    """Values (any shape) as nested lists of floats with ``digits`` significant digits (NaN, inf -> None): small
    arrays whose exact-looking numbers matter more than their size (hover values, curves, bars)."""
    a = as_numpy(values)
    flat = [None if not math.isfinite(v) else float(f"{v:.{digits}g}") for v in a.ravel().tolist()]
    if a.ndim <= 1:
        return flat if a.ndim == 1 else flat[0]
    out = np.empty(a.size, dtype=object)
    out[:] = flat
    return out.reshape(a.shape).tolist()
