"""``interp.induction``: the public face of induction heads — find them in any model, check them causally, score
in-context learning, and watch them form from scratch; with the building blocks the scores are made of.

    scan = interp.induction.induction_heads(model)                        # per-head scores, .top(n)
    check = interp.induction.ablation_check(model, scan=scan)             # top heads vs layer-matched random heads
    icl = interp.induction.icl_ablation(model, scan.top_heads(5), context="concat", early=50, late=500, n_docs=16)
    demo = interp.induction.reproduce(None, layers=2, seeds=1, steps=1400)   # the phase change on a CPU

The code lives in :mod:`interp.analyses.induction`.
"""

from .analyses.induction import (
    ablation_check,
    copying_score,
    handmade_induction_model,
    icl_ablation,
    icl_score,
    induction_heads,
    reproduce,
)
from .analyses.induction.heads import attention_patterns, induction_score, repeated_tokens

__all__ = ["ablation_check", "attention_patterns", "copying_score", "handmade_induction_model", "icl_ablation",
           "icl_score", "induction_heads", "induction_score", "repeated_tokens", "reproduce"]
