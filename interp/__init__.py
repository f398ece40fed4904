"""interp — a mechanistic-interpretability toolkit: load a real model offline, read and write its residual stream,
and look inside it (logit lens, attribution, attention, neurons, induction heads, ROME fact editing)."""

from . import rome
from .attention import attention, head_scan
from .attribution import decompose, direct_logit_attribution
from .induction import induction_heads
from .induction_train import reproduce as reproduce_induction
from .lens import logit_lens
from .loading import load, load_tiny
from .model import Model
from .neurons import neurons
from .trace import causal_trace, trace_facts

__version__ = "0.1.0"
__all__ = ["load", "load_tiny", "Model", "logit_lens", "decompose", "direct_logit_attribution", "attention",
           "head_scan",
           "neurons", "induction_heads", "reproduce_induction", "causal_trace", "trace_facts", "rome"]
