"""The key statistics the editors solve with, C = E[k kᵀ] per layer (:mod:`interp.analyses.stats`), kept in the
model's cache after their first use (they are read from or written to the disk cache there too)."""

from __future__ import annotations

from ..analyses.stats import mlp_key_second_moment, mlp_key_second_moments
from ..core.caches import model_cache


def key_stats(model, layer: int, n_tokens: int = 100_000, **kwargs):
    """``interp.analyses.stats.mlp_key_second_moment`` for (model, layer, n_tokens), kept in the model's cache."""
    table = model_cache(model, "rome.key_stats")
    k = (int(layer), int(n_tokens))
    if k not in table:
        table[k] = mlp_key_second_moment(model, layer, n_tokens=n_tokens, **kwargs)
    return table[k]


def layer_stats(model, layers, n_tokens: int = 100_000, *, progress: bool = False) -> dict:
    """``{layer: KeyStats}`` for ``layers``, sharing :func:`key_stats`'s cache; the missing layers are computed in
    one corpus scan."""
    table = model_cache(model, "rome.key_stats")
    missing = [l for l in layers if (int(l), int(n_tokens)) not in table]
    if missing:
        for l, s in mlp_key_second_moments(model, missing, n_tokens=n_tokens, progress=progress).items():
            table[(l, int(n_tokens))] = s
    return {l: table[(int(l), int(n_tokens))] for l in layers}
