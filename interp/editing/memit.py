"""MEMIT: mass editing of many facts at once over several MLP layers (Meng et al. 2023, "Mass-Editing Memory in a
Transformer"). The algorithm is in :mod:`interp.editing.memit_solve`; this module is the edit object and its API.

    e = memit_edit(model, load_records(split="dev")[:100])      # 100 facts, default_layers(model)
    e.revert(); e.apply(model); e.save("batch.safetensors"); load_memit_edit("batch.safetensors")

Every layer's change is ``ΔW_l = R_lᵀ A_l`` with the factors ``R_l`` [n, d_model] (the residual share) and
``A_l = K_l (λ C_l + K_lᵀ K_l)⁻¹`` [n, d_mlp] kept in float64; a write is ``(W.double() + ΔW).to(W.dtype)`` on
the CPU with ``ΔW`` computed on one thread, so apply / revert / save / load / apply are bit-exact.
"""

from __future__ import annotations

import time
import types
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..analyses.stats import mlp_key_second_moments
from ..core.caches import model_cache
from ..core.results import new_figure, save_fig
from .base import WeightEdit, notify, read_edit_files, restore_matrices, write_edit_files
from .memit_solve import (
    MemitHparams,
    as_requests,
    check_batch_size,
    check_editable,
    check_layers,
    factor_product,
    optimize_targets,
    second_moment,
    spread,
    updated,
)
from .rome import context_templates, default_layer

# The layer range per model (by fingerprint), chosen on the dev split only: the embedded SmolLM2-135M-Instruct in
# data/memit_layers.json, Gemma 3 270M in studies/memit_gemma (results.json, README.md: 0-5 beat 0-4, 0-6 and every
# shorter range ending at 4, 5 or 6 with 100 dev facts at once). Other models: DEFAULT_SPAN layers ending at ROME's.
DEFAULT_LAYERS = types.MappingProxyType({"b6b4e20b-538090432": (0, 1, 2, 3, 4),
                                         "99115288-1072419280": (0, 1, 2, 3, 4, 5)})
DEFAULT_SPAN = 5
# Per-model settings that differ from MemitHparams (explicit keywords still win), chosen on the dev split. Gemma 3
# (studies/memit_gemma): its residual at layer 5 is ~4300 long, so v* at lr 0.5 ran out of its 20 Adam steps (23 of
# 100 dev facts still above NLL 0.5; at lr 2 none, the largest 0.38) and λ = 5000 beat 250-10000 (harmonic mean 93.1;
# the clamp never bound: |delta| <= 0.12 |h|).
MODEL_HPARAMS = types.MappingProxyType({"99115288-1072419280": types.MappingProxyType(
    {"v_lr": 2.0, "mom2_update_weight": 5000.0})})
FORMAT = "interp.memit.MemitEdit/1"


# ============================================================================================ the edit object
@dataclass(repr=False)
class MemitEdit(WeightEdit):
    """A MEMIT batch: ``ΔW_l = resids[l]ᵀ adjs[l]`` on each of ``layers`` (consecutive MLP down projections).

    ``requests`` (one dict per fact), ``z`` [n, d_model] the residual targets at the last layer, ``resids[l]``
    each fact's residual share at layer ``l`` (on a model with post-norms, the MLP-output change it was mapped to:
    :func:`~.memit_solve.post_norm_targets`), ``keys[l]`` the keys the layer was solved for, ``facts_info`` per
    fact (v* NLL before/after, whether the clamp bound, key and residual norms, ``z_error``: the share of ``z - h``
    still missing after the edit, ``key_match``: the share of the update the bare prompt's key gets, mean over the
    layers), ``norms`` per layer (with each layer's residual error before and after its write and the share of its
    step it delivered)."""
    requests: list
    layers: list
    resids: dict
    adjs: dict
    keys: dict
    z: torch.Tensor
    hparams: dict
    seed: int
    templates: list
    fingerprint: str
    facts_info: list = field(default_factory=list)
    _originals: dict | None = field(default=None, compare=False, kw_only=True)
    _editeds: dict | None = field(default=None, compare=False, kw_only=True)

    @property
    def layer(self) -> int:
        """The last (critical) layer of the range, where the targets live."""
        return self.layers[-1]

    def delta(self, layer: int) -> torch.Tensor:
        """ΔW of ``layer`` [d_model, d_mlp], float64."""
        if layer not in self.resids:
            raise ValueError(f"layer {layer} is not edited by this MEMIT edit; its layers are {self.layers}")
        return factor_product(self.resids[layer], self.adjs[layer])

    def updated_matrix(self, model, layer: int, matrix: torch.Tensor) -> torch.Tensor:
        d = self.delta(layer)
        if tuple(matrix.shape) != tuple(d.shape):
            raise ValueError(f"edit of shape {tuple(d.shape)} does not fit layer {layer}'s down projection "
                             f"{tuple(matrix.shape)}")
        return updated(matrix, d)

    def apply(self, model, progress=None) -> MemitEdit:
        """Write every layer's update into ``model`` (same fingerprint required). All new matrices are computed
        before the first write, and a failure while writing puts back every layer already written."""
        if self.applied:
            where = "this model" if self.applied_model is model else "another model"
            raise ValueError(f"this edit is already applied to {where}; revert() it first")
        if self.fingerprint and model.fingerprint != self.fingerprint:
            raise ValueError(f"edit was made on a model with fingerprint {self.fingerprint}, this model has "
                             f"{model.fingerprint} ({model.source}); refusing to apply it")
        layers = check_layers(model, self.layers)
        originals = {l: model.mlp_out_matrix(l).detach().cpu().clone() for l in layers}
        news = {l: self.updated_matrix(model, l, originals[l]) for l in layers}
        self._write(model, originals, news, progress)
        return self

    def _write(self, model, originals: dict, news: dict, progress=None) -> None:
        done = []
        try:
            with torch.no_grad():
                for l, new in news.items():
                    w = model.mlp_out_matrix(l)
                    done.append(l)
                    w.copy_(new.to(w.device))
                    if not torch.isfinite(w).all():
                        raise FloatingPointError(f"the edit produced non-finite weights at layer {l}")
                    notify(progress, stage="update", layer=l)
        except BaseException:
            restore_matrices(model, {l: originals[l] for l in done})
            raise
        self._record(model, originals, news)

    def _record(self, model, originals: dict, news: dict) -> None:
        self._model, self._originals = weakref.ref(model), originals
        self._editeds = {l: n.detach().cpu().clone() for l, n in news.items()}

    def revert(self) -> None:
        """Restore every edited layer bit for bit (refused, with nothing changed, if any of them was changed
        since: revert later edits first)."""
        model = self.applied_model
        if model is None:
            raise ValueError("this edit is not applied to any model; nothing to revert")
        for l in self.layers:
            if not torch.equal(model.mlp_out_matrix(l).detach().cpu(), self._editeds[l]):
                raise ValueError(f"layer {l}'s weights changed since this edit was applied (a later edit of the "
                                 "same layer?); revert the later edit first")
        restore_matrices(model, {l: self._originals[l] for l in self.layers})
        self._model = self._originals = self._editeds = None

    # ------------------------------------------------------------------ saving
    def to_dict(self) -> dict:
        return {"requests": self.requests, "layers": list(self.layers), "hparams": self.hparams, "seed": self.seed,
                "templates": self.templates, "fingerprint": self.fingerprint, "norms": self.norms,
                "timings": self.timings, "losses": self.losses, "facts_info": self.facts_info}

    def save(self, path) -> Path:
        """Factors, keys and targets to ``<path>.safetensors``; metadata with the tensor file's sha256 to
        ``<path>.json``. Returns the .safetensors path."""
        tensors = {"z": self.z}
        for l in self.layers:
            tensors.update({f"resid.{l}": self.resids[l], f"adj.{l}": self.adjs[l], f"key.{l}": self.keys[l]})
        return write_edit_files(path, tensors, FORMAT, self.to_dict())

    # ------------------------------------------------------------------ Result interface
    def summary(self) -> str:
        info = self.facts_info
        bound = sum(bool(f.get("clamp_bound")) for f in info)
        nll = sum(f["nll_final"] for f in info) / max(len(info), 1)
        return (f"MEMIT edit of {len(self.requests)} fact(s) over layers {self.layers[0]}-{self.layers[-1]} "
                f"(λ={self.hparams.get('mom2_update_weight')}, mean final v* NLL {nll:.3g}, clamp bound for "
                f"{bound}, mean z error {self.norms.get('z_error_mean', float('nan')):.3g}, "
                f"{self.timings.get('total_s', float('nan')):.1f} s){' [applied]' if self.applied else ''}")

    def to_json(self) -> dict:
        return {"result": "MemitEdit", "summary": self.summary(), **self.to_dict(), "applied": self.applied}

    def to_frame(self):
        """One row per (fact, layer): the fact's diagnostics and, per layer, its key norm and residual share."""
        import pandas as pd

        rows = []
        for i, info in enumerate(self.facts_info):
            for l in self.layers:
                rows.append({"fact": i, "layer": l,
                             **{k: v for k, v in info.items() if k not in ("key_norms", "key_match_layers")},
                             "key_match_layer": (info.get("key_match_layers") or {}).get(str(l), float("nan")),
                             "key_norm": float(self.keys[l][i].norm()), "resid_norm": float(self.resids[l][i].norm())})
        return pd.DataFrame(rows).set_index(["fact", "layer"])

    def plot(self, *, out=None):
        """Left: each fact's v* optimisation (target NLL per step). Right: |ΔW_l| / |W_l| per layer."""
        fig = new_figure(figsize=(10, 3.6))
        ax1, ax2 = fig.subplots(1, 2)
        for losses in self.losses:
            ax1.plot(range(len(losses)), losses, alpha=0.4)
        ax1.set(xlabel="Adam step", ylabel="target NLL (nats)", yscale="log",
                title=f"residual targets at layer {self.layer} ({len(self.requests)} facts)")
        rel = [self.norms["layers"][str(l)]["relative_update"] for l in self.layers]
        ax2.bar([str(l) for l in self.layers], rel)
        ax2.set(xlabel="layer", ylabel="|ΔW| / |W|",
                title=f"update per layer (λ={self.hparams['mom2_update_weight']})")
        fig.tight_layout()
        return save_fig(fig, out)


def load_memit_edit(path) -> MemitEdit:
    """Read an edit written by :meth:`MemitEdit.save` (the .safetensors or the .json path); a tensor file whose
    sha256 differs from the recorded one is refused."""
    meta, t = read_edit_files(path, FORMAT, "MEMIT edit")
    layers = [int(l) for l in meta["layers"]]
    return MemitEdit(requests=meta["requests"], layers=layers, resids={l: t[f"resid.{l}"] for l in layers},
                     adjs={l: t[f"adj.{l}"] for l in layers}, keys={l: t[f"key.{l}"] for l in layers}, z=t["z"],
                     hparams=meta["hparams"], seed=int(meta["seed"]), templates=meta["templates"],
                     fingerprint=meta["fingerprint"], facts_info=meta.get("facts_info", []),
                     norms=meta.get("norms", {}), timings=meta.get("timings", {}), losses=meta.get("losses", []))


# ============================================================================================ layers and statistics
def default_layers(model) -> list[int]:
    """The layer range: the dev-chosen one for the embedded model (:data:`DEFAULT_LAYERS`), else
    :data:`DEFAULT_SPAN` consecutive layers ending at ROME's layer (:func:`interp.editing.rome.default_layer`,
    at most the second-to-last layer)."""
    if model.fingerprint in DEFAULT_LAYERS:
        return check_layers(model, DEFAULT_LAYERS[model.fingerprint])
    end = min(default_layer(model), model.n_layers - 2)
    return check_layers(model, range(max(0, end - DEFAULT_SPAN + 1), end + 1))


def memit_stats(model, layers, n_tokens: int = 100_000, *, progress: bool = False) -> dict:
    """``{layer: KeyStats}`` for ``layers`` with ``n_tokens`` Wikipedia tokens, sharing ROME's per-model cache
    (``rome.key_stats``); the missing layers are computed in one corpus scan (and cached on disk)."""
    table = model_cache(model, "rome.key_stats")
    missing = [l for l in layers if (int(l), int(n_tokens)) not in table]
    if missing:
        for l, s in mlp_key_second_moments(model, missing, n_tokens=n_tokens, progress=progress).items():
            table[(l, int(n_tokens))] = s
    return {l: table[(int(l), int(n_tokens))] for l in layers}


def hparams_for(model, **overrides) -> MemitHparams:
    """The hyperparameters an edit of ``model`` uses: :class:`MemitHparams`, this model's :data:`MODEL_HPARAMS`,
    then ``overrides``."""
    return MemitHparams.make(**{**MODEL_HPARAMS.get(model.fingerprint, {}), **overrides})


# ============================================================================================ edit
def memit_edit(model, records, layers=None, *, seed: int = 0, stats=None, progress=None, **hparams) -> MemitEdit:
    """Write ``records`` (Facts, record dicts or request dicts with prompt/subject/target_new) into ``model`` at
    once with MEMIT over ``layers`` (consecutive; default :func:`default_layers`); returns the applied edit.

    ``stats``: None (Wikipedia key statistics per layer, cached), or ``{layer: KeyStats | [d_mlp, d_mlp]
    tensor}``. ``hparams`` override :func:`hparams_for` (``mom2_update_weight`` is λ). ``seed`` picks the
    context templates. ``progress``: a callable getting one event dict per stage, True for lines on stderr. All
    checks run before any weight changes; a failure or interrupt during the layer-by-layer writes restores every
    layer bit for bit."""
    t_start = time.perf_counter()
    hp = hparams_for(model, **hparams)
    check_editable(model)
    requests = as_requests(records)
    layers = default_layers(model) if layers is None else check_layers(model, layers)
    check_batch_size(model, len(requests))
    fingerprint = model.fingerprint
    timings = {}
    mom2 = _resolve_stats(model, layers, stats, hp, progress)
    timings["stats_s"] = time.perf_counter() - t_start

    t0 = time.perf_counter()
    templates = context_templates(model, seed=seed, spec=hp.templates)
    notify(progress, stage="templates", templates=templates)
    targets = optimize_targets(model, requests, layers[-1], hp, templates, seed=seed, progress=progress)
    timings["targets_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    res = spread(model, targets, layers, mom2, hp, progress)
    timings["spread_s"] = time.perf_counter() - t0
    try:
        edit = _assemble(requests, layers, hp, seed, templates, fingerprint, targets, res, timings)
        edit._record(model, res["originals"], res["edited"])
    except BaseException:  # the weights are written by now: nothing may leave them so without a ledger
        restore_matrices(model, res["originals"])
        raise
    timings["total_s"] = time.perf_counter() - t_start
    return edit


def _assemble(requests, layers, hp, seed, templates, fingerprint, targets, res, timings) -> MemitEdit:
    facts_info = []
    for i, info in enumerate(targets.info):
        # an answered fact has z = h: a share of z - h still missing has no meaning there (the divisor is 0)
        match = [res["key_match"][l][i] for l in layers]
        facts_info.append({**info, "z_error": None if info.get("answered") else res["z_error"][i],
                           "key_norms": {str(l): float(res["keys"][l][i].norm()) for l in layers},
                           "key_match": sum(match) / len(match),
                           "key_match_layers": {str(l): m for l, m in zip(layers, match)}})
    errors = [f["z_error"] for f in facts_info if f["z_error"] is not None]
    norms = {"layers": {str(l): v for l, v in res["norms"].items()},
             "z_error_mean": sum(errors) / len(errors) if errors else float("nan"),
             "delta_mean": sum(f["delta_norm"] for f in targets.info) / len(targets.info)}
    return MemitEdit(requests=requests, layers=layers, resids=res["resid"], adjs=res["adj"], keys=res["keys"],
                     z=targets.z, hparams=hp.to_dict(), seed=seed, templates=list(templates),
                     fingerprint=fingerprint, facts_info=facts_info, norms=norms, timings=timings,
                     losses=targets.losses)


def _resolve_stats(model, layers: list[int], stats, hp: MemitHparams, progress) -> dict:
    """{layer: C float64} for every edited layer, validated before anything is optimised."""
    if stats is None:
        notify(progress, stage="stats", layers=layers, n_tokens=hp.mom2_n_tokens)
        stats = memit_stats(model, layers, hp.mom2_n_tokens, progress=progress is True)
    if not isinstance(stats, dict):
        kind = type(stats).__name__
        raise ValueError(f"stats must be None or a dict {{layer: KeyStats or [d_mlp, d_mlp] tensor}}, got {kind}")  # noqa: TRY004
    missing = [l for l in layers if l not in stats]
    if missing:
        raise ValueError(f"stats has no statistics for layer(s) {missing}; it covers {sorted(stats)} and the edit "
                         f"needs {layers}")
    return {l: second_moment(stats[l], l, model.d_mlp) for l in layers}
