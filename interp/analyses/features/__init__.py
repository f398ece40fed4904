"""Sparse features: TopK skip-transcoders and SAEs trained on a CPU, judged against neuron baselines.

dictionary (``Dictionary``: one dictionary's computation, checks and file format; ``DictionarySet``; ``Site``)
· data (the packed token stream over :mod:`interp.core.texts`) · train (``train_transcoders``, ``train_sae``: one
trainer, cached, resumable, on several ranks) · quality (``evaluate_transcoders``: held-out FVU, CE-loss score,
dead latents, every layer replaced, beside neuron and initialisation baselines) · use (encode, interventions,
splicing, features in a cache, decoder vocabulary) · card (the mergeable corpus scan and a feature's card) ·
formats (sparsify, SAELens and Gemma Scope 2 layouts) · features_view (the interactive card and per-token views).

Sites. A transcoder reads the MLP's input after its pre-norm (``blocks.L.mlp.hook_in``) and predicts the MLP's
write as the residual receives it (``blocks.L.hook_mlp_out``). On Gemma 3 that write is *after* the
post-feedforward norm: a spliced transcoder then replaces the whole branch, norm included, so its error is in the
residual's own units and no data-dependent 1/rms is left to apply at splice time; it is also where Gemma Scope 2's
transcoders write (``post_feedforward_layernorm.output``), so published and trained dictionaries compare directly.
"""

from .dictionary import Dictionary, DictionarySet, Site
from .train import TrainSettings, train_sae, train_transcoders

__all__ = ["Dictionary", "DictionarySet", "Site", "TrainSettings", "train_sae", "train_transcoders"]
