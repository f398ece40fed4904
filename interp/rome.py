"""``interp.rome``: the public face of fact editing — ROME, the FT-L baseline, their evaluation and the fact records.

    e = interp.rome.edit(model, "{} is located in the city of", "The Eiffel Tower", " Rome")
    e.revert(); with model.edited(e): ...
    res = interp.rome.evaluate(model, interp.rome.load_records(split="dev")[:10], baseline="ft")
    seq = interp.rome.sequential_edits(model, interp.rome.load_records(split="test")[:100], "rome")

The code lives in :mod:`interp.editing` (protocol in ``base``, ROME in ``rome``, FT-L in ``ft``, measurements in
``evaluate``, one edit before / after in ``compare``, many edits in ``scale``, records in ``facts``) and text generation in
:mod:`interp.core.generation`; this module only names them. The ``edit`` / ``eval-edits`` commands and the demo
are in :mod:`interp.cli.edit`.
"""

from .core.generation import sample_text, selected_logits
from .editing.base import WeightEdit, frozen_params, mlp_out_apply, mlp_out_bias, model_edited, write_matrix
from .editing.compare import EditComparison, compare_edit
from .editing.eval_measure import DriftSet, generation_entropies, measure, measure_probs, score_prompts
from .editing.eval_report import FAILURE_REASONS, diagnose
from .editing.evaluate import (DEMO_PROMPTS, EDITORS, EvalResult, LensBeforeAfter, compare_completions, drift_set,
                               drift_texts, evaluate, fact_probs, fact_scores, generation_entropy, lens_before_after,
                               lens_rows, ngram_entropy, target_nll, text_nll, with_and_without)
from .editing.facts import Fact, as_fact, check_prompt, check_target, load_records
from .editing.ft import FT_DEFAULTS, FTEdit, ft_edit, ft_edits
from .editing.memit import MemitEdit, load_memit_edit, memit_edit
from .editing.memit_solve import MemitHparams
from .editing.rome import (DEFAULT_LAYERS, TEMPLATE_PREFIXES, Edit, RomeHparams, context_templates, default_layer,
                           edit, edits_together, key_stats, load_edit, rank_one_update)
from .editing.scale import ScaleResult, mass_table, plot_mass, sequential_edits
from .editing.vstar import subject_last_index

compare = compare_edit  # interp.rome.compare(model, edit, record): completions and target probabilities, before/after

__all__ = ["DEFAULT_LAYERS", "DEMO_PROMPTS", "DriftSet", "EDITORS", "Edit", "EditComparison", "EvalResult",
           "FAILURE_REASONS", "diagnose", "drift_set", "generation_entropies", "measure", "measure_probs",
           "score_prompts", "MemitEdit", "MemitHparams", "load_memit_edit", "memit_edit",
           "FTEdit", "FT_DEFAULTS", "Fact", "LensBeforeAfter", "RomeHparams",
           "TEMPLATE_PREFIXES", "WeightEdit", "as_fact", "check_prompt", "check_target", "compare",
           "compare_completions", "compare_edit",
           "context_templates", "default_layer", "drift_texts", "edit", "edits_together", "evaluate",
           "fact_probs", "fact_scores",
           "frozen_params", "ft_edit", "ft_edits", "generation_entropy", "key_stats", "lens_before_after", "lens_rows",
           "load_edit", "load_records", "mlp_out_apply", "mlp_out_bias", "model_edited", "ngram_entropy",
           "rank_one_update", "sample_text", "selected_logits", "subject_last_index", "target_nll", "text_nll",
           "with_and_without", "write_matrix", "ScaleResult", "mass_table", "plot_mass", "sequential_edits"]
