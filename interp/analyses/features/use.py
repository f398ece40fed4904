"""Reading and changing a model through its features: encode a text, intervene on features, read them in a cache,
and a feature's decoder through the unembedding.

Interventions keep the dictionary's error. At a transcoder's site the MLP write ``y`` becomes
``y + decode(a') - decode(a)``, with ``a`` the features the transcoder reads from the MLP's actual input and ``a'``
the changed ones: what the dictionary does not explain (``y - ŷ``) stays in place, so an intervention that changes
nothing leaves the forward exactly as it was. An SAE's site is changed the same way. ``ablate`` sets a feature to 0,
``clamp`` to a value, ``steer`` adds ``value`` to it (at every position it is asked for, active there or not). The
hooks go through the one hook mechanism (``model.hooks``) and are removed on every exit path.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from ...core.hooks import capture
from ...core.inputs import decode
from ...core.results import Result, new_figure, save_fig
from .dictionary import Dictionary, DictionarySet

MODES = ("ablate", "clamp", "steer")


def as_set(dictionaries) -> DictionarySet:
    """A Dictionary or a DictionarySet, as a DictionarySet."""
    if isinstance(dictionaries, Dictionary):
        d = dictionaries
        return DictionarySet({d.site.layer if d.kind == "transcoder" else d.site.read: d})
    if not isinstance(dictionaries, DictionarySet):
        raise TypeError(f"expected a Dictionary or DictionarySet, got {type(dictionaries).__name__}")
    return dictionaries


# ============================================================================================== encode
@dataclass(repr=False)
class FeatureActivations(Result):
    """Active features per token: ``acts[key]`` [pos, width] (dense, zeros where inactive), for each dictionary."""

    tokens: list
    acts: dict
    text: str = ""
    top: int = 8
    meta: dict = field(default_factory=dict)

    def active(self, key, pos: int) -> list[tuple[int, float]]:
        a = self.acts[key][pos]
        nz = a.nonzero().flatten()
        order = a[nz].argsort(descending=True)
        return [(int(nz[i]), float(a[nz[i]])) for i in order]

    def to_frame(self):
        import pandas as pd

        rows = []
        for key, a in self.acts.items():
            for p, tok in enumerate(self.tokens):
                for rank, (f, v) in enumerate(self.active(key, p)[: self.top]):
                    rows.append({"layer": key, "pos": p, "token": tok, "rank": rank, "feature": f, "activation": v})
        return pd.DataFrame(rows, columns=["layer", "pos", "token", "rank", "feature", "activation"])

    def summary(self) -> str:
        l0 = {k: float((a > 0).sum(-1).float().mean()) for k, a in self.acts.items()}
        return (f"{len(self.tokens)} tokens through {len(self.acts)} dictionaries; mean active features per token "
                f"{sum(l0.values()) / max(len(l0), 1):.1f}")

    def to_json(self) -> dict:
        return {**super().to_json(), "tokens": self.tokens, "text": self.text}

    def view(self):
        from .features_view import tokens_view

        return tokens_view(self)

    def plot(self, *, out=None):
        from ..attention import token_label

        keys = list(self.acts)
        fig = new_figure(figsize=(max(6, 0.45 * len(self.tokens)), 0.3 * len(keys) + 1.5))
        ax = fig.subplots()
        grid = torch.stack([self.acts[k].max(-1).values for k in keys])  # [dicts, pos]
        im = ax.imshow(grid.numpy(), aspect="auto", cmap="viridis")
        ax.set_yticks(range(len(keys)), [f"L{k}" if isinstance(k, int) else str(k) for k in keys], fontsize=7)
        ax.set_xticks(range(len(self.tokens)), [token_label(t) for t in self.tokens], rotation=90, fontsize=7)
        fig.colorbar(im, ax=ax, label="largest feature activation")
        ax.set_title("largest active feature per token and dictionary", fontsize=9)
        return save_fig(fig, out)


def encode(model, dictionaries, text, *, top: int = 8) -> FeatureActivations:
    """The active features of every dictionary at every token of ``text`` (one forward, the real model's)."""
    ds = as_set(dictionaries).check(model)
    toks = model.to_tokens(text)
    names = list(dict.fromkeys(d.site.read for _, d in ds))
    store, _ = capture(model, toks.to(model.device), names, stop=True, description="encode features")
    with torch.no_grad():
        acts = {k: d.encode(store[d.site.read][0].float().cpu()) for k, d in ds}
    return FeatureActivations(model.to_str_tokens(toks[0]), acts, text if isinstance(text, str) else "", top)


def run_with_features(model, dictionaries, text, names=None):
    """``(logits, cache)`` of :meth:`Model.run_with_cache` (``names`` as there), with each dictionary's input kept
    and its feature activations added under ``features.<layer or hook>`` ([batch, pos, width]); the model runs
    unchanged."""
    from ...core.cache import Cache, act_name, default_names

    ds = as_set(dictionaries).check(model)
    given = default_names(model) if names is None else [act_name(n) for n in ([names] if isinstance(names, str)
                                                                                else names)]
    wanted = list(dict.fromkeys(given + [d.site.read for _, d in ds]))
    logits, cache = model.run_with_cache(text, wanted)
    acts = dict(cache)
    with torch.no_grad():
        for k, d in ds:
            acts[f"features.{k}"] = d.encode(acts[d.site.read])
    return logits, Cache(acts, model, tokens=cache.tokens, lengths=cache.lengths)


# ============================================================================================== interventions
@dataclass(frozen=True)
class FeatureEdit:
    """Change feature ``feature`` of the dictionary at ``key`` (layer or hook) at ``positions`` (None: all)."""

    key: object
    feature: int
    mode: str = "ablate"
    value: float = 0.0
    positions: tuple | None = None


def _check_edit(ds: DictionarySet, e) -> FeatureEdit:
    if isinstance(e, tuple):
        e = FeatureEdit(*e)
    if e.mode not in MODES:
        raise ValueError(f"mode={e.mode!r}; allowed: {', '.join(MODES)}")
    d = ds[e.key]
    if isinstance(e.feature, bool) or not isinstance(e.feature, int) or not 0 <= e.feature < d.width:
        raise ValueError(f"feature {e.feature!r} at {e.key}; allowed: 0..{d.width - 1}")
    return e


def feature_hooks(model, dictionaries, edits) -> list:
    """``[(hook name, fn)]`` that apply ``edits`` (FeatureEdit or ``(key, feature, mode, value, positions)``)."""
    ds = as_set(dictionaries).check(model)
    edits = [_check_edit(ds, e) for e in edits]
    hooks = []
    for key in dict.fromkeys(e.key for e in edits):
        d = ds[key]
        mine = [e for e in edits if e.key == key]
        seen = {}

        def read(t, hook, seen=seen):
            seen["x"] = t

        def write(t, hook, d=d, mine=mine, seen=seen):
            x = seen.pop("x", t)
            shape = t.shape
            a = d.encode(x.float())                              # [b, pos, width]
            new = a.clone()
            for e in mine:
                pos = slice(None) if e.positions is None else list(e.positions)
                col = new[:, pos, e.feature]
                new[:, pos, e.feature] = 0.0 if e.mode == "ablate" else \
                    torch.full_like(col, e.value) if e.mode == "clamp" else col + e.value
            delta = (new - a).reshape(-1, d.width) @ d.W_dec * d.out_scale   # the skip term cancels
            return (t.float() + delta.reshape(shape)).to(t.dtype)

        if d.site.read == d.site.write:
            hooks.append((d.site.write, lambda t, hook, w=write: w(t, hook)))
        else:
            hooks += [(d.site.read, read), (d.site.write, write)]
    return hooks


@contextmanager
def intervene(model, dictionaries, edits):
    """``with intervene(model, transcoders, [(layer, feature, "clamp", 5.0, [7])]): model.forward(...)``."""
    with model.hooks(feature_hooks(model, dictionaries, edits), description="feature intervention"):
        yield model


def replace_write(site, fn, *, positions=None, hidden: str | None = None) -> list:
    """``[(hook name, fn)]`` that replace the write at ``site`` by ``fn(x, h)``: ``x`` [n, d_in] the site's input
    and ``h`` the ``hidden`` hook's value (or None) at the positions replaced — the ``positions`` [batch, pos] bool
    mask, or every position — in float32; the rest of the write is left as the model made it."""
    seen = {}

    def grab(key):
        def keep(t, hook):
            seen[key] = t
        return keep

    def write(t, hook):
        x, h = seen.pop("x", t), seen.pop("h", None)
        sel = None if positions is None else positions.reshape(-1).to(t.device)

        def rows(a):
            a = a.reshape(-1, a.shape[-1])
            return (a if sel is None else a[sel]).float()

        new = fn(rows(x), None if h is None else rows(h)).to(t.dtype)
        if sel is None:
            return new.reshape(t.shape)
        out = t.reshape(-1, t.shape[-1]).clone()
        out[sel] = new
        return out.reshape(t.shape)

    hooks = [] if site.read == site.write else [(site.read, grab("x"))]
    return hooks + ([(hidden, grab("h"))] if hidden else []) + [(site.write, write)]


def splice_hooks(model, dictionaries, *, positions=None) -> list:
    """``[(hook name, fn)]`` replacing each dictionary's site with its reconstruction (the error dropped): an MLP's
    write becomes its transcoder's output of the MLP's actual input. ``positions``: a [batch, pos] bool mask of
    where to replace (None: everywhere)."""
    ds = as_set(dictionaries).check(model)
    return [h for _, d in ds for h in replace_write(d.site, lambda x, _h, d=d: d(x), positions=positions)]


@contextmanager
def splice(model, dictionaries, *, positions=None):
    """``with splice(model, transcoders): model.forward(...)`` runs the replacement model (see :func:`splice_hooks`)."""
    with model.hooks(splice_hooks(model, dictionaries, positions=positions), description="splice dictionaries"):
        yield model


# ============================================================================================== decoder
def logit_effect(model, d: Dictionary, feature: int) -> torch.Tensor:
    """[d_vocab] direct effect on the logits of one unit of ``feature``: its decoder row (raw scale) through the
    final norm's learned scale and W_U (the norm's 1/rms, positive, left out: the ranking does not depend on it)."""
    if isinstance(feature, bool) or not isinstance(feature, int) or not 0 <= feature < d.width:
        raise ValueError(f"feature {feature!r}; allowed: 0..{d.width - 1}")
    w = d.W_dec[feature].detach().float() * float(d.out_scale)
    if model.norm == "ln":
        w = w - w.mean()
    scale = model.final_norm_weight()
    if scale is not None:
        w = w * scale.float()
    return w @ model.W_U.float()


def promoted_tokens(model, d: Dictionary, feature: int, k: int = 10) -> dict:
    """``{"promoted": [(token, logit per unit)], "suppressed": [...]}`` of :func:`logit_effect`."""
    eff = logit_effect(model, d, feature)
    top, bot = eff.topk(k), (-eff).topk(k)
    return {"promoted": [(decode(model, int(i)), float(v)) for v, i in zip(top.values, top.indices)],
            "suppressed": [(decode(model, int(i)), -float(v)) for v, i in zip(bot.values, bot.indices)]}

