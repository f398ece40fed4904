"""Interactive views of results, as self-contained HTML (Jupyter output or a file), offline by construction.

``View`` (page.py) is one page: its data as escaped JSON (encode.py: strict escaping, 8-bit arrays), the
shared CSS and plain JavaScript kept here (``views.css``, ``common.js``) and the view's own script, all
inline. Each analysis builds its view next to its result, with its script beside that module (e.g.
``lens_view.py`` and ``lens_view.js``); no code here knows them. ``grid_view`` draws heatmap panels (grid.py,
grid.js); ``table_view`` is the fallback of results without a view of their own (table.py, table.js).
``Result.show()``, ``.save_html(path)`` and ``_repr_html_`` (core/results.py) use them.
"""

from .encode import plain, rounded, script_json, u8
from .grid import finite_range, grid_view, panel
from .page import DEFAULT_MAX_BYTES, INLINE_MAX_BYTES, View, ViewTooLarge, check_size
from .table import table_view

__all__ = ["DEFAULT_MAX_BYTES", "INLINE_MAX_BYTES", "View", "ViewTooLarge", "check_size", "finite_range", "grid_view",
           "panel", "plain", "rounded", "script_json", "table_view", "u8"]
