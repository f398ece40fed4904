"""Layer 2, weight editing. Imports core and analyses; ``interp.rome`` and ``interp.memit`` are its public faces.

The protocol (``base``: an edit applies, reverts bit for bit, saves, loads and reports its diagnostics) and the
registry of editors (``registry``); each editor is one module that registers itself: ``rome`` (rank-one, with
the value optimisation in ``vstar`` and the tails-only forwards of ``prefix``), ``memit`` (many facts over several
layers; its solve in ``memit_solve``) and ``ft`` (FT-L, constrained fine-tuning). Their hyperparameters are sibling
dataclasses (``hparams``); values chosen on a dev split for a model sit in one table (``defaults``). Shared by
them: the fact records (``facts``), the key statistics (``keys``), the loss on Wikipedia texts (``drift``: the
evaluation's drift and ROME's guard) and the down projections kept and varied per row (``matrices``). The
evaluation (``eval/``) and one edit before / after (``compare``, with its view) stand on top and know no editor by
name.

Adding an editor: a module with its edit class (a ``base.WeightEdit`` with ``updated_matrix``, ``diagnostics``,
``save`` and a loader), its hyperparameter dataclass in ``hparams``, and at its end ``register(EditorSpec(...))``
(``registry``: its entry points and the layers it writes); import it below. The evaluation, the scale runs and
``interp edit --editor NAME`` then know it.
"""

# Each registers its editor; the order is the order they are listed in.
from . import rome  # noqa: F401, I001
from . import ft  # noqa: F401
from . import memit  # noqa: F401
