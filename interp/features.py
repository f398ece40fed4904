"""``interp.features``: the public face of sparse features — train transcoders and SAEs on a CPU, judge them against
neuron baselines, read a text through them, change the model through them, and load published dictionaries.

    tc = interp.train_transcoders(model)                                  # every layer; cached, resumable
    q = interp.features.evaluate(model, tc)                               # held-out FVU, CE score, baselines
    q = interp.features.DictionaryQuality.from_json(json.load(f))        # a stored run's table, read back
    acts = interp.features.encode(model, tc, "The Eiffel Tower is in")    # active features per token
    card = interp.features.card(model, tc, layer, feature)                # top contexts, density, vocabulary
    with interp.features.intervene(model, tc, [(layer, feature, "clamp", 8.0, [5])]): ...
    fx = interp.features.ablations(model, tc, layer, text)                # every single ablation, run exactly
    interp.features.promoted_tokens(model, tc[layer], feature)            # the decoder's direct vocabulary
    interp.features.save(tc, folder, layout="sparsify")                   # or "saelens", "gemmascope"; load() reads

The code lives in :mod:`interp.analyses.features`.
"""

from .analyses.features import Dictionary, DictionarySet, TrainSettings
from .analyses.features.ablation import ablation_effects as ablations
from .analyses.features.card import feature_card as card
from .analyses.features.card import scan_features as scan
from .analyses.features.formats import load_dictionaries as load
from .analyses.features.formats import save_dictionaries as save
from .analyses.features.quality import DictionaryQuality
from .analyses.features.quality import evaluate_transcoders as evaluate
from .analyses.features.train import cached_transcoders as cached
from .analyses.features.use import encode, intervene, promoted_tokens, run_with_features, splice

__all__ = ["Dictionary", "DictionaryQuality", "DictionarySet", "TrainSettings", "ablations", "cached", "card", "encode", "evaluate",
           "intervene", "load", "promoted_tokens", "run_with_features", "save", "scan", "splice"]
