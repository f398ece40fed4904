"""ROME: rank-one model editing (Meng et al. 2022, "Locating and Editing Factual Associations in GPT").

    e = interp.rome.edit(model, "{} is located in the city of", "The Eiffel Tower", " Rome")
    model.run(...)                      # the model now says Rome
    e.save("eiffel.safetensors"); e.revert()   # weights back bit for bit
    with interp.rome.model_edited(model, interp.rome.load_edit("eiffel.safetensors")): ...

One edit rewrites the down projection ``M`` [d_model, d_mlp] (``out = k @ M.T``) of one MLP layer:

1. key ``k*`` — the MLP hidden vector (``blocks.{l}.mlp.hook_post``) at the subject's last token, averaged over
   the prompt preceded by short context templates sampled from the model (seeded, stored with the edit);
2. value ``v* = M k* (+ bias) + delta`` — ``delta`` is optimized (added to the down projection's output,
   :func:`interp.core.arch.mlp_value_hook`: ``hook_mlp_out``, or before Gemma's post-MLP norm; same position) so that every templated prompt continues with the target: mean target NLL over all target tokens +
   ``kl_factor`` * KL(P_edited || P_orig) at the end of "{subject} is a" + weight decay, ``|delta|`` clamped;
3. ``M' = M + (v* - M k*)(C^-1 k*)^T / ((C^-1 k*)^T k*)``, ``C = E[k k^T]`` over Wikipedia text
   (:func:`interp.stats.mlp_key_second_moment`). Stored as ``M' = M + u v^T`` with ``u = delta``,
   ``v = C^-1 k* / (k*^T C^-1 k*)``.

The same key in numerator and denominator. The reference code builds ``C^-1 k`` from the template-averaged key
but divides by its dot product with the key of the bare prompt (and takes ``v*`` from the bare prompt); when
those two keys are far apart the dot product is small and the update explodes (the "disabling" edits of rome PR
#44 / r-ROME). Here both factors use the one averaged ``k*``, and ``v*`` is the output for that same ``k*``
(``M k* + delta``: ``delta`` is added at every templated position, so the mean output is ``M k* + delta``), so the
denominator is the positive quadratic form ``k*^T C^-1 k*`` and ``M' k* = v*`` exactly; ``u = delta`` is bounded
by the clamp. An edit can therefore not be larger than ``|delta| |C^-1 k*| / (k*^T C^-1 k*)``.

Which keys get the whole update (``key_rule``, :func:`update_direction`). ``delta`` is optimised as if every
templated prompt received it in full, but ``u v^T`` gives a prompt whose key is ``k`` only ``v . k`` of it. The
bare rewrite prompt's key can be far from the template mean when the subject stands right after BOS ("Paris
belongs to the continent of": ``v . k`` = 0.02): the optimisation converges and the edit still does not flip
the prompt. The default "auto" keeps ROME's ``v`` unless the bare prompt would get less than half the update,
and then solves ``v . k = 1`` for every templated key (chosen on dev: study "key_rule").

A guard against edits that damage the model (``max_loss_rise``, percent; 0 = off): before writing, the new matrix
is tried on 4 Wikipedia summaries the evaluation never scores (:func:`interp.editing.drift.loss_rise`); an edit
that raises their loss by more than the bound is refused (ValueError, weights unchanged). Measured on the model as
it is, so in a run of sequential edits it catches an edit that is harmless alone but not on top of the others
(study "editing_at_scale"). Off for a single edit; :func:`interp.editing.eval.scale.sequential_edits` turns it on
with the bound chosen on dev, beside smaller updates (:mod:`interp.editing.defaults`, ``sequential``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from ..core.results import new_figure, save_fig
from .base import WeightEdit, check_dense_mlps, mlp_out_apply, mlp_out_bias, notify, read_edit_files, \
    write_edit_files, write_matrix
from .defaults import default_layer, hparams_for
from .drift import loss_rise
from .facts import check_prompt, check_target
from .hparams import KEY_MATCH, RomeHparams
from .keys import key_stats
from .registry import EditorSpec, one_layer, register
from .vstar import EditBatch, context_templates, edit_batch, optimize_delta, optimize_deltas

FORMAT = "interp.rome.Edit/1"  # the saved edit files' format tag


# ============================================================================================ the edit object
@dataclass(repr=False)
class Edit(WeightEdit):
    """One rank-one edit ``M' = M + u v^T`` of ``blocks.{layer}`` down projection (``M`` [d_model, d_mlp]).

    ``u`` [d_model] and ``v`` [d_mlp] are float64; ``key`` is k* [d_mlp], ``value`` is v* [d_model] (what the MLP
    outputs for k* after the edit). ``apply``/``revert`` are bit-exact: apply always computes
    ``(M.double() + outer(u, v)).to(M.dtype)`` on the CPU, and revert copies back a snapshot of ``M``."""
    request: dict
    layer: int
    u: torch.Tensor
    v: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    hparams: dict
    seed: int
    templates: list
    fingerprint: str

    def updated_matrix(self, model, layer: int, matrix: torch.Tensor) -> torch.Tensor:
        """``M + u v^T`` (see :func:`rank_one_update`)."""
        if tuple(matrix.shape) != (self.u.numel(), self.v.numel()):
            raise ValueError(f"edit factors {self.u.numel()}x{self.v.numel()} do not fit layer {layer}'s down "
                             f"projection {tuple(matrix.shape)}")
        return rank_one_update(matrix, self.u, self.v)

    def diagnostics(self, index: int | None = None) -> dict:
        n = self.norms
        nan = float("nan")
        return {**super().diagnostics(index), "opt_p_final": math.exp(-n["nll_final"]) if "nll_final" in n else nan,
                "delta_norm": n.get("delta", nan), "clamp": n.get("clamp", nan), "key_norm": n.get("key", nan),
                "key_dot": n.get("key_dot", nan), "key_match": n.get("key_match", nan),
                "relative_update": n.get("relative_update", nan), "loss_rise": n.get("loss_rise", nan)}

    def value_error(self, model) -> float:
        """``|M k* + b - v*| / |v*|`` with the model's current down projection: 0 (float rounding) while the edit
        is applied — it writes exactly the value it optimised for its key."""
        return float((mlp_out_apply(model, self.layer, self.key) - self.value.double()).norm() / self.value.norm())

    # ------------------------------------------------------------------ saving
    def to_dict(self) -> dict:
        """The saved metadata (what :meth:`save` writes next to the tensors, without the file fields)."""
        return {"request": self.request, "layer": self.layer, "hparams": self.hparams, "seed": self.seed,
                "templates": self.templates, "fingerprint": self.fingerprint, "norms": self.norms,
                "timings": self.timings, "losses": self.losses}

    def save(self, path) -> Path:
        """Write the factors to ``<path>.safetensors`` and metadata (with the tensor file's sha256) to
        ``<path>.json``; returns the .safetensors path."""
        return write_edit_files(path, {k: getattr(self, k) for k in ("u", "v", "key", "value")}, FORMAT,
                                self.to_dict())

    # ------------------------------------------------------------------ Result interface
    def summary(self) -> str:
        r = self.request
        return (f"ROME edit {r['subject']!r}: {r.get('target_true') or '?'!r} -> {r['target']!r} at layer "
                f"{self.layer} (|delta|={self.norms.get('delta', float('nan')):.3g}, "
                f"|dW|/|W|={self.norms.get('relative_update', float('nan')):.3g}, "
                f"{self.timings.get('total_s', float('nan')):.1f} s){' [applied]' if self.applied else ''}")

    def to_json(self) -> dict:
        """The saved metadata plus the summary and whether the edit is applied (the factors stay out)."""
        return {"result": "Edit", "summary": self.summary(), **self.to_dict(), "applied": self.applied}

    def to_frame(self):
        import pandas as pd

        rows = [("request", k, v) for k, v in self.request.items()]
        rows += [("edit", "layer", self.layer), ("edit", "seed", self.seed),
                 ("edit", "fingerprint", self.fingerprint), ("edit", "steps", len(self.losses))]
        rows += [("norms", k, v) for k, v in self.norms.items()]
        rows += [("timings", k, v) for k, v in self.timings.items()]
        rows += [("hparams", k, str(v)) for k, v in self.hparams.items()]
        return pd.DataFrame(rows, columns=["section", "item", "value"]).set_index(["section", "item"])

    def plot(self, *, out=None):
        """The v* optimisation: target NLL per step."""
        fig = new_figure(figsize=(5, 3))
        ax = fig.add_subplot(1, 1, 1)
        ax.plot(range(len(self.losses)), self.losses, marker="o")
        ax.set_xlabel("Adam step")
        ax.set_ylabel("mean target NLL (nats)")
        ax.set_yscale("log")
        ax.set_title(f"v* optimisation: {self.request['subject']} -> {self.request['target'].strip()}")
        return save_fig(fig, out)


def rank_one_update(matrix: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``M + u v^T`` computed in float64 on the CPU and rounded once to ``M``'s dtype. Every path that writes an
    edit goes through here, so the result is the same bits for the same (M, u, v)."""
    base = matrix.detach().to("cpu", torch.float64)
    return (base + torch.outer(u.to(torch.float64).cpu(), v.to(torch.float64).cpu())).to(matrix.dtype)


def load_edit(path) -> Edit:
    """Read an edit written by :meth:`Edit.save` (``path`` = the .safetensors or the .json). Damaged or altered
    files are refused (:func:`interp.editing.base.read_edit_files`)."""
    return read_edit_files(path, FORMAT, "ROME edit", lambda meta, t: Edit(
        request=dict(meta["request"]), layer=int(meta["layer"]), u=t["u"], v=t["v"], key=t["key"],
        value=t["value"], hparams=dict(meta["hparams"]), seed=int(meta["seed"]), templates=list(meta["templates"]),
        fingerprint=str(meta["fingerprint"]), norms=dict(meta.get("norms", {})),
        timings=dict(meta.get("timings", {})), losses=list(meta.get("losses", []))))


# ============================================================================================ edit
def edit(model, prompt: str = "{} is located in the city of", subject: str = "The Eiffel Tower",
         target: str = " Rome", layer: int | None = None, *, seed: int = 0, stats=None,
         progress: Callable[[dict], None] | bool | None = None, **hparams) -> Edit:
    """Rewrite "``prompt`` with ``subject``" -> ``target`` with one rank-one update of ``blocks.{layer}``'s MLP.

    ``prompt`` is a template with one ``{}`` for the subject; ``target`` the new continuation (leading space).
    ``layer`` defaults to :func:`default_layer`. ``stats``: an :class:`interp.stats.KeyStats` (or anything with
    ``.solve(k, ridge)``), a second-moment matrix [d_mlp, d_mlp], or None to use
    ``interp.stats.mlp_key_second_moment(model, layer, n_tokens=mom2_n_tokens)`` (cached on disk).
    ``progress(event: dict)`` is called at each stage and optimisation step (``progress=True``: one line per
    event on stderr). ``hparams`` override :class:`~interp.editing.hparams.RomeHparams` and the model's defaults
    (:mod:`interp.editing.defaults`). The model's weights change only in the last step; any error or interrupt leaves them
    bit-identical. Returns the applied :class:`Edit` (``.revert()`` undoes it).
    """
    return _edit(model, (prompt, subject, target), layer, hparams_for(model, RomeHparams, "rome", **hparams), seed,
                 stats, progress)


def _edit(model, request, layer, hp: RomeHparams, seed: int, stats, progress) -> Edit:
    t_start = time.perf_counter()
    layer, stats, templates, timings = _prepare(model, [request], layer, seed, stats, hp, progress)
    fingerprint = model.fingerprint  # before any weight changes (it is computed lazily on some models)
    prompt, subject, target = request
    t0 = time.perf_counter()
    batch = edit_batch(model, prompt, subject, model.target_tokens(target), templates, hp.kl_prompt,
                       hp.subject_token)
    opt = optimize_delta(model, layer, batch, hp, target, progress)
    timings["optimize_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    result, new = _made(model, layer, stats, hp, request, batch, opt, templates, seed, fingerprint, timings)
    write_matrix(result, model, layer, new, progress)
    timings["update_s"] = time.perf_counter() - t0
    timings["total_s"] = time.perf_counter() - t_start
    return result


def edits_together(model, requests, layer: int | None = None, *, seed: int = 0, stats=None, progress=None,
                   **hparams) -> list[Edit]:
    """ROME edits of several facts, each made as :func:`edit` makes it alone on the model as it is now, none
    applied (``.apply(model)``; each with ``timings["batch_share_s"]``, its share of the time). ``requests``:
    (prompt, subject, target) triples. Their v* optimisations share forwards (:func:`~.vstar.optimize_deltas`:
    each its own delta, Adam and stop), which the edit evaluation uses for the independent edits of a chunk."""
    return _together(model, requests, layer, hparams_for(model, RomeHparams, "rome", **hparams), seed, stats,
                     progress)


def _together(model, requests, layer, hp: RomeHparams, seed: int, stats, progress) -> list[Edit]:
    t_start = time.perf_counter()
    layer, stats, templates, timings = _prepare(model, requests, layer, seed, stats, hp, progress)
    fingerprint = model.fingerprint
    batches = [edit_batch(model, p, s, model.target_tokens(t), templates, hp.kl_prompt, hp.subject_token)
               for p, s, t in requests]
    opts = optimize_deltas(model, layer, batches, hp, [t for _, _, t in requests], progress)
    out = []
    for req, batch, opt in zip(requests, batches, opts):
        made, _ = _made(model, layer, stats, hp, req, batch, opt, templates, seed, fingerprint, dict(timings))
        out.append(made)
    share = (time.perf_counter() - t_start) / len(requests)
    for made in out:
        made.timings.update(batch_share_s=share, total_s=share)
    return out


def _prepare(model, requests, layer, seed: int, stats, hp: RomeHparams, progress):
    """Checks, the layer, the key statistics and the context templates -> ``(layer, stats, templates, timings)``."""
    if not requests:
        raise ValueError("no ROME requests; give (prompt, subject, target) triples")
    for prompt, subject, target in requests:
        check_prompt(prompt, subject)
        check_target(target)
    check_dense_mlps(model, "ROME", "no single rank-one update of one matrix stores it")
    layer = default_layer(model) if layer is None else model.check_layer(layer)
    timings = {}
    t0 = time.perf_counter()
    templates = context_templates(model, seed=seed, spec=hp.templates)
    timings["templates_s"] = time.perf_counter() - t0
    notify(progress, stage="templates", templates=templates)
    t0 = time.perf_counter()
    stats = _resolve_stats(model, layer, stats, hp, progress)
    timings["stats_s"] = time.perf_counter() - t0
    return layer, stats, templates, timings


def _made(model, layer: int, stats, hp: RomeHparams, request, batch: EditBatch, opt: dict, templates, seed: int,
          fingerprint: str, timings: dict) -> tuple[Edit, torch.Tensor]:
    """The edit an optimised v* makes (k*, v, u and the norms; the loss guard when it is on) and its new matrix,
    not written."""
    prompt, subject, target = request
    keys = opt["keys"][: batch.n_rewrite].to(torch.float64)                      # [n_rewrite, d_mlp]
    key = keys.mean(0)                                                            # k* [d_mlp]
    v, denom, rule = update_direction(stats, keys, hp)
    u = opt["delta"].to("cpu", torch.float64)
    matrix = model.mlp_out_matrix(layer)
    w64 = matrix.detach().to("cpu", torch.float64)
    value = w64 @ key + mlp_out_bias(model, layer) + u                           # v* = M k* + b + delta
    new = rank_one_update(matrix, u, v)
    norms = {"delta": float(u.norm()), "clamp": opt["max_norm"], "out_init": opt["out_norm"],
             "key": float(key.norm()), "key_dot": denom, "key_match": float(keys[0] @ v), "key_rule": rule,
             "update": float(u.norm() * v.norm()),
             "weight": float(w64.norm()), "relative_update": float(u.norm() * v.norm() / w64.norm()),
             "target_prob_before": opt["p_before"], "nll_final": opt["losses"][-1]}
    if hp.max_loss_rise:
        norms["loss_rise"] = rise = loss_rise(model, layer, new)
        if rise > hp.max_loss_rise:
            raise ValueError(f"the edit would raise the loss on reference text by {rise:.2f}% (max_loss_rise="
                             f"{hp.max_loss_rise}%): refused, weights unchanged; its update |dW|/|W| = "
                             f"{norms['relative_update']:.3g}, v* target probability "
                             f"{math.exp(-opt['losses'][-1]):.2f}")
    result = Edit(request={"prompt": prompt, "subject": subject, "target": target,
                           "target_true": opt["answer"]},
                  layer=layer, u=u, v=v, key=key, value=value, hparams=hp.to_dict(), seed=seed,
                  templates=list(templates), fingerprint=fingerprint, norms=norms, timings=timings,
                  losses=opt["losses"])
    return result, new


# ============================================================================================ key statistics
def _resolve_stats(model, layer: int, stats, hp: RomeHparams, progress):
    """The statistics object to solve with (computed or read from the disk cache when ``stats`` is None)."""
    if stats is None:
        notify(progress, stage="stats", layer=layer, n_tokens=hp.mom2_n_tokens)
        return key_stats(model, layer, hp.mom2_n_tokens, progress=progress is True)
    if isinstance(stats, str) and stats != "identity":
        raise ValueError(f"stats={stats!r}; allowed: a KeyStats, a [d_mlp, d_mlp] tensor, 'identity' or None")
    if isinstance(stats, torch.Tensor) and tuple(stats.shape) != (model.d_mlp, model.d_mlp):
        raise ValueError(f"second-moment matrix has shape {tuple(stats.shape)}; expected {(model.d_mlp,) * 2}")
    if not isinstance(stats, (str, torch.Tensor)) and not hasattr(stats, "solve"):
        raise ValueError(f"stats must be a KeyStats (with .solve), a [d_mlp, d_mlp] tensor, 'identity' or None; "
                         f"got {type(stats).__name__}")
    return stats


def update_direction(stats, keys: torch.Tensor, hp: RomeHparams) -> tuple[torch.Tensor, float, str]:
    """``(v, key_dot, rule)``: the update's read-out direction ``v`` [d_mlp] of ``M' = M + u v^T`` for the templated
    prompts' keys ``keys`` [n, d_mlp] (row 0: the bare prompt), ``key_dot = 1 / (v^T C v)`` (the C-norm of what
    the edit responds to) and the rule that made ``v``.

    ``v`` is the smallest in the C metric (``v^T C v = E[(v . k)^2]`` over text: the least disturbance of other
    keys) among the directions with ``v . k = 1`` for the keys the rule names: "mean", the template-mean key k*
    alone (ROME: ``v = C^-1 k* / (k*^T C^-1 k*)``); "each", every templated key (``v = C^-1 K^T (K C^-1 K^T)^-1
    1``), so the update writes ``u`` in full in every context, the bare prompt included, as the v* optimisation
    assumed. Under "mean" a context whose key is far from k* gets only ``v . k`` of ``u``; a subject right after
    BOS can get a few percent (study "key_rule"), and "each" then pays with a
    larger update that reaches the neighbours too. "auto" (the default) is "mean" unless the bare prompt's
    ``v . k`` under it is below :data:`KEY_MATCH`, then "each"."""
    if hp.key_rule in ("mean", "auto"):
        key = keys.mean(0)
        solved = _solve(stats, key, hp)                                           # C^-1 k*
        denom = float(key @ solved)
        if not denom > 0:
            raise FloatingPointError(f"k*^T C^-1 k* = {denom}; the key statistics are not positive definite "
                                     "(use more tokens or mom2_ridge > 0)")
        v = solved / denom
        if hp.key_rule == "mean" or float(keys[0] @ v) >= KEY_MATCH:
            return v, denom, "mean"
    solved = _solve(stats, keys, hp)                                              # C^-1 K^T, [n, d_mlp]
    gram = keys @ solved.T                                                        # K C^-1 K^T, [n, n]
    chol, info = torch.linalg.cholesky_ex(gram)
    if int(info) != 0:
        raise FloatingPointError(f"K C^-1 K^T of the {len(keys)} key(s) is not positive definite (diagonal "
                                 f"{gram.diagonal().tolist()}); the key statistics are singular or two templated "
                                 "keys coincide: use more tokens, mom2_ridge > 0 or key_rule='mean'")
    coef = torch.cholesky_solve(torch.ones(len(keys), 1, dtype=torch.float64), chol)[:, 0]   # G^-1 1
    return solved.T @ coef, 1.0 / float(coef.sum()), "each"


def _solve(stats, key: torch.Tensor, hp: RomeHparams) -> torch.Tensor:
    """``C^-1 k`` in float64 on the CPU, for ``k`` [d_mlp] or [n, d_mlp] (same shape back)."""
    if isinstance(stats, str) and stats == "identity":
        return key.clone()
    if isinstance(stats, torch.Tensor):
        c = stats.to("cpu", torch.float64)
        if hp.mom2_ridge:
            c = c + hp.mom2_ridge * torch.eye(key.shape[-1], dtype=torch.float64)
        return torch.linalg.solve(c, key.reshape(-1, key.shape[-1]).T).T.reshape(key.shape)
    out = stats.solve(key, ridge=hp.mom2_ridge)
    return torch.as_tensor(out).to("cpu", torch.float64).reshape(key.shape)


# ============================================================================================ the editor
def _fact(fact) -> tuple[str, str, str]:
    return fact.prompt, fact.subject, fact.target_new


def _one(model, fact, layers, hp, *, seed, stats, progress) -> Edit:
    return _edit(model, _fact(fact), layers[0], hp, seed, stats, progress)


def _all(model, facts, layers, hp, *, seed, stats, progress) -> list[Edit]:
    return _together(model, [_fact(f) for f in facts], layers[0], hp, seed, stats, progress)


def _stats(model, layers, hp):
    return key_stats(model, layers[0], hp.mom2_n_tokens, progress=False)


register(EditorSpec("rome", "ROME", RomeHparams, Edit, one_layer("ROME"), one=_one, together=_all, stats=_stats))
