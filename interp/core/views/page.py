"""A self-contained HTML page for one view: its data, this package's shared CSS and JavaScript, and the view's
own script, all inline.

A view's script sits beside the module that builds the view, and the view names it:
``View(kind, title, data, script=Path(__file__).with_name("<name>_view.js"))``. The script registers
``InterpViews.renderers.<kind>``, a function that draws ``data`` with the helpers of ``common.js`` (elements,
colours, hover tips); several kinds may share one script. This module knows no kind by name.

Nothing outside the file is ever requested: no script, stylesheet, font or image is linked, and the page's
Content-Security-Policy (``default-src 'none'``, scripts allowed only by the hash of the page's own script) makes
the browser refuse any request, or any script, that could still slip in.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .encode import script_json

ASSET_DIR = Path(__file__).resolve().parent  # the shared assets: common.js (helpers, boot) and views.css
DEFAULT_MAX_BYTES = 10_000_000   # a page this big still opens in a second; a 200 MB one would not
INLINE_MAX_BYTES = 2_000_000     # a notebook output, stored in the .ipynb: smaller still


class ViewTooLarge(ValueError):
    """The view would embed more data than the limit; the message names the options that narrow it."""


@cache
def asset(path: Path) -> str:
    """The text of a script or stylesheet: a path, or the name of a shared asset in ``ASSET_DIR``."""
    return (ASSET_DIR / path).read_text(encoding="utf-8")


def check_size(n_bytes: int, what: str, narrow: str, max_bytes: int | None = None) -> None:
    """Refuse a view whose data would take ``n_bytes`` (estimated before building it) over ``max_bytes``."""
    limit = DEFAULT_MAX_BYTES if max_bytes is None else int(max_bytes)
    if n_bytes > limit:
        raise ViewTooLarge(f"{what} would embed ~{n_bytes / 1e6:.1f} MB of data, over the {limit / 1e6:.1f} MB "
                           f"limit of a view; narrow it with {narrow} (or raise max_bytes=)")


@dataclass(repr=False)
class View:
    """One interactive view: ``script`` (a .js file) registers the renderer of ``kind``, which draws ``data``
    (JSON-safe)."""

    kind: str
    title: str
    data: dict
    script: Path

    def __post_init__(self):
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.kind):
            raise ValueError(f"view kind {self.kind!r}: use lower-case letters, digits and _ (it names a "
                             "renderer)")
        self.script = Path(self.script).resolve()
        if self.script.suffix != ".js" or not self.script.is_file():
            raise FileNotFoundError(f"the script of view kind {self.kind!r}, {str(self.script)!r}, is not "
                                    "a .js file")
        if not re.search(rf"\brenderers\.{self.kind}\s*=", asset(self.script)):
            raise ValueError(f"{self.script.name} registers no renderer for view kind {self.kind!r} "
                             f"(InterpViews.renderers.{self.kind} = function (root, data) {{...}})")

    def __repr__(self) -> str:  # short: Jupyter stores it beside the HTML as the output's text/plain
        return f"<interp view: {self.kind}, {self.title!r}>"

    def page(self) -> str:
        """The whole HTML document."""
        script = asset("common.js") + "\n" + asset(self.script) + "\nInterpViews.boot();\n"
        if "</script" in script.lower():  # even in a comment it would end the block early
            raise AssertionError(f"a view script ({self.script.name} or common.js) contains '</script'")
        digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
        csp = (f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:; "
               "base-uri 'none'; form-action 'none'")
        return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">"
                "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                f"<title>{html.escape(self.title)}</title><link rel=\"icon\" href=\"data:,\">"
                f"<style>{asset('views.css')}</style></head>\n<body>"
                f"<div id=\"interp-root\" class=\"interp-view\" data-kind=\"{html.escape(self.kind)}\"></div>\n"
                f"<script type=\"application/json\" id=\"interp-data\">{script_json(self.data)}</script>\n"
                f"<script>{script}</script>\n</body></html>\n")

    @property
    def nbytes(self) -> int:
        """Size of the page in bytes (UTF-8)."""
        return len(self.page().encode("utf-8"))

    def fragment(self, height: int = 480) -> str:
        """The page inside an ``<iframe srcdoc>``: a notebook output whose styles and ids cannot clash with the
        notebook's (the page sizes the frame to its content once drawn)."""
        return (f"<iframe class=\"interp-view\" title=\"{html.escape(self.title)}\" "
                f"style=\"width:100%;height:{int(height)}px;border:1px solid #ddd;border-radius:4px\" "
                f"srcdoc=\"{html.escape(self.page(), quote=True)}\"></iframe>")

    def _repr_html_(self) -> str:
        return self.fragment()

    def save(self, path) -> Path:
        """Write the page to ``path`` (its folder must exist)."""
        path = Path(path)
        if not path.parent.is_dir():
            raise FileNotFoundError(f"cannot save the view to {str(path)!r}: folder {str(path.parent)!r} does not "
                                    "exist (create it first)")
        if path.is_dir():
            raise IsADirectoryError(f"cannot save the view to {str(path)!r}: it is a folder; give a file name "
                                    "such as view.html")
        path.write_text(self.page(), encoding="utf-8")
        return path

    def show(self):
        """Display inline in Jupyter; elsewhere write the page to a temporary file and return its path."""
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:  # no IPython installed: not in a notebook
            shell = None
        else:
            shell = get_ipython()
        if shell is not None and getattr(shell, "kernel", None) is not None:
            display(self)
            return None
        path = Path(tempfile.mkdtemp(prefix="interp-view-")) / f"{self.kind}.html"
        self.save(path)
        print(f"view written to {path} (open it in a browser)")
        return path
