"""Patching: move activations between a clean and a corrupted run of prompt pairs and measure a metric.

activation (``activation_patching``: one patched forward per component and position, normalised so 0 is the
corrupted behaviour and 1 the clean one; ``PatchingResult``) · attribution (``attribution_patching``: AtP and
AtP*, every effect estimated from one gradient) · path (``path_patching``: a sender's effect through named
receivers only) · metrics (``logit_diff``, ``prob``, ``kl_to_clean`` and the prompt-pair inputs they score) ·
datasets (seeded offline prompt pairs: ``ioi``, ``fact_pairs``, ``induction_pairs``) · view (the interactive
grid of ``PatchingResult.show()``).
"""

from .activation import DIRECTIONS, OVER, POSITION_WORDS, Comparison, PatchingResult, activation_patching
from .attribution import attribution_patching
from .datasets import NAMES, PromptPairs, fact_pairs, induction_pairs, ioi, single_token_words
from .metrics import Metric, PairBatch, Pairs, kl_to_clean, logit_diff, make_pairs, prob
from .path import PathPatchingResult, path_patching

__all__ = ["DIRECTIONS", "NAMES", "OVER", "POSITION_WORDS", "Comparison", "Metric", "PairBatch", "Pairs",
           "PatchingResult", "PathPatchingResult", "PromptPairs", "activation_patching",
           "attribution_patching", "fact_pairs", "induction_pairs", "ioi", "kl_to_clean", "logit_diff",
           "make_pairs", "path_patching", "prob", "single_token_words"]
