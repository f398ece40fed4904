"""The small base every analyzer's result object shares: ``to_frame()``, ``plot(out=...)``, Jupyter display."""

from __future__ import annotations

import html
from pathlib import Path


class Result:
    """Subclass (usually as a dataclass) and implement ``to_frame`` and ``plot``; ``summary`` is optional."""

    def to_frame(self):  # pragma: no cover - every subclass implements it
        raise NotImplementedError(f"{type(self).__name__} must implement to_frame()")

    def summary(self) -> str:
        """One line saying what the result shows; subclasses make it specific."""
        return type(self).__name__

    def _repr_html_(self) -> str:
        frame = self.to_frame()
        table = frame.head(20).to_html(float_format=lambda x: f"{x:.4g}", max_cols=12)
        more = f"<p><i>{len(frame)} rows; .to_frame() for all, .plot() for the figure</i></p>"
        return f"<p><b>{html.escape(self.summary())}</b></p>{table}{more}"

    def __repr__(self) -> str:
        frame = self.to_frame()
        return f"{self.summary()}\n{frame.head(10).to_string()}\n[{len(frame)} rows]"


def save_fig(fig, out: str | Path | None):
    """Save ``fig`` as PNG when ``out`` is given; return the figure either way."""
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=120, bbox_inches="tight")
    return fig


def new_figure(*args, **kwargs):
    """A matplotlib figure that works without a display (Agg) and is not kept open by pyplot."""
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
        try:
            matplotlib.use("Agg")
        except Exception:  # pragma: no cover - an interactive backend already active; keep it
            pass
    from matplotlib.figure import Figure

    fig = Figure(*args, **kwargs)
    return fig
