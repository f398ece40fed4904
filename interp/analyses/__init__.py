"""Layer 1, the analyses: each reads a model through the core and returns a result object. They import core only,
never editing or the command line.

lens (logit lens) · tuned_lens, tuned_lens_train, tuned_lens_eval (the tuned lens: translators, CPU training,
held-out KL and prediction depth) · attribution (decomposition, direct logit attribution) · attention (patterns, per-head
statistics) · head_scan (corpus-averaged head statistics) · neurons (activations, corpus top-k, vocabulary
projection, ablation) · induction (induction/prefix/previous-token scores, ablation checks) · toy and
induction_train (the phase change from scratch) · trace, trace_corrupt, trace_facts (causal tracing, its two
corruptions — Gaussian noise or symmetric token replacement — and the per-fact average) · stats (ROME's key second moments) ·
accumulate (the accumulator protocol and scan driver) · dist (the same statistics over torch.distributed ranks) ·
patching (activation patching), attribution_patching (AtP, AtP*), path_patching, metrics (logit_diff, prob,
kl_to_clean) and datasets (IOI, factual-recall and induction prompt pairs). A ``*_view.py`` beside a result
(attention_view, lens_view, attribution_view, neurons_view, trace_view, induction_view) builds its interactive
view from the core's page builder (core/views).
"""
