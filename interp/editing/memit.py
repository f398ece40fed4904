"""MEMIT: mass editing of many facts at once over several MLP layers (Meng et al. 2023, "Mass-Editing Memory in a
Transformer"). The algorithm is in :mod:`interp.editing.memit_solve`; this module is the edit object and its API.

    e = memit_edit(model, load_records(split="dev")[:100])      # 100 facts, default_layers(model)
    e.revert(); e.apply(model); e.save("batch.safetensors"); load_memit_edit("batch.safetensors")

Every layer's change is ``ΔW_l = R_lᵀ A_l`` with the factors ``R_l`` [n, d_model] (the residual share) and
``A_l = K_l (λ C_l + K_lᵀ K_l)⁻¹`` [n, d_mlp] kept in float64; a write is ``(W.double() + ΔW).to(W.dtype)`` on
the CPU with ``ΔW`` computed on one thread, so apply / revert / save / load / apply are bit-exact.
"""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..core.results import new_figure, save_fig
from .base import WeightEdit, notify, read_edit_files, write_edit_files
from .defaults import MEMIT_SPAN, default_layers, hparams_for
from .hparams import MemitHparams
from .keys import layer_stats
from .matrices import restore_matrices
from .memit_solve import (
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
from .preserve import preserve_terms, vstar_neighbours
from .registry import EditorSpec, register
from .vstar import context_templates

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

    def diagnostics(self, index: int | None = None) -> dict:
        """Fact ``index``'s diagnostics (the key at the last layer; |ΔW| / |W| of the layer changed most)."""
        out = super().diagnostics(index)
        rel = [v.get("relative_update", math.nan) for v in (self.norms.get("layers") or {}).values()]
        out["relative_update"] = max(rel) if rel else math.nan
        if index is None or not 0 <= index < len(self.facts_info):
            return out
        f = self.facts_info[index]
        return {**out, "opt_p_final": math.exp(-f["nll_final"]), "delta_norm": f.get("delta_norm", math.nan),
                "clamp": f.get("clamp", math.nan), "key_norm": (f.get("key_norms") or {}).get(str(self.layer), math.nan),
                "key_match": f.get("key_match", math.nan)}

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
    sha256 differs from the recorded one is refused, and so is a damaged or altered .json."""
    def build(meta, t):
        layers = [int(l) for l in meta["layers"]]
        return MemitEdit(requests=list(meta["requests"]), layers=layers, resids={l: t[f"resid.{l}"] for l in layers},
                         adjs={l: t[f"adj.{l}"] for l in layers}, keys={l: t[f"key.{l}"] for l in layers}, z=t["z"],
                         hparams=dict(meta["hparams"]), seed=int(meta["seed"]), templates=list(meta["templates"]),
                         fingerprint=str(meta["fingerprint"]), facts_info=list(meta.get("facts_info", [])),
                         norms=dict(meta.get("norms", {})), timings=dict(meta.get("timings", {})),
                         losses=list(meta.get("losses", [])))

    return read_edit_files(path, FORMAT, "MEMIT edit", build)


# ============================================================================================ layers
def memit_layers(model, requested=None) -> list[int]:
    """The layers an edit writes: ``requested`` (consecutive), a range of :data:`~interp.editing.defaults.MEMIT_SPAN`
    layers ending at an int, or the model's default range (:func:`interp.editing.defaults.default_layers`)."""
    if requested is None:
        return check_layers(model, default_layers(model))
    if isinstance(requested, int) and not isinstance(requested, bool):
        end = min(model.check_layer(requested), model.n_layers - 2)
        return check_layers(model, range(max(0, end - MEMIT_SPAN + 1), end + 1))
    return check_layers(model, requested)


# ============================================================================================ edit
def memit_edit(model, records, layers=None, *, seed: int = 0, stats=None, progress=None, **hparams) -> MemitEdit:
    """Write ``records`` (Facts, record dicts or request dicts with prompt/subject/target_new) into ``model`` at
    once with MEMIT over ``layers`` (consecutive; default :func:`default_layers`); returns the applied edit.

    ``stats``: None (Wikipedia key statistics per layer, cached), or ``{layer: KeyStats | [d_mlp, d_mlp]
    tensor}``. ``hparams`` override :class:`MemitHparams` (``mom2_update_weight`` is λ). ``seed`` picks the
    context templates. ``progress``: a callable getting one event dict per stage, True for lines on stderr. All
    checks run before any weight changes; a failure or interrupt during the layer-by-layer writes restores every
    layer bit for bit."""
    return _memit(model, records, layers, hparams_for(model, MemitHparams, "memit", **hparams), seed, stats, progress)


def _memit(model, records, layers, hp: MemitHparams, seed: int, stats, progress) -> MemitEdit:
    t_start = time.perf_counter()
    check_editable(model)
    requests = as_requests(records)
    layers = memit_layers(model, layers)
    check_batch_size(model, len(requests))
    fingerprint = model.fingerprint
    timings = {}
    mom2 = _resolve_stats(model, layers, stats, hp, progress)
    timings["stats_s"] = time.perf_counter() - t_start

    t0 = time.perf_counter()
    templates = context_templates(model, seed=seed, spec=hp.templates)
    notify(progress, stage="templates", templates=templates)
    targets = optimize_targets(model, requests, layers[-1], hp, templates, seed=seed, progress=progress,
                               neighbours=vstar_neighbours(model, requests, layers[-1], hp))
    timings["targets_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    preserve = preserve_terms(model, requests, layers, hp, templates, progress)
    res = spread(model, targets, layers, mom2, hp, progress, preserve=preserve)
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
        stats = layer_stats(model, layers, hp.mom2_n_tokens, progress=progress is True)
    if not isinstance(stats, dict):
        kind = type(stats).__name__
        raise ValueError(f"stats must be None or a dict {{layer: KeyStats or [d_mlp, d_mlp] tensor}}, got {kind}")  # noqa: TRY004
    missing = [l for l in layers if l not in stats]
    if missing:
        raise ValueError(f"stats has no statistics for layer(s) {missing}; it covers {sorted(stats)} and the edit "
                         f"needs {layers}")
    return {l: second_moment(stats[l], l, model.d_mlp) for l in layers}


def _many(model, facts, layers, hp, *, seed, stats, progress) -> MemitEdit:
    return _memit(model, list(facts), layers, hp, seed, stats, progress)


register(EditorSpec("memit", "MEMIT", MemitHparams, MemitEdit, memit_layers, many=_many))
