"""The one result protocol every analysis returns, and the figures they draw.

A result has ``to_frame()`` (pandas), ``to_json()`` (a JSON-safe dict: what the CLI prints with ``--json``),
``summary()`` (one line), and ``plot(*, out=None, ...)`` (a matplotlib figure; ``out=`` also saves it as PNG;
``out`` is keyword-only everywhere, other keywords choose what to draw). ``view()`` is its interactive view
(``core/views``: self-contained HTML), ``show()`` displays it and ``save_html(path)`` writes it; in Jupyter a
result with a view of its own shows it as the cell's value, other results their summary and the head of their
table.

Figures are built outside pyplot (:func:`new_figure`): the library never switches the matplotlib backend and never
leaves figures open in pyplot's registry, so a user's own ``plt`` figures are untouched. Jupyter still shows them:
the figure class renders itself as PNG (``_repr_png_``), whichever backend is active.
"""

from __future__ import annotations

import html
import io
import math
from pathlib import Path

from .views import INLINE_MAX_BYTES, View, ViewTooLarge, table_view


class Result:
    """Subclass (usually as a dataclass) and implement ``to_frame`` and ``plot``; ``summary`` and ``to_json`` have
    defaults built from them."""

    def to_frame(self):  # pragma: no cover - every subclass implements it
        raise NotImplementedError(f"{type(self).__name__} must implement to_frame()")

    def plot(self, *, out=None):  # pragma: no cover - every subclass implements it
        raise NotImplementedError(f"{type(self).__name__} must implement plot(*, out=None)")

    def summary(self) -> str:
        """One line saying what the result shows; subclasses make it specific."""
        return type(self).__name__

    def to_json(self) -> dict:
        """A JSON-safe dict: the summary and the table's rows (subclasses add what the table leaves out)."""
        frame = self.to_frame()
        if frame.index.name is not None or any(n is not None for n in frame.index.names):
            frame = frame.reset_index()
        return {"result": type(self).__name__, "summary": self.summary(),
                "rows": jsonable(frame.to_dict(orient="records"))}

    def view(self, **kwargs) -> View:
        """The interactive view (:class:`interp.core.views.View`); results without one of their own show their
        summary and table. Keywords narrow a view that has them (e.g. ``layers=``, ``heads=``, ``positions=``)."""
        if kwargs:
            raise TypeError(f"{type(self).__name__}.view() takes no options; got {sorted(kwargs)}")
        return table_view(type(self).__name__, self.summary(), self.to_frame())

    def show(self, **kwargs):
        """Display the view inline in Jupyter (elsewhere: write it to a temporary HTML file, return its path)."""
        return self.view(**kwargs).show()

    def save_html(self, path, **kwargs) -> Path:
        """Write the view as one self-contained HTML file (no network needed to open it) -> its path."""
        return self.view(**kwargs).save(path)

    def _repr_html_(self) -> str:
        note = ""
        if type(self).view is not Result.view:  # a view of its own: the cell's value is the interactive view
            try:
                view = self.view()
                size = view.nbytes
                if size <= INLINE_MAX_BYTES:
                    return view.fragment()
                note = (f"the interactive view ({size / 1e6:.1f} MB) is too large to store in a notebook; "
                        ".show() with a narrower selection, or .save_html(path)")
            except ViewTooLarge as e:
                note = str(e)
        frame = self.to_frame()
        table = frame.head(20).to_html(float_format=lambda x: f"{x:.4g}", max_cols=12)
        more = f"<p><i>{len(frame)} rows; .to_frame() for all, .plot() for the figure</i></p>"
        note = f"<p><i>{html.escape(note)}</i></p>" if note else ""
        return f"<p><b>{html.escape(self.summary())}</b></p>{table}{more}{note}"

    def __repr__(self) -> str:
        frame = self.to_frame()
        return f"{self.summary()}\n{frame.head(10).to_string()}\n[{len(frame)} rows]"


def jsonable(x):
    """Tensors, numpy values, tuples, non-finite floats -> plain JSON types (NaN/inf -> None); keys -> str;
    a ``"_text"`` key (a CLI's text report) is dropped."""
    import numpy as np
    import torch

    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items() if k != "_text"}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, torch.Tensor):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        return jsonable(x.item())
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    if isinstance(x, Path):
        return str(x)
    if hasattr(x, "to_json"):
        return jsonable(x.to_json())
    return str(x)


def save_fig(fig, out: str | Path | None):
    """Save ``fig`` as PNG when ``out`` is given; return the figure either way."""
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=120, bbox_inches="tight")
    return fig


_FIGURE_CLASS = None


def new_figure(*args, **kwargs):
    """A matplotlib figure outside pyplot (no backend switch, nothing left open) that Jupyter displays inline.
    Constrained layout unless ``layout=`` says otherwise, so labels and titles stay on the canvas (the notebooks'
    figure check, ``notebooks/execute.py``, fails on any text drawn outside it)."""
    kwargs.setdefault("layout", "constrained")
    global _FIGURE_CLASS
    if _FIGURE_CLASS is None:
        from matplotlib.figure import Figure

        class InlineFigure(Figure):
            """A Figure that renders itself as PNG in Jupyter (``_repr_png_``) whatever backend is active."""

            def tight_layout(self, *args, **kwargs):
                # A constrained figure already keeps its text on the canvas; switching engines after a colorbar
                # is drawn raises in matplotlib, so a plot written for tight layout keeps working unchanged.
                from matplotlib.layout_engine import ConstrainedLayoutEngine

                if isinstance(self.get_layout_engine(), ConstrainedLayoutEngine):
                    return None
                return super().tight_layout(*args, **kwargs)

            def _repr_png_(self) -> bytes:
                buf = io.BytesIO()
                self.savefig(buf, format="png", dpi=100, bbox_inches="tight")
                return buf.getvalue()

        _FIGURE_CLASS = InlineFigure
    return _FIGURE_CLASS(*args, **kwargs)


def wilson(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson's score interval of a share `p` of `n` 0/1 outcomes (95% at the default z); unlike the normal
    interval it is not zero-width at 0 or 1."""
    p = min(max(p, 0.0), 1.0)  # (float rounding of a mean of values within the bounds)
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(centre - half, 0.0), min(centre + half, 1.0)
