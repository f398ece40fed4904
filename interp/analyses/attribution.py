"""Residual decomposition and direct logit attribution (DLA).

``decompose(model, text, pos=-1)`` splits the final residual at ``pos`` into the vectors each component added:

    resid_final = embed (+ pos_embed) + sum_l [ attn_l + mlp_l ],    attn_l = sum_h z_h @ W_O[h] (+ b_O)

at two granularities: per layer (``attn_l`` is the layer's own ``hook_attn_out``, so the layer-level parts add
up to the final residual exactly as the model added them) and per head (``L{l}H{h}`` = z_h @ W_O[h], with an
attention output bias, where the model has one, as its own part ``L{l}.b_O``). Head parts match the layer's
output up to the model's own float32 rounding of its output projection. Where the block normalises the attention
output again before adding it (Gemma's post-norms, :mod:`interp.core.arch`), ``attn_l`` is that normed write and
each head's part is ``z_h @ W_O[h]`` through the post-norm with its scale frozen at its actual input, so the
heads still sum to ``attn_l``. ``w`` below is the norm's effective gain (``1 + w`` on Gemma). On a
mixture-of-experts model the head level splits each MLP into its experts (``L{l}E{e}``: the expert's weighted
output, zero where the router did not choose it; :mod:`interp.core.moe`), which sum to ``mlp_l``.

``direct_logit_attribution(model, text, token, baseline_token=None, pos=-1)`` pushes each part through the
final norm with its scale frozen at the value the model actually used (``s = rms(x)`` for RMSNorm,
``s = std(x)`` for LayerNorm, computed from the real final residual ``x``), then through the unembedding
direction ``u = W_U[:, token] - W_U[:, baseline]``:

    RMSNorm:   c_i = (p_i * w) . u / s
    LayerNorm: c_i = ((p_i - mean(p_i)) * w) . u / s,      remainder = b . u  (+ b_U[token] - b_U[baseline])

Because the frozen norm is linear, the contributions plus that remainder sum to the model's logit (or logit
difference) exactly, up to float rounding. The direct path is all DLA measures: a component's effect through
later layers is credited to those layers. The embedding's direct path is the seed question here: the token
embedding is added once at the bottom and never removed, so it keeps a direct additive route to the logits.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from ..core import arch, moe
from ..core.hooks import capture
from ..core.inputs import check_pos, one_text, target_id
from ..core.results import Result, jsonable, new_figure, save_fig


# ---------------------------------------------------------------------------------------------- capture
def _hook_names(model) -> tuple[list[str], bool]:
    """Names needed to rebuild the residual at one position; whether a learned positional embedding exists."""
    learned_pos = model.positional == "standard" and "hook_pos_embed" in model.hook_names()
    names = ["hook_embed"] + (["hook_pos_embed"] if learned_pos else [])
    post, routed = arch.has_post_norms(model), moe.is_moe(model)
    for layer in range(model.n_layers):
        names += [f"blocks.{layer}.attn.hook_z", f"blocks.{layer}.hook_attn_out"]
        if post:  # the heads sum to the output before the post-norm; its scale is frozen from this value
            names.append(arch.pre_norm_hook(model, layer, "attn"))
        if routed:  # each expert's part is recomputed from the block's input and the router's weights
            names += [moe.hooks(layer)["input"], moe.hooks(layer)["weights"]]
        if model.d_mlp is not None:
            names.append(f"blocks.{layer}.hook_mlp_out")
    names.append(f"blocks.{model.n_layers - 1}.hook_resid_post")
    return names, learned_pos


def _capture_parts(model, toks: torch.Tensor, pos: int, *, need_logits: bool):
    names, learned_pos = _hook_names(model)

    def keep(name, t):
        # [batch, pos, ...]; a 2-D [pos, d_model] is shared by the batch (e.g. a toy model's hook_pos_embed)
        return (t[0] if t.ndim >= 3 else t)[pos].detach().to("cpu", torch.float32)

    store, logits = capture(model, toks, names, keep=keep, stop=not need_logits)
    if logits is not None:
        logits = logits[0, pos].detach().to("cpu", torch.float32)
    return store, learned_pos, logits


# ---------------------------------------------------------------------------------------------- decomposition
def decompose(model, text, pos: int = -1) -> Decomposition:
    """Split the final residual at ``pos`` into embedding, per-head / per-layer attention and MLP parts."""
    toks = one_text(model, text)
    pos = check_pos(pos, toks.shape[1])
    store, learned_pos, _ = _capture_parts(model, toks, pos, need_logits=False)
    return _decomposition(model, toks, pos, store, learned_pos)


def _decomposition(model, toks, pos, store, learned_pos) -> Decomposition:
    post, routed = arch.has_post_norms(model), moe.is_moe(model)
    head_rows: list[tuple[str, str, int | None, int | None, torch.Tensor]] = []
    layer_rows: list[tuple[str, str, int | None, torch.Tensor]] = []
    first = [("embed", "embed", store["hook_embed"])]
    if learned_pos:
        first.append(("pos_embed", "pos_embed", store["hook_pos_embed"]))
    for label, kind, vec in first:
        head_rows.append((label, kind, None, None, vec))
        layer_rows.append((label, kind, None, vec))
    for layer in range(model.n_layers):
        z = store[f"blocks.{layer}.attn.hook_z"]  # [n_heads, d_head]
        heads = torch.einsum("hd,hdm->hm", z.double(), model.W_O(layer).double())  # [n_heads, d_model]
        b_O = model.b_O(layer)
        # Post-norm (Gemma): the residual receives norm(sum of heads); with the norm's scale frozen at its
        # actual input each head's share is linear, so the shares still add up to hook_attn_out.
        gain = None if not post else arch.frozen_post_norm(model, layer, "attn",
                                                          store[arch.pre_norm_hook(model, layer, "attn")])
        if gain is not None:
            heads = heads * gain
            b_O = None if b_O is None else (b_O.double() * gain).float()
        heads = heads.float()
        for h in range(model.n_heads):
            head_rows.append((f"L{layer}H{h}", "head", layer, h, heads[h]))
        if b_O is not None:
            head_rows.append((f"L{layer}.b_O", "attn_bias", layer, None, b_O))
        layer_rows.append((f"L{layer}.attn", "attn", layer, store[f"blocks.{layer}.hook_attn_out"]))
        if model.d_mlp is not None:
            mlp = store[f"blocks.{layer}.hook_mlp_out"]
            if routed:  # a mixture of experts: one part per expert (zero where the router did not pick it)
                h = moe.hooks(layer)
                per = moe.expert_outputs(model, layer, store[h["input"]], store[h["weights"]]).float().cpu()
                head_rows += [(f"L{layer}E{e}", "expert", layer, None, per[e]) for e in range(per.shape[0])]
            else:
                head_rows.append((f"L{layer}.mlp", "mlp", layer, None, mlp))
            layer_rows.append((f"L{layer}.mlp", "mlp", layer, mlp))
    str_tokens = model.to_str_tokens(toks)
    resid = store[f"blocks.{model.n_layers - 1}.hook_resid_post"]
    gap = float((torch.stack([r[3] for r in layer_rows]).double().sum(0) - resid.double()).abs().max())
    if gap > 1e-3 * max(1.0, float(resid.abs().max())):
        warnings.warn(f"the parts miss {gap:.3g} of the final residual on {getattr(model, 'source', 'this model')}: "
                      "its architecture adds something to the residual that hook_embed / hook_pos_embed / "
                      "hook_attn_out / hook_mlp_out do not show", RuntimeWarning, stacklevel=3)
    return Decomposition(
        labels=[r[0] for r in head_rows], kinds=[r[1] for r in head_rows], layers=[r[2] for r in head_rows],
        heads=[r[3] for r in head_rows], parts=torch.stack([r[4] for r in head_rows]),
        layer_labels=[r[0] for r in layer_rows], layer_kinds=[r[1] for r in layer_rows],
        layer_layers=[r[2] for r in layer_rows], layer_parts=torch.stack([r[3] for r in layer_rows]),
        resid=resid, pos=pos, str_tokens=str_tokens,
        n_layers=model.n_layers, n_heads=model.n_heads, source=getattr(model, "source", ""))


@dataclass(repr=False)
class Decomposition(Result):
    labels: list[str]  # head level: embed, [pos_embed], L{l}H{h}..., [L{l}.b_O], L{l}.mlp or L{l}E{e}...
    kinds: list[str]  # embed | pos_embed | head | attn_bias | mlp | expert
    layers: list[int | None]
    heads: list[int | None]
    parts: torch.Tensor  # [n_parts, d_model]
    layer_labels: list[str]  # layer level: embed, [pos_embed], L{l}.attn, L{l}.mlp
    layer_kinds: list[str]  # embed | pos_embed | attn | mlp
    layer_layers: list[int | None]
    layer_parts: torch.Tensor  # [n_layer_parts, d_model]
    resid: torch.Tensor  # [d_model], the model's final residual at pos (before the final norm)
    pos: int
    str_tokens: list[str]
    n_layers: int
    n_heads: int
    source: str = ""

    def _level(self, level: str):
        if level == "head":
            return self.labels, self.kinds, self.layers, self.parts
        if level == "layer":
            return self.layer_labels, self.layer_kinds, self.layer_layers, self.layer_parts
        raise ValueError(f"level {level!r} not known; allowed: 'head', 'layer'")

    def total(self, level: str = "layer") -> torch.Tensor:
        """Sum of the parts in the model's own order (float32, as the model adds them)."""
        parts = self._level(level)[3]
        out = torch.zeros_like(self.resid)
        for p in parts:
            out = out + p
        return out

    def to_frame(self, level: str = "layer"):
        """One row per part: norm, cosine with the final residual, and its share of the final residual
        (projection ``<p, x> / |x|^2`` — the shares sum to 1)."""
        import pandas as pd

        labels, kinds, layers, parts = self._level(level)
        x = self.resid.double()
        p = parts.double()
        share = (p @ x) / (x @ x)
        cos = (p @ x) / (p.norm(dim=-1) * x.norm()).clamp_min(1e-30)
        rows = {"component": labels, "kind": kinds, "layer": layers, "norm": p.norm(dim=-1).tolist(),
                "cos_final": cos.tolist(), "share_of_final": share.tolist()}
        if level == "head":
            rows["head"] = self.heads
        return pd.DataFrame(rows).set_index("component")

    def summary(self) -> str:
        f = self.to_frame("layer")
        emb = f.loc[f["kind"].isin(["embed", "pos_embed"]), "share_of_final"].sum()
        return (f"residual at position {self.pos} ({self.str_tokens[self.pos]!r}) split into "
                f"{len(self.layer_labels)} layer parts / {len(self.labels)} head parts ({self.source}); "
                f"embedding share of the final residual {emb:.3f}")

    def plot(self, *, out=None):
        """What each layer writes: norm of each part, and its projection share of the final residual."""
        f = self.to_frame("layer")
        fig = new_figure(figsize=(max(6, 0.22 * len(f) + 2), 5.5))
        ax_n, ax_s = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2)
        x = range(len(f))
        colors = [_COLORS.get(k, "gray") for k in f["kind"]]
        ax_n.bar(x, f["norm"], color=colors)
        ax_n.set_ylabel("|part|")
        ax_n.set_title(f"writes into the residual at {self.str_tokens[self.pos]!r} (pos {self.pos})", fontsize=10)
        ax_s.bar(x, f["share_of_final"], color=colors)
        ax_s.axhline(0, color="black", lw=0.5)
        ax_s.set_ylabel("<part, x> / |x|^2")
        _component_ticks(ax_s, list(f.index))
        ax_n.set_xticks([])
        return save_fig(fig, out)


_COLORS = {"embed": "tab:green", "pos_embed": "tab:olive", "attn": "tab:blue", "head": "tab:blue",
           "attn_bias": "tab:cyan", "mlp": "tab:orange", "expert": "tab:orange", "remainder": "tab:gray"}


def _component_ticks(ax, labels: list[str]) -> None:
    step = max(1, len(labels) // 40)
    ax.set_xticks(range(0, len(labels), step), labels[::step], rotation=90, fontsize=7)


# ---------------------------------------------------------------------------------------------- DLA
def frozen_norm_direction(model, resid: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, float, float, bool]:
    """For the final norm frozen at ``resid`` [d_model]: the vector ``g`` with contribution(p) = center?(p) . g,
    the remainder (norm bias . u), the frozen scale s, and whether parts are centred (LayerNorm)."""
    x = resid.double()
    u = u.double()
    if model.norm is None:
        return u, 0.0, 1.0, False
    eps = model.norm_eps()
    w = model.final_norm_weight()
    w = torch.ones_like(x) if w is None else w.double()
    if model.norm == "rms":
        s = float(torch.sqrt(x.pow(2).mean() + eps))
        return w * u / s, 0.0, s, False
    if model.norm == "ln":
        s = float(torch.sqrt(x.var(unbiased=False) + eps))
        b = model.final_norm_bias()
        rem = 0.0 if b is None else float(b.double() @ u)
        return w * u / s, rem, s, True
    raise ValueError(f"final norm {model.norm!r} not supported for DLA; supported: RMSNorm, LayerNorm")


def direct_logit_attribution(model, text, token, baseline_token=None, pos: int = -1) -> DLAResult:
    """Each component's direct contribution to the logit of ``token`` (minus that of ``baseline_token``) at
    ``pos``. ``token``/``baseline_token`` follow interp's one target policy (:func:`interp.core.inputs.target_id`):
    a string of several tokens is scored by its first token, with a warning; the result names the token scored."""
    tgt = target_id(model, token, what="token")
    base = None if baseline_token is None else target_id(model, baseline_token, what="baseline")
    tid, bid = tgt.id, (None if base is None else base.id)
    if bid is not None and bid == tid:
        raise ValueError(f"baseline {baseline_token!r} is the same token as {token!r} (id {tid}, {tgt.token!r}); "
                         "a logit difference needs two different tokens")
    toks = one_text(model, text)
    pos = check_pos(pos, toks.shape[1])
    store, learned_pos, logits = _capture_parts(model, toks, pos, need_logits=True)
    dec = _decomposition(model, toks, pos, store, learned_pos)

    cols = model.module.W_U[:, [tid] if bid is None else [tid, bid]].detach().to("cpu", torch.float64)
    u = cols[:, 0] - (cols[:, 1] if bid is not None else 0)
    g, rem, scale, centred = frozen_norm_direction(model, dec.resid, u)
    b_U = model.b_U
    if b_U is not None:
        rem += float(b_U[tid] - (b_U[bid] if bid is not None else 0))

    def contrib(parts: torch.Tensor) -> torch.Tensor:
        p = parts.double()
        if centred:
            p = p - p.mean(-1, keepdim=True)
        return p @ g

    model_value = float(logits[tid] - (logits[bid] if bid is not None else 0))
    return DLAResult(decomposition=dec, token=tgt.label, token_id=tid, baseline=None if base is None else base.label,
                     baseline_id=bid, contributions=contrib(dec.parts), layer_contributions=contrib(dec.layer_parts),
                     remainder=rem, scale=scale, model_value=model_value, norm=model.norm or "none",
                     scored_token=tgt.token, baseline_scored_token=None if base is None else base.token)


@dataclass(repr=False)
class DLAResult(Result):
    decomposition: Decomposition
    token: str
    token_id: int
    baseline: str | None
    baseline_id: int | None
    contributions: torch.Tensor  # [n_head_parts] float64, aligned with decomposition.labels
    layer_contributions: torch.Tensor  # [n_layer_parts] float64, aligned with decomposition.layer_labels
    remainder: float  # final-norm bias . u (+ unembedding bias difference); 0 for RMSNorm without b_U
    scale: float  # the frozen final-norm scale s
    model_value: float  # the model's own logit (difference) from the same forward
    norm: str = ""
    # text of the tokens actually scored (differ from token / baseline when a multi-token string is scored by its
    # first token); None -> the same as token / baseline
    scored_token: str | None = None
    baseline_scored_token: str | None = None

    def __post_init__(self):
        if self.scored_token is None:
            self.scored_token = self.token
        if self.baseline_scored_token is None:
            self.baseline_scored_token = self.baseline

    @property
    def what(self) -> str:
        """The quantity attributed, naming the tokens scored (and the text given, where only its first token was
        scored)."""
        return _logit_of(self.token, self.scored_token) + (
            f" - {_logit_of(self.baseline, self.baseline_scored_token)}" if self.baseline is not None else "")

    def total(self, level: str = "layer") -> float:
        """Sum of contributions plus the remainder: equals ``model_value`` up to float rounding."""
        c = self.contributions if level == "head" else self.layer_contributions
        return float(c.sum()) + self.remainder

    def head_matrix(self) -> torch.Tensor:
        """[n_layers, n_heads] direct contribution of each attention head."""
        d = self.decomposition
        out = torch.zeros(d.n_layers, d.n_heads, dtype=torch.float64)
        for c, kind, layer, head in zip(self.contributions, d.kinds, d.layers, d.heads):
            if kind == "head":
                out[layer, head] = c
        return out

    def embedding_share(self) -> dict[str, float]:
        """The input embedding's direct path (token + learned position embedding): its contribution, its
        fraction of the logit (difference) and its share of all direct attribution mass (sum of |c|)."""
        d = self.decomposition
        c = self.layer_contributions
        emb = float(sum(c[i] for i, k in enumerate(d.layer_kinds) if k in ("embed", "pos_embed")))
        mass = float(c.abs().sum()) + abs(self.remainder)
        rank = 1 + int((c.abs() > abs(emb)).sum())
        return {"contribution": emb, "fraction_of_value": emb / self.model_value if self.model_value else float("nan"),
                "abs_share": abs(emb) / mass if mass else float("nan"), "rank_by_abs": rank,
                "n_components": len(c)}

    def top(self, n: int = 10, level: str = "head") -> list[tuple[str, float]]:
        """The ``n`` components with the largest |contribution|."""
        labels = self.decomposition.labels if level == "head" else self.decomposition.layer_labels
        c = self.contributions if level == "head" else self.layer_contributions
        order = c.abs().argsort(descending=True)[:n]
        return [(labels[i], float(c[i])) for i in order]

    def to_frame(self, level: str = "layer"):
        """One row per component (plus the norm's ``remainder`` row): contribution and share of |mass|."""
        import pandas as pd

        d = self.decomposition
        labels, kinds, layers, _ = d._level(level)
        c = (self.contributions if level == "head" else self.layer_contributions).tolist()
        rows = {"component": list(labels) + ["remainder"], "kind": list(kinds) + ["remainder"],
                "layer": list(layers) + [None], "contribution": c + [self.remainder]}
        if level == "head":
            rows["head"] = list(d.heads) + [None]
        f = pd.DataFrame(rows)
        f["abs_share"] = f["contribution"].abs() / f["contribution"].abs().sum()
        return f.set_index("component")

    def summary(self) -> str:
        e = self.embedding_share()
        top = ", ".join(f"{lab} {v:+.2f}" for lab, v in self.top(3))
        return (f"DLA of {self.what} at {self.decomposition.str_tokens[self.decomposition.pos]!r}: "
                f"{self.model_value:.3f} (sum of parts {self.total():.3f}); top {top}; embedding direct path "
                f"{e['contribution']:+.3f} ({e['abs_share']:.1%} of |attribution|)")

    def to_json(self) -> dict:
        """The value, its sum of parts, every layer-level and head contribution, the top components, the embedding's
        direct path, and the tokens actually scored."""
        d = self.decomposition
        return jsonable({
            "result": type(self).__name__, "summary": self.summary(), "what": self.what,
            "token": self.token, "token_id": self.token_id, "scored_token": self.scored_token,
            "baseline": self.baseline, "baseline_id": self.baseline_id,
            "baseline_scored_token": self.baseline_scored_token,
            "position": d.pos, "position_token": d.str_tokens[d.pos],
            "value": self.model_value, "sum_of_parts": self.total(), "remainder": self.remainder,
            "norm": self.norm, "frozen_scale": self.scale,
            "layers": dict(zip(d.layer_labels, self.layer_contributions.tolist())),
            "heads": self.head_matrix().tolist(),
            "top": [{"component": lab, "contribution": v} for lab, v in self.top(10)],
            "embedding": self.embedding_share()})

    def plot(self, *, out=None):
        """Bar plot: direct contribution of each layer-level component (and the norm remainder)."""
        f = self.to_frame("layer")
        fig = new_figure(figsize=(max(6, 0.22 * len(f) + 2), 4))
        ax = fig.add_subplot(1, 1, 1)
        ax.bar(range(len(f)), f["contribution"], color=[_COLORS.get(k, "gray") for k in f["kind"]])
        ax.axhline(0, color="black", lw=0.5)
        _component_ticks(ax, list(f.index))
        ax.set_ylabel(f"direct contribution to {self.what}")
        ax.set_title(f"direct logit attribution ({self.decomposition.source}): total {self.model_value:.2f}",
                     fontsize=10)
        return save_fig(fig, out)

    def view(self):
        """Interactive view: the per-head heatmap and the per-layer bars with hover values, the embedding's
        direct path marked."""
        from .attribution_view import dla_view

        return dla_view(self)

    def plot_heads(self, *, out=None):
        """Heatmap layer x head of each head's direct contribution (diverging, centred at 0)."""
        m = self.head_matrix().numpy()
        lim = max(abs(m).max(), 1e-9)
        fig = new_figure(figsize=(1.5 + 0.5 * m.shape[1], 1.5 + 0.22 * m.shape[0]))
        ax = fig.add_subplot(1, 1, 1)
        im = ax.imshow(m, aspect="auto", origin="lower", cmap="RdBu", vmin=-lim, vmax=lim)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_xticks(range(m.shape[1]))
        ax.set_title(f"per-head DLA of {self.what}", fontsize=10)
        fig.colorbar(im, ax=ax, fraction=0.05)
        return save_fig(fig, out)


def _logit_of(label: str, scored: str) -> str:
    return f"logit({scored!r})" if label == scored else f"logit({scored!r}, first token of {label!r})"
