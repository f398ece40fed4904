"""Per-model memo tables: values derived from one loaded model (noise scales, context templates, key statistics,
a KV-cache twin) kept as long as the model object lives, and never shared with another model.

One helper instead of module-level dicts keyed by fingerprint: the table dies with the model, so a long session
that loads and drops models does not grow, and an edited model object is never confused with another one.
"""

from __future__ import annotations

import weakref

_TABLES: "weakref.WeakKeyDictionary[object, dict[str, dict]]" = weakref.WeakKeyDictionary()


def model_cache(model, name: str) -> dict:
    """The dict named ``name`` that belongs to ``model`` (created empty on first use)."""
    tables = _TABLES.get(model)
    if tables is None:
        tables = _TABLES[model] = {}
    return tables.setdefault(name, {})


def clear(model, name: str | None = None) -> None:
    """Forget ``model``'s table ``name`` (or all of them)."""
    tables = _TABLES.get(model)
    if tables is not None:
        tables.pop(name, None) if name else tables.clear()
