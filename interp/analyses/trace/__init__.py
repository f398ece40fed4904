"""Causal tracing (Meng et al. 2022): where a model stores a fact, read as how much of the answer comes back
when one clean hidden state is restored into a run whose subject was corrupted.

trace (``causal_trace``, ``TraceResult``: one prompt, every layer x token) · corrupt (the two corruptions of
the subject, Gaussian noise or symmetric token replacement, and the noise level) · facts (``trace_facts``: the
effect at the last subject token averaged over fact records, ROME's choice of edit layer) · view (the
interactive heatmaps of ``TraceResult.show()``).
"""

from .corrupt import (
    CORRUPTIONS,
    SUBJECTS,
    check_corruption,
    check_noise,
    choose_replacement,
    embedding_std,
    noise_level,
    prompt_and_subject,
)
from .facts import FactTraceResult, fact_prompt, trace_facts
from .trace import KINDS, TraceResult, causal_trace, check_kinds

__all__ = ["CORRUPTIONS", "KINDS", "SUBJECTS", "FactTraceResult", "TraceResult", "causal_trace",
           "check_corruption", "check_kinds", "check_noise", "choose_replacement", "embedding_std",
           "fact_prompt", "noise_level", "prompt_and_subject", "trace_facts"]
