"""Tuned lens (Belrose et al. 2023): ``interp.tuned_lens(model, text, targets=..., k=5, positions=None)``.

The logit lens reads every residual through the final norm and the unembedding as if it were the last one; early
and middle layers speak another basis, so it says little there. The tuned lens puts one affine translator per
layer in front of the final norm,

    T_l(h) = h + h A_lᵀ + b_l          (A_l [d_model, d_model], b_l [d_model]; A_l = 0, b_l = 0 is the logit lens)

trained (:func:`interp.analyses.tuned_lens.train.train_tuned_lens`) to minimise KL(final ‖ lens) on natural text.
:func:`tuned_lens` returns the logit lens's result type (:class:`~interp.analyses.lens.LogitLensResult`), marked
``tuned``: the same table, plots, interactive view and CLI, rows 0..n_layers-1 read through the translators and
the final row the model's own output, as in the logit lens. A bias-only translator ``h + c_l`` (the paper's
baseline) is trained alongside and kept in the same file (``lens.translate(..., which="bias")``).

The position-0 (BOS) residual is an outlier (the attention sink) that training leaves out, as the key statistics
do; the tuned lens still reads it, but what it shows there is outside what it was fitted on.

On disk: one safetensors file (translators, baseline, training curves; the metadata in its header) and a JSON
sidecar with the metadata, the file's size and SHA-256 (:func:`interp.analyses.accumulate.write_state`); never
pickle. The metadata names the model (``model_fingerprint``, dtype, shapes) and every training setting. A lens is
refused for a model with another fingerprint or dtype (the error names both), and a truncated or altered file is
refused on load (the training cache retrains instead, with a warning). The cache lives under
``cache_dir()/tuned_lens/<model fingerprint>/``; :func:`load_tuned_lens` without a path takes the newest complete
lens there.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ...core import paths as _paths
from ...core.corpus import Doc, wiki_documents
from ...core.results import Result, new_figure, save_fig
from ..accumulate import read_state, write_state
from ..lens import LogitLensResult, layer_labels, run_lens

FORMAT = "interp.TunedLens/1"
HELDOUT_EVERY = 10  # one document in ten (by a hash of its text) is held out of training, whatever the seed
WHICH = ("tuned", "bias", "logit")


# ============================================================================================== the lens
@dataclass(repr=False, eq=False)
class TunedLens(Result):
    """One affine translator per layer (``weight`` A, ``bias`` b: T(h) = h + h Aᵀ + b) and the bias-only
    baseline (``baseline`` c: h + c), for the model named in ``meta``."""

    weight: torch.Tensor  # float32 [n_layers, d_model, d_model]
    bias: torch.Tensor  # float32 [n_layers, d_model]
    baseline: torch.Tensor  # float32 [n_layers, d_model]
    meta: dict
    # mean training KL (nats) per logged step: [steps, 2, n_layers] (0 = tuned, 1 = bias-only); step 0 is before
    # the first update
    history: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 2, 0))
    path: Path | None = None

    # -------------------------------------------------------------------------------------- building
    @classmethod
    def identity(cls, model, **meta) -> TunedLens:
        """The untrained lens: every translator the identity, i.e. exactly the logit lens."""
        L, d = model.n_layers, model.d_model
        return cls(weight=torch.zeros(L, d, d), bias=torch.zeros(L, d), baseline=torch.zeros(L, d),
                   meta={**model_meta(model), "settings": {}, **meta}, history=torch.zeros(0, 2, L))

    @property
    def n_layers(self) -> int:
        return int(self.weight.shape[0])

    @property
    def fingerprint(self) -> str:
        return str(self.meta.get("model_fingerprint", ""))

    def check(self, model) -> None:
        """Refuse ``model`` unless it is the one this lens was trained for (fingerprint, dtype, shapes)."""
        mine = (self.fingerprint, str(self.meta.get("dtype")))
        theirs = (model.fingerprint, str(model.dtype))
        if mine != theirs:
            raise ValueError(
                f"this tuned lens was trained for model fingerprint {mine[0]} (dtype {mine[1]}, "
                f"{self.meta.get('model', '?')}); the model given has fingerprint {theirs[0]} (dtype {theirs[1]}, "
                f"{model.source}): a translator only fits the weights it was trained on — train one for this "
                f"model with interp.train_tuned_lens(model)")
        if (self.n_layers, self.weight.shape[-1]) != (model.n_layers, model.d_model):
            raise ValueError(f"tuned lens shapes [{self.n_layers} layers, d_model {self.weight.shape[-1]}] do not "
                             f"match the model's [{model.n_layers}, {model.d_model}]")

    # -------------------------------------------------------------------------------------- applying
    def translate(self, resid: torch.Tensor, layer: int | None = None, *, which: str = "tuned") -> torch.Tensor:
        """``resid`` [n_layers, ..., d_model] (every layer's residual, as the lens stacks them), or the residual
        [..., d_model] entering ``layer`` -> what the lens puts through the final norm (same shape, device and
        dtype). ``which``: "tuned" (A, b), "bias" (the bias-only baseline) or "logit" (unchanged)."""
        if which not in WHICH:
            raise ValueError(f"which={which!r}; allowed: {', '.join(map(repr, WHICH))}")
        if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int)
                                  or not 0 <= layer < self.n_layers):
            raise ValueError(f"layer {layer!r} out of range: allowed 0..{self.n_layers - 1} (the final residual "
                             "needs no translator)")
        if which == "logit":
            return resid
        if layer is None and resid.shape[0] != self.n_layers:
            raise ValueError(f"resid has {resid.shape[0]} rows in its first dimension; expected one per layer "
                             f"({self.n_layers}), or pass layer=")
        h = resid.float()
        sel = slice(None) if layer is None else layer
        lead = (self.n_layers,) if layer is None else ()
        shape = lead + (1,) * (h.dim() - len(lead) - 1) + (h.shape[-1],)  # broadcast over the middle dims
        if which == "bias":
            out = h + self.baseline[sel].to(h.device).reshape(shape)
        else:
            A = self.weight[sel].to(h.device)
            flat = h.reshape(*lead, -1, h.shape[-1])
            # h + (h Aᵀ + b): with A = 0 and b = 0 this is h exactly, so the untrained lens is the logit lens
            delta = flat @ A.transpose(-1, -2) + self.bias[sel].to(h.device).reshape(*lead, 1, -1)
            out = h + delta.reshape(h.shape)
        return out.to(resid.dtype)

    # -------------------------------------------------------------------------------------- saving
    def state(self) -> dict:
        return {"tensors": {"weight": self.weight.float().contiguous(), "bias": self.bias.float().contiguous(),
                            "baseline": self.baseline.float().contiguous(),
                            "history": self.history.float().contiguous()},
                "meta": json.loads(json.dumps(self.meta, default=str))}

    def save(self, path) -> Path:
        """Write ``path`` (.safetensors) and its JSON sidecar (metadata, size, SHA-256) -> the tensor path."""
        path = tensor_path(path)
        write_state(path, self.state())
        self.path = path
        return path

    @classmethod
    def load(cls, path) -> TunedLens:
        """Read a saved lens; ValueError if the file is truncated or altered (size / SHA-256) or not a lens."""
        path = tensor_path(path)
        state = read_state(path)
        meta, t = state["meta"], state["tensors"]
        if meta.get("format") != FORMAT or not {"weight", "bias", "baseline"} <= set(t):
            raise ValueError(f"{path} is not a tuned lens (format {meta.get('format')!r}; expected {FORMAT!r})")
        L, d = meta.get("n_layers"), meta.get("d_model")
        if tuple(t["weight"].shape) != (L, d, d) or tuple(t["bias"].shape) != (L, d) \
                or tuple(t["baseline"].shape) != (L, d):
            raise ValueError(f"{path}: tensor shapes {tuple(t['weight'].shape)} do not match its metadata "
                             f"({L} layers, d_model {d})")
        hist = t.get("history", torch.zeros(0, 2, L))
        return cls(weight=t["weight"], bias=t["bias"], baseline=t["baseline"], meta=meta, history=hist, path=path)

    # -------------------------------------------------------------------------------------- result protocol
    def to_frame(self):
        """One row per layer: translator sizes and the training KL in bits (the unit of the held-out evaluation,
        :func:`evaluate_lens`) at the start and end, both lenses."""
        import pandas as pd

        eye_dist = self.weight.flatten(1).norm(dim=1)
        recs = []
        for l in range(self.n_layers):
            rec = {"layer": l, "label": layer_labels(self.n_layers)[l], "|A|_F": float(eye_dist[l]),
                   "|b|": float(self.bias[l].norm()), "|c| (bias-only)": float(self.baseline[l].norm())}
            if self.history.shape[0]:
                bits = self.history / math.log(2)  # stored in nats, the unit the optimiser minimises
                rec.update({"train_kl_start_bits": float(bits[0, 0, l]),
                            "train_kl_tuned_bits": float(bits[-1, 0, l]),
                            "train_kl_bias_only_bits": float(bits[-1, 1, l])})
            recs.append(rec)
        return pd.DataFrame(recs).set_index("layer")

    def summary(self) -> str:
        m, s = self.meta, self.meta.get("settings", {})
        if not s:
            return f"untrained (identity) tuned lens for {m.get('model')} [{self.fingerprint}]: the logit lens"
        return (f"tuned lens for {m.get('model')} [{self.fingerprint}, {m.get('dtype')}]: {self.n_layers} "
                f"translators, {m.get('tokens')} training tokens ({s.get('init')} start, {s.get('steps')} KL steps "
                f"x {s.get('batch_size')}), trained in {float(m.get('seconds', 0.0)):.0f} s")

    def to_json(self) -> dict:
        return {"result": type(self).__name__, "summary": self.summary(), "meta": self.meta,
                "path": None if self.path is None else str(self.path),
                "layers": self.to_frame().reset_index().to_dict(orient="records")}

    def plot(self, *, out=None):
        """Training curves: mean KL over layers per logged step, tuned and bias-only; and the last step's KL per
        layer."""
        fig = new_figure(figsize=(10, 3.8))
        ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
        H = self.history / math.log(2)  # bits, as the held-out evaluation's figure
        if H.shape[0]:
            steps = self.meta.get("history_steps") or list(range(H.shape[0]))
            ax1.plot(steps, H[:, 0].mean(-1).numpy(), marker=".", label="tuned")
            ax1.plot(steps, H[:, 1].mean(-1).numpy(), marker=".", label="bias only")
            ax2.plot(range(self.n_layers), H[-1, 0].numpy(), marker=".", label="tuned")
            ax2.plot(range(self.n_layers), H[-1, 1].numpy(), marker=".", label="bias only")
            ax1.legend(fontsize=8)
        ax1.set_xlabel("KL step")
        ax1.set_ylabel("training KL (bits), mean over layers")
        ax2.set_xlabel("layer (residual entering block l)")
        ax2.set_ylabel("training KL (bits), last step")
        ax1.set_title(f"tuned lens training ({self.meta.get('model')})", fontsize=10)
        return save_fig(fig, out)


# ============================================================================================== the analysis
def tuned_lens(model, text, *, targets=None, k: int = 5, positions=None, lens=None) -> LogitLensResult:
    """The tuned lens of ``text`` — :func:`interp.logit_lens`'s arguments and result type, rows 0..n_layers-1 read
    through the translators (``result.tuned`` is True). ``lens``: a :class:`TunedLens`, the path of a saved one,
    or None for the newest lens cached for this model (:func:`load_tuned_lens`)."""
    lens = as_lens(model, lens)
    return run_lens(model, text, targets=targets, k=k, positions=positions, translate=lens.translate)


def as_lens(model, lens) -> TunedLens:
    """``lens`` (a TunedLens, a path, or None for the newest cached one) checked against ``model``."""
    if lens is None:
        return load_tuned_lens(model)
    if isinstance(lens, (str, Path)):
        return load_tuned_lens(model, lens)
    if not isinstance(lens, TunedLens):
        raise TypeError(f"lens={type(lens).__name__}; allowed: a TunedLens, the path of a saved one, or None "
                         "(the newest lens cached for this model)")
    lens.check(model)
    return lens


def load_tuned_lens(model, path=None) -> TunedLens:
    """The lens at ``path`` (checked against ``model``), or the newest complete lens cached for ``model``;
    FileNotFoundError when there is none."""
    if path is not None:
        p = tensor_path(path)
        if not p.exists():
            raise FileNotFoundError(f"tuned lens file {str(p)!r} does not exist")
        lens = TunedLens.load(p)
        lens.check(model)
        return lens
    found = cached_lenses(model)
    if not found:
        raise FileNotFoundError(
            f"no tuned lens cached for {model.source} (fingerprint {model.fingerprint}) under "
            f"{lens_dir(model.fingerprint)}; train one with interp.train_tuned_lens(model) or `interp train-lens`")
    lens = TunedLens.load(found[0])
    lens.check(model)
    return lens


# ============================================================================================== cache
def lens_dir(fingerprint: str) -> Path:
    return _paths.cache_dir() / "tuned_lens" / fingerprint


def tensor_path(path) -> Path:
    """``x``, ``x.safetensors`` or ``x.json`` -> ``x.safetensors``."""
    p = Path(path)
    if p.suffix == ".json":
        return p.with_suffix(".safetensors")
    return p if p.suffix == ".safetensors" else p.with_name(p.name + ".safetensors")


def cached_lenses(model) -> list[Path]:
    """Complete lenses cached for ``model`` (checkpoints left out), newest first by their recorded finish time."""
    folder = lens_dir(model.fingerprint)
    if not folder.is_dir():
        return []
    found = []
    for side in folder.glob("*.json"):
        if ".partial" in side.name or ".capture" in side.name or ".eval" in side.name:
            continue
        try:
            meta = json.loads(side.read_text()).get("meta", {})
        except (OSError, ValueError):
            continue
        if meta.get("format") == FORMAT and side.with_suffix(".safetensors").exists():
            found.append((float(meta.get("finished_at", 0.0)), side.with_suffix(".safetensors")))
    return [p for _, p in sorted(found, key=lambda x: (-x[0], str(x[1])))]


def settings_key(settings: dict) -> str:
    """A short stable name for a set of training settings (the cache file's stem)."""
    blob = json.dumps(settings, sort_keys=True, default=str).encode()
    return f"lens_{settings.get('tokens')}tok_seed{settings.get('seed')}_{hashlib.sha256(blob).hexdigest()[:10]}"


def model_meta(model) -> dict:
    """What a lens records about the model it fits (checked by :meth:`TunedLens.check`)."""
    return {"format": FORMAT, "model_fingerprint": model.fingerprint, "model": model.source,
            "dtype": str(model.dtype), "n_layers": model.n_layers, "d_model": model.d_model,
            "d_vocab": model.d_vocab}


# ============================================================================================== corpus split
def split_documents(corpus="wiki", seed: int = 0) -> tuple[list[Doc], list[Doc], str]:
    """``(train, heldout, corpus_id)``: one document in :data:`HELDOUT_EVERY` (by a hash of its title and text,
    so the split does not move with the seed or the token budget) is held out; the training documents are
    shuffled with ``seed``, the held-out ones keep the corpus order. ``corpus``: "wiki" (the embedded Wikipedia
    lead paragraphs) or a list of texts."""
    if isinstance(corpus, str):
        if corpus != "wiki":
            raise ValueError(f"corpus {corpus!r} not known; allowed: 'wiki' or a list of texts")
        docs, corpus_id = wiki_documents(), "wiki"
    else:
        texts = list(corpus)
        if len(texts) < 2 or not all(isinstance(t, str) and t.strip() for t in texts):
            raise ValueError("corpus must be 'wiki' or a list of at least 2 non-empty texts")
        docs = [Doc(title="", text=t) for t in texts]
        corpus_id = f"texts:{len(texts)}:{hashlib.sha256(chr(0).join(texts).encode()).hexdigest()[:12]}"
    train, held = [], []
    for d in docs:
        h = int(hashlib.sha256(f"{d.title}\x00{d.text}".encode()).hexdigest()[:8], 16)
        (held if h % HELDOUT_EVERY == 0 else train).append(d)
    if not held:  # a tiny corpus may hash no document into the held-out set: take its last one
        held, train = train[-1:], train[:-1]
    random.Random(seed).shuffle(train)
    return train, held, corpus_id
