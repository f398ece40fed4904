"""``interp.patching``: the public face of patching — the three methods, the metrics they score and the seeded
prompt-pair datasets, so that a researcher never imports from ``interp.analyses``.

    pairs = interp.patching.ioi(model, 16, seed=0)             # clean / corrupted prompts with their answers
    res = interp.patching.activation_patching(model, pairs, over="heads")          # logit diff on the answers
    est = interp.patching.attribution_patching(model, pairs, over="heads")
    est.compare(res)                                           # Spearman, Pearson, top-k recall

Your own pair and metric: ``activation_patching(model, clean_text, corrupted_text, metric)`` with
``logit_diff(" Paris", " Rome")``, ``prob(" Paris")``, ``kl_to_clean()`` or any ``metric(logits [n, vocab],
batch) -> [n]``. The code lives in :mod:`interp.analyses.patching`.
"""

from .analyses.patching import (
    NAMES,
    PatchingResult,
    PathPatchingResult,
    activation_patching,
    attribution_patching,
    fact_pairs,
    induction_pairs,
    ioi,
    kl_to_clean,
    logit_diff,
    make_pairs,
    path_patching,
    prob,
    single_token_words,
)

__all__ = ["NAMES", "PatchingResult", "PathPatchingResult", "activation_patching", "attribution_patching",
           "fact_pairs", "induction_pairs", "ioi", "kl_to_clean", "logit_diff", "make_pairs", "path_patching", "prob",
           "single_token_words"]
