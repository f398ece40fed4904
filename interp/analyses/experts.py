"""Mixture-of-experts analyses: ``interp.experts.routing``, ``expert_load``, ``expert_neurons``, ``ablate``.

On a model whose MLPs are routed mixtures (``interp.load_tiny("mixtral")``, ``"olmoe"``; see
:mod:`interp.core.moe`):

- ``routing(model, text)`` — per layer and token, the router's probabilities over the experts (softmax of its
  logits), the ``top_k`` experts chosen and their mixture weights;
- ``expert_load(model, docs)`` — how many tokens of a corpus each expert of each layer receives (padding never
  counts), with the router's mean probability per expert;
- ``expert_neurons(model, layer, expert, docs)`` — top-k max-activating contexts of one expert's neurons
  (``act(gate x) * up x``), over the tokens the router sent to that expert only: a neuron of an expert that did
  not run on a token has no activation there;
- ``ablate(model, text, target, layer, experts)`` — the change of a target logit when experts are removed from
  every token's mixture (their router weights set to 0, the others kept).

``interp.decompose`` splits each routed MLP into per-expert parts that sum to its output. ROME does not apply
(``rome.edit`` says why).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..core import moe
from ..core.corpus import documents, token_batches
from ..core.hooks import capture
from ..core.inputs import check_int, check_pos, one_text, target_id
from ..core.progress import bar
from ..core.results import Result, new_figure, save_fig
from .neurons import NeuronScan
from .topk import TopK


def _router_keep(shape):
    """Keep-function putting flattened router tensors [batch * pos, ...] back into [batch, pos, ...]."""
    def keep(name, t):
        t = t.detach().to("cpu", torch.float32)
        return t.reshape(*shape, *t.shape[1:]) if ".gate." in name else t
    return keep


# ---------------------------------------------------------------------------------------------- routing
@dataclass(repr=False)
class Routing(Result):
    probs: torch.Tensor  # [n_layers, pos, n_experts]: softmax of the router logits
    weights: torch.Tensor  # [n_layers, pos, n_experts]: mixture weight of each expert (0 = not chosen)
    chosen: torch.Tensor  # [n_layers, pos, top_k] expert ids
    str_tokens: list[str]
    source: str = ""

    def to_frame(self):
        import pandas as pd

        rows = []
        for layer in range(self.probs.shape[0]):
            for p, tok in enumerate(self.str_tokens):
                ids = self.chosen[layer, p].long().tolist()
                rows.append({"layer": layer, "pos": p, "token": tok, "experts": ids,
                             "weights": [round(float(self.weights[layer, p, e]), 4) for e in ids],
                             "top_prob": float(self.probs[layer, p].max())})
        return pd.DataFrame(rows).set_index(["layer", "pos"])

    def summary(self) -> str:
        L, P, E = self.probs.shape
        return (f"routing of {P} tokens through {L} layers of {E} experts ({self.chosen.shape[-1]} chosen per "
                f"token; {self.source})")

    def plot(self, *, out=None, layer: int = 0):
        """Router probabilities of one layer: tokens down, experts across; the chosen ones marked."""
        probs = self.probs[layer]
        fig = new_figure(figsize=(2 + 0.5 * probs.shape[1], 1.5 + 0.3 * probs.shape[0]))
        ax = fig.add_subplot(1, 1, 1)
        im = ax.imshow(probs.numpy(), aspect="auto", cmap="Purples", vmin=0, vmax=1)
        for p in range(probs.shape[0]):
            for e in self.chosen[layer, p].long().tolist():
                ax.text(e, p, "x", ha="center", va="center", fontsize=8, color="black")
        ax.set_yticks(range(len(self.str_tokens)), [repr(t)[1:-1][:10] for t in self.str_tokens], fontsize=7)
        ax.set_xlabel("expert (x = chosen)")
        ax.set_title(f"router probabilities, layer {layer}", fontsize=10)
        fig.colorbar(im, ax=ax, fraction=0.05)
        return save_fig(fig, out)


def routing(model, text) -> Routing:
    """The router's view of every token of ``text`` in every layer (one forward, stopped after the last router)."""
    moe.check_moe(model, "routing")
    toks = one_text(model, text)
    names = [moe.hooks(layer)[k] for layer in range(model.n_layers) for k in ("logits", "weights", "indices")]
    store, _ = capture(model, toks, names, keep=_router_keep(toks.shape), stop=True, description="routing")

    def stack(kind):
        return torch.stack([store[moe.hooks(layer)[kind]][0] for layer in range(model.n_layers)])

    return Routing(probs=stack("logits").softmax(-1), weights=stack("weights"), chosen=stack("indices").long(),
                   str_tokens=model.to_str_tokens(toks), source=model.source)


# ---------------------------------------------------------------------------------------------- load
@dataclass(repr=False)
class ExpertLoad(Result):
    counts: torch.Tensor  # [n_layers, n_experts] tokens routed to each expert
    prob_sums: torch.Tensor  # [n_layers, n_experts] summed router probabilities
    n_tokens: int
    top_k: int
    source: str = ""

    @property
    def share(self) -> torch.Tensor:
        """[n_layers, n_experts] share of the routing slots (each token fills ``top_k``); rows sum to 1."""
        return self.counts / (self.n_tokens * self.top_k)

    def to_frame(self):
        import pandas as pd

        rows = [{"layer": layer, "expert": e, "tokens": int(self.counts[layer, e]),
                 "share": float(self.share[layer, e]), "mean_prob": float(self.prob_sums[layer, e] / self.n_tokens)}
                for layer in range(self.counts.shape[0]) for e in range(self.counts.shape[1])]
        return pd.DataFrame(rows).set_index(["layer", "expert"])

    def summary(self) -> str:
        s = self.share
        return (f"expert load over {self.n_tokens} tokens ({self.source}): share of routing slots per expert "
                f"{float(s.min()):.3f}..{float(s.max()):.3f} (uniform {1 / s.shape[1]:.3f})")

    def plot(self, *, out=None):
        fig = new_figure(figsize=(2 + 0.5 * self.counts.shape[1], 1.5 + 0.35 * self.counts.shape[0]))
        ax = fig.add_subplot(1, 1, 1)
        im = ax.imshow(self.share.numpy(), aspect="auto", origin="lower", cmap="viridis")
        ax.set_xlabel("expert")
        ax.set_ylabel("layer")
        ax.set_title(f"share of tokens routed to each expert ({self.n_tokens} tokens)", fontsize=10)
        fig.colorbar(im, ax=ax, fraction=0.05)
        return save_fig(fig, out)


def expert_load(model, docs=None, *, n_docs: int | None = None, batch_size: int = 8, max_len: int = 128,
                progress: bool = False) -> ExpertLoad:
    """Tokens routed to each expert of each layer over ``docs`` (default: Wikipedia summaries; BOS counts, padding
    never does)."""
    moe.check_moe(model, "expert_load")
    docs = documents(docs, n_docs, default=200)
    E, L = moe.n_experts(model), model.n_layers
    counts, probs, n = torch.zeros(L, E, dtype=torch.int64), torch.zeros(L, E, dtype=torch.float64), 0
    names = [moe.hooks(layer)[k] for layer in range(L) for k in ("logits", "indices")]
    shown = bar(total=len(docs), desc="expert load", enabled=progress, unit="doc")
    for toks, mask, idx in token_batches(model, docs, max_len=max_len, batch_size=batch_size):
        store, _ = capture(model, toks, names, keep=_router_keep(toks.shape), stop=True, description="expert load")
        for layer in range(L):
            h = moe.hooks(layer)
            chosen = store[h["indices"]].long()[mask]  # [real tokens, top_k]
            counts[layer] += torch.bincount(chosen.flatten(), minlength=E)
            probs[layer] += store[h["logits"]].softmax(-1)[mask].double().sum(0)
        n += int(mask.sum())
        shown.update(len(idx))
    shown.close()
    return ExpertLoad(counts=counts, prob_sums=probs, n_tokens=n, top_k=moe.top_k(model), source=model.source)


# ---------------------------------------------------------------------------------------------- neurons
class ExpertTopK(TopK):
    """:class:`TopK` over one expert's neurons, counting only the tokens the router sent to that expert."""

    def bind(self, model, expert: int) -> ExpertTopK:
        self.model, self.expert = model, expert
        return self

    @property
    def hook_names(self) -> list[str]:
        h = moe.hooks(self.layer)
        return [h["input"], h["indices"]]

    def keep(self, name, t, batch):
        return t.detach().reshape(*batch.tokens.shape, -1) if ".gate." in name else t.detach()

    def add(self, batch, acts: dict) -> None:
        h = moe.hooks(self.layer)
        hidden = moe.expert_hidden(self.model, self.layer, acts[h["input"]], self.expert)
        routed = (acts[h["indices"]].long() == self.expert).any(-1).to(batch.mask.device)
        self.update(hidden, batch.mask & routed, batch.doc_ids, batch.tokens)


def expert_neurons(model, layer: int, expert: int, docs=None, *, n_docs: int | None = None, k: int = 10,
                   batch_size: int = 8, max_len: int = 128, progress: bool = False) -> NeuronScan:
    """Top-``k`` contexts of each neuron of ``expert`` in ``layer``, over the tokens routed to it (BOS left out).
    Returns a :class:`~interp.analyses.neurons.NeuronScan` (``.top_neurons()``, ``.contexts(n)``, ``.plot()``)."""
    from .accumulate import scan

    moe.check_moe(model, "expert_neurons")
    layer, expert = model.check_layer(layer), moe.check_expert(model, expert)
    check_int("k", k, 1)
    docs = documents(docs, n_docs, default=200)
    state = ExpertTopK.empty(layer, k, range(model.d_mlp), device=model.device_of(layer)).bind(model, expert)
    scan(model, docs, state, batch_size=batch_size, max_len=max_len, progress=progress,
         desc=f"expert {expert} L{layer}")
    plain = TopK(state.values, state.doc, state.pos, state.token, state.neurons, state.docs_seen,
                 n_tokens=state.n_tokens, layer=layer, skip_bos=state.skip_bos).to("cpu")
    return NeuronScan.from_state(model, plain, docs, max_len=max_len)


# ---------------------------------------------------------------------------------------------- ablation
@dataclass(repr=False)
class ExpertAblation(Result):
    layer: int
    target: str
    target_id: int
    pos: int
    rows: list  # {"experts", "clean_logit", "ablated_logit", "delta"}

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame([{**r, "experts": ",".join(map(str, r["experts"]))} for r in self.rows]
                            ).set_index("experts")

    def summary(self) -> str:
        worst = min(self.rows, key=lambda r: r["delta"])
        return (f"ablating experts of layer {self.layer}: logit of {self.target!r} at pos {self.pos} "
                f"{worst['clean_logit']:.3f}; largest drop {worst['delta']:+.3f} (experts {worst['experts']})")

    def plot(self, *, out=None):
        fig = new_figure(figsize=(6, 0.35 * len(self.rows) + 1.5))
        ax = fig.add_subplot(1, 1, 1)
        deltas = [r["delta"] for r in self.rows]
        ax.barh(range(len(deltas)), deltas, color=["C3" if d < 0 else "C2" for d in deltas])
        ax.set_yticks(range(len(deltas)), [f"E{r['experts']}" for r in self.rows], fontsize=8)
        ax.axvline(0, color="grey", lw=0.5)
        ax.set_xlabel(f"change in logit of {self.target!r}")
        return save_fig(fig, out)


def ablate(model, text, target, layer: int, experts: Sequence[int] | int | None = None, *,
           pos: int = -1) -> ExpertAblation:
    """Change of the ``target`` logit at ``pos`` when each expert in ``experts`` (default: every expert, one at a
    time) is removed from ``layer``'s mixture; a list of lists ablates those groups together."""
    moe.check_moe(model, "ablating experts")
    layer = model.check_layer(layer)
    groups = [[e] for e in range(moe.n_experts(model))] if experts is None else (
        [[experts]] if isinstance(experts, int) else [g if isinstance(g, (list, tuple)) else [g] for g in experts])
    toks = one_text(model, text)
    p = check_pos(pos, toks.shape[1])
    scored = target_id(model, target)
    clean = float(model.run(toks)[0, p, scored.id])
    rows = []
    for g in groups:
        with model.hooks(moe.ablate_experts(model, layer, list(g)), description=f"ablate experts L{layer} {g}"):
            out = float(model.run(toks)[0, p, scored.id])
        rows.append({"experts": list(g), "clean_logit": clean, "ablated_logit": out, "delta": out - clean})
    return ExpertAblation(layer=layer, target=scored.token, target_id=scored.id, pos=p, rows=rows)
