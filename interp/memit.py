"""``interp.memit``: the public face of MEMIT mass editing (many facts at once, over several MLP layers).

    e = interp.memit.edit(model, interp.rome.load_records(split="dev")[:100])   # layers=default_layers(model)
    e.revert(); with model.edited(e): ...
    e.save("batch.safetensors"); interp.memit.load("batch.safetensors")

The code lives in :mod:`interp.editing.memit` (the edit object, API) and :mod:`interp.editing.memit_solve` (the
residual targets and the layer-by-layer solve); this module only names them.
"""

from .editing.defaults import default_layers
from .editing.hparams import MemitHparams
from .editing.memit import MemitEdit, load_memit_edit, memit_edit

edit = memit_edit         # interp.memit.edit(model, records, layers=...)
load = load_memit_edit    # interp.memit.load(path)

__all__ = ["MemitEdit", "MemitHparams", "default_layers", "edit", "load", "load_memit_edit", "memit_edit"]
