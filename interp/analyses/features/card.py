"""A feature's card: where it fires over a corpus (top contexts), how often and how strongly (density, histogram),
and what its decoder writes toward (promoted / suppressed tokens).

The corpus statistics are one accumulator, :class:`FeatureScan`, on the accumulator protocol of
:mod:`interp.analyses.accumulate`: it streams through ``accumulate.scan`` (one forward per batch, stopped at the
dictionary's input), merges exactly across shards (the top contexts are the neuron scan's :class:`TopK`, the counts
and histogram are sums) and reduces over ``interp.dist`` ranks. Statistics count real non-BOS tokens only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ...core.results import Result, jsonable, new_figure, save_fig
from ...core.texts import render, text_documents
from ..accumulate import Accumulator, scan
from ..topk import TopK
from .dictionary import Dictionary
from .use import as_set, promoted_tokens

BINS = torch.logspace(-3, 3, 37)  # activation histogram edges (log-spaced; below 1e-3 is the first bin)


class FeatureScan(Accumulator):
    """Top-k contexts (``topk``), firing counts ``fires`` [F] and histograms ``hist`` [F, bins] of the tracked
    features of one dictionary, over ``n_tokens`` counted tokens."""

    reduction = "merge"

    def __init__(self, d: Dictionary, topk: TopK, fires: torch.Tensor, hist: torch.Tensor, n_tokens: int = 0):
        self.d, self.topk, self.fires, self.hist, self.n_tokens = d, topk, fires, hist, int(n_tokens)

    @classmethod
    def empty(cls, d: Dictionary, features=None, k: int = 20) -> "FeatureScan":
        feats = list(range(d.width)) if features is None else [int(f) for f in features]
        bad = [f for f in feats if not 0 <= f < d.width]
        if bad:
            raise ValueError(f"features {bad[:5]}; allowed: 0..{d.width - 1}")
        layer = d.site.layer if d.site and d.site.layer is not None else -1
        return cls(d, TopK.empty(layer, k, feats), torch.zeros(len(feats), dtype=torch.int64),
                   torch.zeros(len(feats), len(BINS) + 1, dtype=torch.int64))

    @property
    def hook_names(self) -> list[str]:
        return [self.d.site.read]

    @property
    def features(self) -> list[int]:
        return self.topk.neurons.tolist()

    def keep(self, name, t, batch):
        with torch.no_grad():
            return self.d.encode(t.detach().float().cpu())      # [b, pos, width]

    def add(self, batch, acts: dict) -> None:
        (a,) = acts.values()
        self.topk.update(a, batch.mask, batch.doc_ids, batch.tokens)
        a = a if self.topk._tracks_all(a.shape[-1]) else a[..., self.topk.neurons]
        v = a[batch.counted]                                    # [n, F]
        self.fires += (v > 0).sum(0)
        pos = v > 0
        bins = torch.bucketize(v, BINS)                         # [n, F]
        cols = torch.arange(v.shape[1]).expand_as(v)
        self.hist.index_put_((cols[pos], bins[pos]), torch.ones(int(pos.sum()), dtype=torch.int64), accumulate=True)
        self.n_tokens += int(batch.counted.sum())

    def merge(self, other: "FeatureScan") -> "FeatureScan":
        return FeatureScan(self.d, self.topk.merge(other.topk), self.fires + other.fires, self.hist + other.hist,
                           self.n_tokens + other.n_tokens)

    def state_dict(self) -> dict:
        st = self.topk.state_dict()
        tensors = {**{f"topk.{k}": v for k, v in st["tensors"].items()}, "fires": self.fires, "hist": self.hist,
                   "scan_tokens": torch.tensor([self.n_tokens])}
        return {"tensors": tensors, "meta": {"topk": st["meta"], "dictionary": self.d.config()}}

    @classmethod
    def from_state_dict(cls, state: dict, d: Dictionary | None = None) -> "FeatureScan":
        t = state["tensors"]
        topk = TopK.from_state_dict({"tensors": {k[5:]: v for k, v in t.items() if k.startswith("topk.")},
                                     "meta": state["meta"]["topk"]})
        if d is None:
            raise ValueError("give the dictionary the scan was made with (d=...)")
        return cls(d, topk, t["fires"], t["hist"], int(t["scan_tokens"].reshape(-1)[0]))


def scan_features(model, dictionaries, key, features=None, *, docs=None, split: str = "heldout",
                  n_tokens: int = 100_000, k: int = 20, max_len: int = 256, progress: bool = False) -> FeatureScan:
    """Stream ``docs`` (default: the ``split`` of the training text, rendered) through the model into a
    :class:`FeatureScan` of dictionary ``key`` (every feature unless ``features``), ``n_tokens`` counted tokens."""
    ds = as_set(dictionaries).check(model)
    d = ds[key]
    docs = [render(model, x) for x in text_documents(split, seed=None)] if docs is None else list(docs)
    acc = FeatureScan.empty(d, features, k)
    return scan(model, docs, acc, max_len=max_len, n_tokens=n_tokens, progress=progress, desc=f"scan {key}")


@dataclass(repr=False)
class FeatureCard(Result):
    """One feature: ``contexts`` (a frame: rank, activation, doc, pos, token, context), ``density`` (fraction
    of counted tokens it fires on), ``hist`` counts over :data:`BINS`, ``vocab`` (promoted / suppressed)."""

    key: object
    feature: int
    contexts: object
    density: float
    hist: list
    vocab: dict
    n_tokens: int
    strips: list = field(default_factory=list)  # per context: tokens, positions, acts around it (for the view)
    meta: dict = field(default_factory=dict)

    def to_frame(self):
        return self.contexts

    @property
    def bins(self) -> list:
        """The histogram's bin edges (:data:`BINS`)."""
        return BINS.tolist()

    def view(self):
        from .features_view import card_view

        return card_view(self)

    def summary(self) -> str:
        top = self.contexts["token"].head(5).tolist() if len(self.contexts) else []
        return (f"feature {self.feature} at {_name(self.key)}: fires on {self.density:.3%} of {self.n_tokens:,} tokens; "
                f"top tokens {top}; promotes {[t for t, _ in self.vocab['promoted'][:5]]}")

    def to_json(self) -> dict:
        return {**super().to_json(), "key": self.key, "feature": self.feature, "density": self.density,
                "hist": self.hist, "bins": BINS.tolist(), "vocab": jsonable(self.vocab), "n_tokens": self.n_tokens}

    def plot(self, *, out=None):
        from ..attention import token_label

        fig = new_figure(figsize=(11, 3.4))
        ax1, ax2, ax3 = fig.subplots(1, 3)
        centers = [1e-3 / 2 ** 0.5] + [math.sqrt(a * b) for a, b in zip(BINS[:-1].tolist(), BINS[1:].tolist())] \
            + [BINS[-1].item() * 2 ** 0.5]
        ax1.bar(range(len(self.hist)), self.hist, color="C0")
        ticks = list(range(0, len(centers), 6))
        ax1.set_xticks(ticks, [f"{centers[i]:.0e}" for i in ticks], fontsize=7)
        ax1.set_xlabel("activation (log bins)")
        ax1.set_ylabel("tokens")
        ax1.set_title(f"density {self.density:.3%}", fontsize=9)
        for ax, name, color in ((ax2, "promoted", "C2"), (ax3, "suppressed", "C3")):
            items = self.vocab[name]
            ax.barh(range(len(items)), [v for _, v in items], color=color)
            ax.set_yticks(range(len(items)), [token_label(t) for t, _ in items], fontsize=7)
            ax.invert_yaxis()
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("logit per unit")
        fig.suptitle(f"feature {self.feature} at {_name(self.key)}", fontsize=9)
        return save_fig(fig, out)


def _name(key) -> str:
    return f"layer {key}" if isinstance(key, int) else str(key)


def feature_card(model, dictionaries, key, feature: int, *, docs=None, split: str = "heldout",
                 n_tokens: int = 100_000, k: int = 20, scan_state: FeatureScan | None = None,
                 progress: bool = False) -> FeatureCard:
    """The card of ``feature`` of dictionary ``key`` (a scan is run unless ``scan_state`` already tracks it)."""
    from ..neurons import NeuronScan

    ds = as_set(dictionaries).check(model)
    d = ds[key]
    docs = [render(model, x) for x in text_documents(split, seed=None)] if docs is None else list(docs)
    st = scan_state
    if st is None or feature not in st.features:
        st = scan_features(model, ds, key, [feature], docs=docs, n_tokens=n_tokens, k=k, progress=progress)
    i = st.features.index(feature)
    one = TopK(st.topk.values[i:i + 1], st.topk.doc[i:i + 1], st.topk.pos[i:i + 1], st.topk.token[i:i + 1],
               torch.tensor([feature]), st.topk.docs_seen, n_tokens=st.topk.n_tokens, layer=st.topk.layer,
               skip_bos=st.topk.skip_bos)
    frame = NeuronScan.from_state(model, one, docs, max_len=256).to_frame().rename(columns={"neuron": "feature"})
    frame = frame.drop(columns=["title"], errors="ignore")
    return FeatureCard(key, feature, frame, float(st.fires[i]) / max(st.n_tokens, 1), st.hist[i].tolist(),
                       promoted_tokens(model, d, feature), st.n_tokens, _strips(model, d, feature, one, docs))


def _strips(model, d: Dictionary, feature: int, one: TopK, docs, before: int = 10, after: int = 3) -> list:
    """Each top context's tokens with the feature's activation at every one of them (one forward per document,
    stopped at the dictionary's input; documents cut as the scan cut them)."""
    from ...core.hooks import capture

    out, acts = [], {}
    for r in range(one.k):
        doc, pos = int(one.doc[0, r]), int(one.pos[0, r])
        if doc < 0:
            break
        ids = [model.bos_token_id] + model.encode(docs[doc] if isinstance(docs[doc], str) else docs[doc].text,
                                                  prepend_bos=False)
        ids = ids[:256][: pos + after + 1]
        if doc not in acts or acts[doc].shape[0] < len(ids):
            store, _ = capture(model, torch.tensor([ids]).to(model.device), [d.site.read], stop=True,
                               description="feature card")
            with torch.no_grad():
                acts[doc] = d.encode(store[d.site.read][0].float().cpu())[:, feature]
        lo = max(1, pos - before)
        out.append({"doc": doc, "pos": pos, "value": float(one.values[0, r]), "positions": list(range(lo, len(ids))),
                    "tokens": [model.tokenizer.decode([t]) for t in ids[lo:]], "acts": acts[doc][lo:len(ids)].tolist()})
    return out
