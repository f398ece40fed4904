"""Interactive views of results, as self-contained HTML (Jupyter output or a file), offline by construction.

``View`` (page.py) is one page: its data as escaped JSON (encode.py: strict escaping, 8-bit arrays) and this
package's own CSS and plain JavaScript (``views.css``, ``common.js`` and one script per kind), all inline.
``grid_view`` draws heatmap panels (grid.py); ``table_view`` is the fallback of results without a view of their own. Each analysis builds its view next to its
result; ``Result.show()``, ``.save_html(path)`` and ``_repr_html_`` (core/results.py) use them.
"""

from .encode import plain, rounded, script_json, u8
from .grid import finite_range, grid_view, panel
from .page import DEFAULT_MAX_BYTES, INLINE_MAX_BYTES, View, ViewTooLarge, check_size
from .table import table_view

__all__ = ["DEFAULT_MAX_BYTES", "INLINE_MAX_BYTES", "View", "ViewTooLarge", "check_size", "finite_range", "grid_view",
           "panel", "plain", "rounded", "script_json", "table_view", "u8"]
