"""FT-L: constrained fine-tuning of one MLP down projection, the ROME paper's baseline editor.

    e = interp.rome.ft_edit(model, "{} is located in the city of", "The Eiffel Tower", " Rome")
    e.revert(); with model.edited(e): ...     # an FTEdit re-applies its stored update bit for bit
    e.save("ft.safetensors"); interp.rome.load_ft_edit("ft.safetensors")
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.generation import selected_logits
from ..core.inputs import pad_rows
from ..core.results import new_figure, save_fig
from .base import WeightEdit, frozen_params, notify, read_edit_files, write_edit_files, write_matrix
from .defaults import default_layer, hparams_for
from .facts import check_prompt, check_target
from .hparams import FTHparams
from .registry import EditorSpec, one_layer, register

FORMAT = "interp.rome.FTEdit/1"  # the saved edit files' format tag


@dataclass(repr=False)
class FTEdit(WeightEdit):
    """Constrained fine-tuning of one down projection (FT-L / FT+L of the ROME paper): ``M' = M + D`` with every
    entry of ``D`` in [-norm_constraint, norm_constraint] (an L-infinity ball). ``update`` is ``D`` [d_model,
    d_mlp] (CPU, the weight's dtype), so a reverted edit can be applied again; ``revert()`` is bit-exact."""
    request: dict
    layer: int
    hparams: dict
    update: torch.Tensor | None = None
    fingerprint: str = ""

    def updated_matrix(self, model, layer: int, matrix: torch.Tensor) -> torch.Tensor:
        """``M + D``, added on the weight's device (as when the edit was made) and rounded to its dtype."""
        if self.update is None:
            raise ValueError("this FT-L edit holds no update to apply")
        if tuple(self.update.shape) != tuple(matrix.shape):
            raise ValueError(f"update {tuple(self.update.shape)} does not fit layer {layer}'s down projection "
                             f"{tuple(matrix.shape)}")
        return (matrix.detach() + self.update.to(matrix.device)).to(matrix.dtype).cpu()

    def diagnostics(self, index: int | None = None) -> dict:
        nan = float("nan")
        return {**super().diagnostics(index),
                "opt_p_final": math.exp(-self.losses[-1]) if self.losses else nan,
                "delta_norm": self.norms.get("max_abs", nan), "clamp": self.hparams.get("norm_constraint", nan),
                "relative_update": self.norms.get("relative_update", nan)}

    def to_dict(self) -> dict:
        """The saved metadata (what :meth:`save` writes next to the update, without the file fields)."""
        return {"request": self.request, "layer": self.layer, "hparams": self.hparams,
                "fingerprint": self.fingerprint, "norms": self.norms, "timings": self.timings, "losses": self.losses}

    def save(self, path) -> Path:
        """Write the update ``D`` to ``<path>.safetensors`` and the metadata to ``<path>.json``."""
        if self.update is None:
            raise ValueError("this FT-L edit holds no update to save")
        return write_edit_files(path, {"update": self.update}, FORMAT, self.to_dict())

    def to_json(self) -> dict:
        return {"result": "FTEdit", "summary": self.summary(), **self.to_dict(), "applied": self.applied}

    def summary(self) -> str:
        return (f"FT-L edit {self.request['subject']!r} -> {self.request['target']!r} at layer {self.layer} "
                f"(|D|_F={self.norms.get('update', float('nan')):.3g}, {len(self.losses)} steps)")

    def to_frame(self):
        import pandas as pd

        rows = [("request", k, v) for k, v in self.request.items()] + [("edit", "layer", self.layer)]
        rows += [(s, k, v) for s, d in (("norms", self.norms), ("timings", self.timings),
                                        ("hparams", self.hparams)) for k, v in d.items()]
        return pd.DataFrame(rows, columns=["section", "item", "value"]).set_index(["section", "item"])

    def plot(self, *, out=None):
        fig = new_figure(figsize=(5, 3))
        ax = fig.add_subplot(1, 1, 1)
        ax.plot(self.losses, marker="o")
        ax.set(xlabel="Adam step", ylabel="target NLL", title="FT-L optimisation")
        return save_fig(fig, out)


def load_ft_edit(path) -> FTEdit:
    """Read an edit written by :meth:`FTEdit.save`; damaged or altered files are refused."""
    return read_edit_files(path, FORMAT, "FT-L edit", lambda meta, t: FTEdit(
        request=dict(meta["request"]), layer=int(meta["layer"]), hparams=dict(meta["hparams"]), update=t["update"],
        fingerprint=str(meta["fingerprint"]), norms=dict(meta.get("norms", {})),
        timings=dict(meta.get("timings", {})), losses=list(meta.get("losses", []))))


def ft_edit(model, prompt: str, subject: str, target: str, layer: int | None = None, *, seed: int = 0,
            progress=None, **hparams) -> FTEdit:
    """FT-L: Adam on a dense update ``D`` of ``blocks.{layer}``'s down projection to lower the target NLL on the
    rewrite prompt, clamping every entry of ``D`` to [-norm_constraint, norm_constraint] after each step (the
    paper's constrained fine-tuning, same layer as ROME). ``D`` is applied through a hook while optimizing and
    written into the weight once at the end (an interrupt leaves the weights unchanged). ``hparams`` override
    :class:`~interp.editing.hparams.FTHparams`."""
    return _one(model, (prompt, subject, target), layer, hparams_for(model, FTHparams, "ft", **hparams), progress)


def _one(model, request, layer, hp: FTHparams, progress) -> FTEdit:
    t0 = time.perf_counter()
    (result,) = _edits(model, [request], layer, hp, progress)
    write_matrix(result, model, result.layer, result.updated_matrix(model, result.layer,
                                                                    model.mlp_out_matrix(result.layer)), progress)
    result.timings["total_s"] = time.perf_counter() - t0
    return result


def ft_edits(model, requests, layer: int | None = None, *, seed: int = 0, progress=None,
             **hparams) -> list[FTEdit]:
    """FT-L of several facts at once, each optimised as :func:`ft_edit` optimises it alone and none written.

    ``requests``: (prompt, subject, target) triples. Fact ``i`` has its own update ``D_i``, its own Adam and its own
    stop (its loss below ``loss_stop``); its row sees only ``D_i`` (rows are right-padded and causal), so the sum of
    the losses has the gradient of each fact's own loss with respect to its ``D_i``: the rows only share forwards,
    which a one-row FT-L step spends on reading every weight. Returns the edits unapplied (``.apply(model)``), each
    with ``timings["batch_share_s"]``, its share of the batch's time. ``seed`` is accepted for the editors' common
    signature (FT-L draws nothing at random)."""
    return _edits(model, requests, layer, hparams_for(model, FTHparams, "ft", **hparams), progress)


def _edits(model, requests, layer, hp: FTHparams, progress) -> list[FTEdit]:
    t0 = time.perf_counter()
    if not requests:
        raise ValueError("no FT-L requests; give (prompt, subject, target) triples")
    for prompt, subject, target in requests:
        check_prompt(prompt, subject)
        check_target(target)
    layer = default_layer(model) if layer is None else model.check_layer(layer)
    fingerprint = model.fingerprint  # before the weights change (computed lazily on some models)
    rows, starts, targets = [], [], []
    for prompt, subject, target in requests:
        pt, tt = model.to_tokens(prompt.replace("{}", subject))[0].tolist(), model.target_tokens(target)
        rows.append(pt + tt[:-1])
        starts.append(len(pt) - 1)  # the position predicting the target's first token
        targets.append(tt)
    matrix = model.mlp_out_matrix(layer)
    ds = [torch.zeros_like(matrix, requires_grad=True) for _ in requests]
    losses = _optimise(model, layer, ds, rows, starts, targets, hp, progress)
    share = (time.perf_counter() - t0) / len(requests)
    out = []
    for (prompt, subject, target), d, loss in zip(requests, ds, losses):
        update = d.detach()
        out.append(FTEdit(request={"prompt": prompt, "subject": subject, "target": target}, layer=layer,
                          hparams=hp.to_dict(), update=update.cpu(), fingerprint=fingerprint,
                          norms={"update": float(update.norm()), "max_abs": float(update.abs().max()),
                                 "relative_update": float(update.norm() / matrix.norm())},
                          losses=loss, timings={"batch_share_s": share}))
    return out


def _optimise(model, layer: int, ds: list, rows, starts, targets, hp: FTHparams, progress) -> list[list[float]]:
    """Adam on each ``ds[i]`` [d_model, d_mlp] for its row's target NLL, each clamped and stopped on its own; the
    per-step losses of each."""
    opts = [torch.optim.Adam([d], lr=hp.lr) for d in ds]
    losses: list[list[float]] = [[] for _ in ds]
    box = {}

    def read_key(t, hook):
        box["k"] = t.detach()

    def add_update(t, hook):  # each row its own D (d lives with the weight it updates)
        k, active = box["k"], box["active"]
        if len(active) == 1:
            return t + (k.to(ds[active[0]].device) @ ds[active[0]].T).to(t.device)
        d = torch.stack([ds[i] for i in active])                                  # [b, d_model, d_mlp]
        return t + torch.matmul(k.to(d.device), d.transpose(1, 2)).to(t.device)   # [b, pos, d_model]

    hooks = [(f"blocks.{layer}.mlp.hook_post", read_key), (f"blocks.{layer}.hook_mlp_out", add_update)]
    active = list(range(len(ds)))
    with frozen_params(model), torch.enable_grad():
        for step in range(hp.steps):
            box["active"] = active
            toks, _ = pad_rows(model, [rows[i] for i in active])
            sel_r = torch.tensor([j for j, i in enumerate(active) for _ in targets[i]])
            sel_p = torch.tensor([starts[i] + t for i in active for t in range(len(targets[i]))])
            tgt = torch.tensor([tok for i in active for tok in targets[i]])
            logp = torch.log_softmax(selected_logits(model, toks, sel_r, sel_p, hooks).float(), -1)
            tok_nll = -logp.gather(1, tgt[:, None].to(logp.device))[:, 0]
            total, going, k = None, [], 0
            for i in active:
                nll = tok_nll[k: k + len(targets[i])].mean()
                k += len(targets[i])
                losses[i].append(float(nll.detach()))
                if losses[i][-1] >= hp.loss_stop:
                    going.append(i)
                    total = nll if total is None else total + nll
            notify(progress, stage="optimize", step=step, nll=sum(losses[i][-1] for i in active) / len(active),
                   active=len(going))
            if not going:
                break
            for i in going:
                opts[i].zero_grad()
            total.backward()
            for i in going:
                opts[i].step()
                with torch.no_grad():
                    ds[i].clamp_(-hp.norm_constraint, hp.norm_constraint)
            active = going
    return losses


def _requests(facts) -> list[tuple[str, str, str]]:
    return [(f.prompt, f.subject, f.target_new) for f in facts]


def _spec_one(model, fact, layers, hp, *, seed, stats, progress) -> FTEdit:
    return _one(model, _requests([fact])[0], layers[0], hp, progress)


def _spec_all(model, facts, layers, hp, *, seed, stats, progress) -> list[FTEdit]:
    return _edits(model, _requests(facts), layers[0], hp, progress)


register(EditorSpec("ft", "FT-L", FTHparams, FTEdit, one_layer("FT-L"), one=_spec_one, together=_spec_all))
