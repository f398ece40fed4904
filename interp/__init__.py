"""interp — a mechanistic-interpretability toolkit: load a real model offline, read and write its residual stream,
and look inside it (logit lens, attribution, attention, neurons, induction heads, ROME fact editing)."""

from . import features, induction, memit, patching, rome
from .analyses import experts
from .analyses.attention import attention
from .analyses.features import train_sae, train_transcoders
from .analyses.graphs import attribution_graph
from .analyses.head_scan import head_scan
from .analyses.attribution import decompose, direct_logit_attribution
from .analyses.induction import induction_heads
from .analyses.induction import reproduce as reproduce_induction
from .analyses.lens import logit_lens
from .analyses.neurons import neurons
from .analyses.patching import activation_patching, attribution_patching, path_patching
from .analyses.trace import causal_trace, trace_facts
from .analyses.tuned_lens import (
    TunedLens,
    evaluate_lens,
    load_tuned_lens,
    prediction_depth,
    train_tuned_lens,
    tuned_lens,
)
from .core.corpus import wiki_documents
from .core.loading import load, load_tiny
from .core.model import Model

__version__ = "0.1.0"
__all__ = ["load", "load_tiny", "Model", "logit_lens", "decompose", "direct_logit_attribution", "attention",
           "head_scan",
           "neurons", "induction_heads", "reproduce_induction", "causal_trace", "trace_facts", "rome", "memit",
           "activation_patching", "attribution_patching", "path_patching", "tuned_lens", "train_tuned_lens",
           "load_tuned_lens", "TunedLens", "evaluate_lens", "prediction_depth", "experts", "patching", "induction",
           "wiki_documents", "features", "train_transcoders", "train_sae", "attribution_graph"]
