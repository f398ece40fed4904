"""The editors, registered by name: what the evaluation, the scale runs and the command line know of an editor.

Each editor module (``rome``, ``ft``, ``memit``) ends by registering one :class:`EditorSpec`: its name, its
hyperparameter dataclass, the edit class it makes, the layers it writes and its entry points. Callers look an
editor up once (:func:`editor_spec`, :func:`bind`) and never compare names again. A fourth editor is a module that
does the same, imported by ``interp/editing/__init__.py``.

    ed = bind(model, "rome", layer=4, seed=0, hparams={"kl_factor": 0.1})
    handle = ed.one(fact)          # an applied edit; ed.hparams: the settings it actually uses
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .defaults import default_layer, hparams_for


@dataclass(frozen=True)
class EditorSpec:
    """An editor. The entry points take ``(model, facts_or_fact, layers, hp, seed=, stats=, progress=)`` with ``hp``
    an instance of ``hparams`` and facts anything with ``prompt``, ``subject`` and ``target_new`` (a
    :class:`~interp.editing.facts.Fact` or :class:`~interp.editing.facts.Request`): ``one`` returns one applied edit of a fact; ``many`` one applied edit of every fact (MEMIT);
    ``together`` unapplied edits, one per fact, each as ``one`` would make it alone (shared forwards).
    ``layers(model, requested)`` -> the down projections it writes (``requested``: None, an int or a list);
    ``stats(model, layers, hp)`` -> statistics every edit of a run may share (None: none)."""
    name: str
    title: str
    hparams: type
    edit_type: type
    layers: Callable
    one: Callable | None = None
    many: Callable | None = None
    together: Callable | None = None
    stats: Callable | None = None


EDITORS: dict[str, EditorSpec] = {}


def register(spec: EditorSpec) -> EditorSpec:
    if spec.name in EDITORS and EDITORS[spec.name] != spec:
        raise ValueError(f"an editor named {spec.name!r} is registered already")
    if (spec.one is None) == (spec.many is None):
        raise ValueError(f"editor {spec.name!r}: give exactly one of one= (an edit per fact) or many= (one edit of "
                         "all facts)")
    EDITORS[spec.name] = spec
    return spec


def editor_spec(name) -> EditorSpec:
    """The registered editor called ``name``."""
    if isinstance(name, str) and name in EDITORS:
        return EDITORS[name]
    raise ValueError(f"editor {name!r} not known; allowed: {', '.join(map(repr, EDITORS))} or a "
                     "callable(model, record) -> edit")


def spec_of_edit(edit) -> EditorSpec | None:
    """The registered editor whose edits are of ``edit``'s type (None: an edit of no registered editor)."""
    return next((s for s in EDITORS.values() if type(edit) is s.edit_type), None)


def check_editor(editor) -> None:
    """A registered name or a callable; anything else is refused before work starts."""
    if not callable(editor):
        editor_spec(editor)


@dataclass
class Editor:
    """An editor bound to a model and its settings (what one evaluation or run edits with). ``layers``: the down
    projections it writes (checked bit for bit after each revert; None: not known, as for a callable).
    ``hparams``: the settings it actually uses, as recorded."""
    name: str
    title: str
    layers: list | None
    hparams: dict
    one: Callable | None = None
    many: Callable | None = None
    together: Callable | None = None


def bind(model, editor, *, layer=None, seed: int = 0, stats=None, hparams: dict | None = None,
         sequential: bool = False, progress=None) -> Editor:
    """An :class:`Editor` for a registered name or for ``fn(model, record) -> applied edit`` (with ``.revert()``).
    ``hparams`` override the model's defaults (:func:`interp.editing.defaults.hparams_for`, with its sequential
    overrides when ``sequential``); a ``layers`` entry among them names the layers to write, as ``layer`` does.
    ``stats``: statistics to edit with (None: the editor's own, computed or read from cache once here).
    ``progress``: the editors' stage events (:func:`interp.editing.base.notify`)."""
    overrides = dict(hparams or {})
    if callable(editor):
        return Editor(getattr(editor, "__name__", "custom"), "custom", None, overrides,
                      one=lambda fact: editor(model, fact))
    spec = editor_spec(editor)
    requested = overrides.pop("layers", None)
    hp = hparams_for(model, spec.hparams, spec.name, sequential=sequential, **overrides)
    layers = spec.layers(model, layer if requested is None else requested)
    if stats is None and spec.stats is not None:
        stats = spec.stats(model, layers, hp)
    kw = {"seed": seed, "stats": stats, "progress": progress}

    def entry(fn):
        return None if fn is None else (lambda facts: fn(model, facts, layers, hp, **kw))

    return Editor(spec.name, spec.title, list(layers), hp.to_dict(), one=entry(spec.one), many=entry(spec.many),
                  together=entry(spec.together))


def one_layer(name: str):
    """The ``layers`` of an editor that writes one down projection: the requested layer, else the model's default
    edit layer (:func:`interp.editing.defaults.default_layer`)."""
    def layers(model, requested) -> list[int]:
        if requested is None:
            return [default_layer(model)]
        if isinstance(requested, (list, tuple)):
            if len(requested) != 1:
                raise ValueError(f"layers={list(requested)!r}; {name} writes one layer (allowed: one layer index)")
            requested = requested[0]
        return [model.check_layer(requested)]
    return layers
