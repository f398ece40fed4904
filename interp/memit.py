"""``interp.memit``: the public face of MEMIT mass editing (many facts at once, over several MLP layers).

    e = interp.memit.edit(model, interp.rome.load_records(split="dev")[:100])   # layers=default_layers(model)
    e.revert(); with model.edited(e): ...
    e.save("batch.safetensors"); interp.memit.load("batch.safetensors")

The code lives in :mod:`interp.editing.memit` (the edit object, API) and :mod:`interp.editing.memit_solve` (the
residual targets and the layer-by-layer solve); this module only names them.
"""

from .editing.memit import (
                            DEFAULT_LAYERS,
                            DEFAULT_SPAN,
                            MODEL_HPARAMS,
                            MemitEdit,
                            default_layers,
                            hparams_for,
                            load_memit_edit,
                            memit_edit,
                            memit_stats,
)
from .editing.memit_solve import MemitHparams, as_requests, solve_layer

edit = memit_edit         # interp.memit.edit(model, records, layers=...)
load = load_memit_edit    # interp.memit.load(path)

__all__ = ["DEFAULT_LAYERS", "DEFAULT_SPAN", "MODEL_HPARAMS", "MemitEdit", "MemitHparams", "as_requests",
           "default_layers", "edit", "hparams_for", "load", "load_memit_edit", "memit_edit", "memit_stats",
           "solve_layer"]
