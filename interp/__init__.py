"""interp — a mechanistic-interpretability toolkit: load a real model offline, read and write its residual stream,
and look inside it (logit lens, attribution, attention, neurons, induction heads, ROME fact editing)."""

from .loading import load, load_tiny
from .model import Model

__version__ = "0.1.0"
__all__ = ["load", "load_tiny", "Model"]
