"""Every single-unit ablation on one prompt, run exactly: which feature (or neuron) at which position moves the
model's answer, and does any change it?

``ablation_effects(model, transcoders, layer, text)`` ablates, one at a time, every feature active at every
position (the dictionary's error kept: the MLP write becomes ``y - a_f * W_dec[f]``, as :func:`use.intervene`
does) and reruns the real model; ``units="neurons"`` is the baseline at the same count: at each position, each of
the MLP's ``k`` largest |hidden activations| (k the dictionary's) set to 0 in the real MLP. Each row reports the
change in the answer's margin — ``logit(answer) - logit(rival)``, with ``answer`` and ``rival`` the clean model's
top two next tokens unless given — and the ablated model's top-1. Ablations run as one batch of copies of the
prompt (``batch`` rows per forward), each row with its own edit, through the one hook mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...core.inputs import decode
from ...core.results import Result, new_figure, save_fig
from .use import as_set

UNITS = ("features", "neurons")


@dataclass(repr=False)
class AblationEffects(Result):
    """One row per ablated unit: ``pos``, ``token``, ``unit``, ``activation``, ``margin_change`` (ablated minus
    clean margin), ``top1`` (the ablated model's next token) and ``flipped`` (top-1 no longer the answer)."""

    frame: object
    key: object
    units: str
    answer: str
    rival: str
    clean_margin: float
    meta: dict = field(default_factory=dict)

    def to_frame(self):
        return self.frame

    @property
    def flips(self) -> int:
        return int(self.frame["flipped"].sum()) if len(self.frame) else 0

    def summary(self) -> str:
        f = self.frame
        worst = f.iloc[0] if len(f) else None
        head = (f"{len(f)} single {self.units[:-1]} ablations at layer {self.key}: the answer {self.answer!r} "
                f"(margin {self.clean_margin:.2f} over {self.rival!r}) changes in {self.flips}")
        if worst is None:
            return head
        return head + (f"; largest drop {worst['margin_change']:+.2f} ({self.units[:-1]} {int(worst['unit'])} at "
                       f"{worst['token']!r}, position {int(worst['pos'])})")

    def to_json(self) -> dict:
        return {**super().to_json(), "key": self.key, "units": self.units, "answer": self.answer, "rival": self.rival,
                "clean_margin": self.clean_margin}

    def plot(self, *, out=None):
        fig = new_figure(figsize=(6, 3))
        ax = fig.subplots()
        f = self.frame
        ax.hist(f["margin_change"], bins=40, color="C0" if self.units == "features" else "C1")
        ax.axvline(-self.clean_margin, color="k", ls="--", lw=1)
        ax.set_xlabel(f"margin change ({self.answer!r} minus {self.rival!r})")
        ax.set_ylabel(f"single {self.units[:-1]} ablations")
        ax.set_yscale("log")
        ax.set_title(f"layer {self.key}: dashed line = the change that flips the answer", fontsize=9)
        return save_fig(fig, out)


def ablation_effects(model, dictionaries, key, text: str, *, units: str = "features", answer: str | None = None,
                     rival: str | None = None, batch: int = 64) -> AblationEffects:
    """Every single ablation of ``units`` ("features" of the transcoder at ``key``, or "neurons", the baseline at
    the same count) at every position of ``text`` but the first, each run exactly (see the module docstring)."""
    import pandas as pd

    if units not in UNITS:
        raise ValueError(f"units={units!r}; allowed: {', '.join(UNITS)}")
    ds = as_set(dictionaries).check(model)
    d = ds[key]
    if d.kind != "transcoder":
        raise ValueError(f"ablation_effects takes a transcoder; the dictionary at {key!r} is a {d.kind}")
    hidden = f"blocks.{d.site.layer}.mlp.hook_post"
    toks = model.to_tokens(text).to(model.device)                        # [1, pos]
    strs = model.to_str_tokens(toks[0])
    with torch.no_grad():
        logits, store = model.run_with_cache(toks, [d.site.read, hidden])   # one clean forward
    clean = logits[0, -1].float()                                         # [vocab]
    ans = model.to_single_token(answer) if answer is not None else int(clean.argmax())
    riv = model.to_single_token(rival) if rival is not None else int(clean.topk(2).indices[1 if clean.argmax() == ans else 0])
    if riv == ans:
        raise ValueError(f"rival {rival!r} is the answer itself; give another token")
    margin = float(clean[ans] - clean[riv])

    with torch.no_grad():
        if units == "features":
            acts = d.encode(store[d.site.read][0].float())               # [pos, width]
            cand = [(p, int(f), float(acts[p, f])) for p in range(1, len(strs)) for f in acts[p].nonzero().flatten()]
            rows_delta = (d.W_dec.float() * float(d.out_scale))          # [width, d_out]
        else:
            h = store[hidden][0].float()                                 # [pos, d_mlp]
            k = d.k or d.width
            cand = [(p, int(n), float(h[p, n])) for p in range(1, len(strs)) for n in h[p].abs().topk(k).indices]
    out = []
    for start in range(0, len(cand), batch):
        part = cand[start:start + batch]
        pos = torch.tensor([c[0] for c in part], device=model.device)
        unit = torch.tensor([c[1] for c in part], device=model.device)
        rows = torch.arange(len(part), device=model.device)
        if units == "features":
            delta = -torch.tensor([c[2] for c in part])[:, None] * rows_delta[unit.cpu()]   # [rows, d_out]

            def edit(t, hook, delta=delta.to(model.device), pos=pos, rows=rows):
                t = t.clone()
                t[rows, pos] = (t[rows, pos].float() + delta).to(t.dtype)
                return t
            hooks = [(d.site.write, edit)]
        else:
            def edit(t, hook, pos=pos, unit=unit, rows=rows):
                t = t.clone()
                t[rows, pos, unit] = 0
                return t
            hooks = [(hidden, edit)]
        with torch.no_grad(), model.hooks(hooks, description="ablation effects"):
            logits = model.forward(toks.expand(len(part), -1))[:, -1].float()   # [rows, vocab]
        top = logits.argmax(-1)
        change = (logits[:, ans] - logits[:, riv]) - margin
        for (p, u, a), c, t in zip(part, change.tolist(), top.tolist()):
            out.append({"pos": p, "token": strs[p], "unit": u, "activation": a, "margin_change": c,
                        "top1": decode(model, t), "flipped": t != ans})
    frame = pd.DataFrame(out, columns=["pos", "token", "unit", "activation", "margin_change", "top1", "flipped"])
    frame = frame.sort_values("margin_change", kind="stable").reset_index(drop=True)
    return AblationEffects(frame, key, units, decode(model, ans), decode(model, riv), margin,
                           meta={"text": text, "positions": len(strs)})

