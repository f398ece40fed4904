"""``interp.rome``: the public face of fact editing — ROME, the FT-L baseline, their evaluation and the fact records.

    e = interp.rome.edit(model, "{} is located in the city of", "The Eiffel Tower", " Rome")
    e.revert(); with model.edited(e): ...
    res = interp.rome.evaluate(model, interp.rome.load_records(split="dev")[:10], baseline="ft")
    seq = interp.rome.sequential_edits(model, interp.rome.load_records(split="test")[:100], "rome")

MEMIT has its own face, :mod:`interp.memit`. The code lives in :mod:`interp.editing` (its ``__init__`` maps it);
scripts that need an internal import it from there. The ``edit`` / ``eval-edits`` commands and the demo are in
:mod:`interp.cli.edit`.
"""

from .editing.base import model_edited
from .editing.compare import compare_edit, compare_completions, lens_before_after
from .editing.defaults import default_layer
from .editing.eval.report import EvalResult
from .editing.eval.run import EvalSettings, evaluate
from .editing.eval.scale import ScaleSettings, sequential_edits
from .editing.eval.scale_result import ScaleResult, mass_table, plot_mass
from .editing.facts import Fact, load_records
from .editing.ft import FTEdit, ft_edit, load_ft_edit
from .editing.hparams import FTHparams, RomeHparams
from .editing.keys import key_stats
from .editing.rome import Edit, edit, edits_together, load_edit

compare = compare_edit  # interp.rome.compare(model, edit, record): completions and target probabilities, before/after

__all__ = ["Edit", "EvalResult", "EvalSettings", "FTEdit", "FTHparams", "Fact", "RomeHparams", "ScaleResult",
           "ScaleSettings", "compare", "compare_completions", "default_layer", "edit", "edits_together", "evaluate",
           "ft_edit", "key_stats", "lens_before_after", "load_edit", "load_ft_edit", "load_records", "mass_table", "model_edited",
           "plot_mass", "sequential_edits"]
