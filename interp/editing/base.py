"""The weight-edit protocol every editor follows (ROME's ``Edit``, MEMIT's ``MemitEdit``, FT-L's ``FTEdit``).

An edit rewrites one layer's MLP down projection ``M`` [d_model, d_mlp]. It knows how to compute its new matrix
from the current one (``updated_matrix``), so it can be applied, reverted and applied again, on this model or on a
fresh load of the same weights. Writes are bit-exact: :func:`write_matrix` keeps the matrix it replaced and
:meth:`WeightEdit.revert` copies it back, refusing when a later edit of the same layer is still in place.
``Model.edited(edit)`` / :func:`model_edited` only need ``apply(model)`` and ``revert()``. An edit reports the
diagnostics the evaluation reads (:meth:`WeightEdit.diagnostics`) and saves itself as a ``.safetensors`` file with
a ``.json`` beside it, each checked against the other when read back (:func:`read_edit_files`).

Editors report their stages through ``progress``: a callable receiving one event dict per stage or step, True
for a line per event on stderr, or None for silence (:func:`notify`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..core import moe, paths
from ..core.progress import emit
from ..core.results import Result
from .matrices import kept_matrices, restore_matrices

# What an edit tells the evaluation about its making (WeightEdit.diagnostics; read by eval.report.diagnose).
DIAGNOSTICS = ("opt_p_final", "delta_norm", "clamp", "key_norm", "key_dot", "key_match", "relative_update",
               "loss_rise")


@dataclass(repr=False)
class WeightEdit(Result):
    """What every edit of one layer's down projection keeps: norms, timings and losses of its making, and while
    applied, the model (weakly) and the matrix before and after, so ``revert()`` restores it bit for bit.
    Keyword-only, so subclasses list their own fields (``layer`` among them) first. Subclasses implement
    :meth:`updated_matrix`; a ``fingerprint`` field, when present and set, must match the model's."""
    norms: dict = field(default_factory=dict, kw_only=True)
    timings: dict = field(default_factory=dict, kw_only=True)
    losses: list = field(default_factory=list, kw_only=True)
    _model: object = field(default=None, compare=False, kw_only=True)
    _original: torch.Tensor | None = field(default=None, compare=False, kw_only=True)
    _edited: torch.Tensor | None = field(default=None, compare=False, kw_only=True)

    @property
    def applied(self) -> bool:
        return self.applied_model is not None

    @property
    def applied_model(self):
        """The model this edit is written into right now, or None."""
        return self._model() if self._model is not None else None

    def updated_matrix(self, model, layer: int, matrix: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        """The edited down projection [d_model, d_mlp] (CPU, ``matrix``'s dtype) given the current one."""
        raise NotImplementedError(f"{type(self).__name__} must implement updated_matrix()")

    def apply(self, model, progress=None) -> "WeightEdit":
        """Write the edit into ``model`` (which must have the fingerprint the edit was made on, when recorded)."""
        if self.applied:
            where = "this model" if self.applied_model is model else "another model"
            raise ValueError(f"this edit is already applied to {where}; revert() it first")
        fingerprint = getattr(self, "fingerprint", None)
        if fingerprint and model.fingerprint != fingerprint:
            raise ValueError(f"edit was made on a model with fingerprint {fingerprint}, this model has "
                             f"{model.fingerprint} ({model.source}); refusing to apply it")
        layer = model.check_layer(self.layer)
        write_matrix(self, model, layer, self.updated_matrix(model, layer, model.mlp_out_matrix(layer)), progress)
        return self

    def diagnostics(self, index: int | None = None) -> dict:
        """What the failure diagnosis reads (:data:`DIAGNOSTICS`): the optimisation's final target probability
        ``opt_p_final``, the optimised change and its bound (``delta_norm``, ``clamp``), the key (``key_norm``,
        ``key_dot``, ``key_match``), ``relative_update`` |dW| / |W| and the guard's ``loss_rise``; NaN for what an
        editor does not report. ``index``: the fact's position in an edit of several facts."""
        return dict.fromkeys(DIAGNOSTICS, float("nan"))

    def revert(self) -> None:
        """Restore the edited weight bit for bit. Edits on the same layer must be reverted in reverse order."""
        model = self.applied_model
        if model is None:
            raise ValueError("this edit is not applied to any model; nothing to revert")
        matrix = model.mlp_out_matrix(self.layer)
        if not torch.equal(matrix.detach().cpu(), self._edited):
            raise ValueError(f"layer {self.layer}'s weights changed since this edit was applied (a later edit of "
                             "the same layer?); revert the later edit first")
        restore_matrices(model, {self.layer: self._original})
        self._model = self._original = self._edited = None


def check_dense_mlps(model, editor: str, why: str) -> None:
    """An editor that writes one down projection per layer needs MLPs, and dense ones: a routed mixture of
    experts sends a fact's key to a different down projection (or several) token by token. ``why``: what no
    longer works in this editor's words."""
    if model.d_mlp is None:
        raise ValueError(f"model {model.source} has no MLP layers to edit")
    if moe.is_moe(model):
        raise ValueError(f"{editor} does not apply to {model.source}: its MLPs are routed mixtures of "
                         f"{moe.n_experts(model)} experts, so a fact's key reaches a different down projection "
                         f"(or several) token by token and {why}")


def write_matrix(edit, model, layer: int, new: torch.Tensor, progress=None) -> None:
    """Copy ``new`` into ``layer``'s down projection and record on ``edit`` what revert needs. Any exception (or
    KeyboardInterrupt) before this returns puts the original weights back."""
    with kept_matrices(model, [layer]) as originals:
        matrix = model.mlp_out_matrix(layer)
        with torch.no_grad():
            matrix.copy_(new.to(matrix.device))
        if not torch.isfinite(matrix).all():
            raise FloatingPointError(f"the edit produced non-finite weights at layer {layer}")
        notify(progress, stage="update", layer=layer)
        edit._model, edit._original, edit._edited = weakref.ref(model), originals[layer], new.detach().cpu().clone()


def model_edited(model, edit):
    """``with model_edited(model, edit): ...`` — the edit is applied inside the block (if it is not already
    applied to ``model``) and reverted on exit, whatever happens inside. Same as ``model.edited(edit)``."""
    return model.edited(edit)


def with_and_without(model, edit_obj, measure):
    """``(measure() with the edit applied, measure() without it)``; the edit ends in the state it started in
    (applied to ``model`` or not). Works with any edit that has ``apply(model)`` and ``revert()``."""
    was_applied = getattr(edit_obj, "applied_model", None) is model
    with model.edited(edit_obj):
        after = measure()
    try:
        before = measure()
    finally:
        if was_applied:
            edit_obj.apply(model)
    return after, before


@contextlib.contextmanager
def frozen_params(model):
    """No parameter requires grad inside (a backward then computes only the gradient of the editor's own
    variables), restored on exit whatever happens."""
    params = list(model.module.parameters())
    if model.hf_model is not None:
        params += list(model.hf_model.parameters())
    flags = [(p, p.requires_grad) for p in {id(p): p for p in params}.values()]
    try:
        for p, _ in flags:
            p.requires_grad_(False)
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def notify(progress, **event) -> None:
    """Report one stage or step of an editor (see the module docstring for what ``progress`` may be)."""
    if progress is None or progress is False:
        return
    if progress is True:
        emit("  " + " ".join(f"{k}={_short(v)}" for k, v in event.items()))
    else:
        progress(event)


def _short(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return f"[{len(v)} items]"
    return str(v)


# ---------------------------------------------------------------------------------------------- the down projection
def mlp_out_bias(model, layer: int) -> torch.Tensor:
    """The down projection's bias [d_model] as float64 (zeros when it has none)."""
    b = getattr(model.mlp_out_module(layer), "bias", None)
    return torch.zeros(model.d_model, dtype=torch.float64) if b is None else b.detach().to("cpu", torch.float64)


def mlp_out_apply(model, layer: int, hidden: torch.Tensor) -> torch.Tensor:
    """What the down projection outputs for hidden vectors [..., d_mlp], in float64: ``h @ M.T + b``."""
    m = model.mlp_out_matrix(layer).detach().to("cpu", torch.float64)
    return hidden.to("cpu", torch.float64) @ m.T + mlp_out_bias(model, layer)


# ============================================================================================ edit files
def edit_file_paths(path) -> tuple[Path, Path]:
    """``(<path>.safetensors, <path>.json)``; ``path`` may name either file or their common stem."""
    p = Path(path)
    if p.suffix in (".safetensors", ".json"):
        p = p.with_suffix("")
    return p.with_name(p.name + ".safetensors"), p.with_name(p.name + ".json")


def _fields_digest(fields: dict) -> str:
    """sha256 of ``fields`` as JSON (keys sorted, after a JSON round trip: what the .json file holds)."""
    canonical = json.dumps(json.loads(json.dumps(fields)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def write_edit_files(path, tensors: dict, fmt: str, fields: dict) -> Path:
    """Write ``tensors`` to ``<path>.safetensors`` (its header holding the format and the sha256 of ``fields``) and
    ``fields`` (plus the format and the tensor file's sha256) to ``<path>.json``; returns the .safetensors path.
    Each file vouches for the other, so a change to either is found when they are read back."""
    from safetensors.torch import save_file

    tensors_path, meta_path = edit_file_paths(path)
    tensors_path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tensors_path),
              metadata={"format": fmt, "fields_sha256": _fields_digest(fields)})
    meta = {"format": fmt, "tensors": tensors_path.name, "sha256": paths.file_sha256(tensors_path), **fields}
    meta_path.write_text(json.dumps(meta, indent=1))
    return tensors_path


FILE_KEYS = ("format", "tensors", "sha256")  # what write_edit_files adds to an edit's own fields


def read_edit_files(path, fmt: str, what: str, build=None):
    """``(metadata, tensors)`` of files written by :func:`write_edit_files` in format ``fmt`` — or, with ``build``,
    ``build(metadata, tensors)``. Refused with an error naming the file: a missing file, a .json that is not
    UTF-8 JSON, another format, a tensor file whose sha256 differs from the one the .json records, a .json whose
    fields differ from the ones the tensor file's header vouches for, and a .json ``build`` cannot read."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    tensors_path, meta_path = edit_file_paths(path)
    for p in (meta_path, tensors_path):
        if not p.is_file():
            raise FileNotFoundError(f"saved {what} file {str(p)!r} does not exist (an edit is a .safetensors file "
                                    "plus a .json file of the same name)")
    try:
        meta = json.loads(meta_path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"edit metadata {str(meta_path)!r} is damaged: not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"edit metadata {str(meta_path)!r} is damaged: not valid JSON ({e.msg}, line {e.lineno})"
                         ) from None
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise ValueError(f"{str(meta_path)!r} is not an interp {what} (format {found!r}; allowed: {fmt!r})")
    digest = paths.file_sha256(tensors_path)
    if digest != meta.get("sha256"):
        raise ValueError(f"edit tensors {str(tensors_path)!r} were altered: sha256 {digest[:16]}... does not match "
                         f"{str(meta.get('sha256'))[:16]}... recorded in {meta_path.name}; refusing to load")
    with safe_open(str(tensors_path), framework="pt") as f:
        vouched = (f.metadata() or {}).get("fields_sha256")
    if vouched != _fields_digest({k: v for k, v in meta.items() if k not in FILE_KEYS}):
        raise ValueError(f"edit metadata {str(meta_path)!r} was altered: its fields differ from the ones "
                         f"{tensors_path.name} was saved with; refusing to load")
    tensors = load_file(str(tensors_path))
    if build is None:
        return meta, tensors
    try:
        return build(meta, tensors)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"edit files {str(meta_path)!r} / {tensors_path.name} do not hold a whole {what} "
                         f"({type(e).__name__}: {e})") from None
