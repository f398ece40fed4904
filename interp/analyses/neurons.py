"""FFN neurons of one layer: ``interp.neurons(model, layer)``.

A *neuron* is one coordinate of the hidden vector that multiplies the MLP's down projection,
``blocks.{layer}.mlp.hook_post``: ``act(gate) * up`` on gated MLPs (SmolLM2, Llama), ``act(pre)`` on GPT-2.
Neuron ``n`` writes ``activation * W_out[:, n]`` into the residual stream (``model.mlp_out_matrix(layer)[:, n]``).

``neurons(model, layer)`` returns a :class:`Neurons` view with

- ``activations(text)``   — every neuron's activation at every token (plot over tokens),
- ``scan(docs, k=10)``    — streaming top-k max-activating contexts per neuron over a corpus,
- ``vocab(neuron)``       — the neuron's output row through the unembedding: tokens it promotes / suppresses,
- ``ablate(text, target, neurons)`` — effect of zero/mean-ablating neurons on a target logit.

The scan keeps its running state in a :class:`TopK` accumulator of plain tensors. Entries are ordered by
(activation descending, document id ascending, position ascending) — a total order, so ties are broken
deterministically and ``A.merge(B)`` equals the scan of A+B in one go, exactly. Shards of a corpus can therefore be
scanned in separate processes (``doc_offset`` gives global document ids), saved with ``save()`` (safetensors) and
merged. Bit-identical activations are needed for bit-identical merges: split a corpus at a multiple of
``batch_size`` so each document is run in the same padded batch in both cases.

Speed and memory: the scan hooks only ``mlp.hook_post`` of its layer and stops the forward pass right there
(``StopForward``), so later layers and the unembedding are never computed; it holds one batch of that one layer's
activations ([batch, pos, d_mlp]) plus the [d_mlp, k] state, never a cache.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..core.results import Result, new_figure, save_fig
from .attention import as_int
from ..core.hooks import StopForward

DEFAULT_DOCS = 500
_INT64_MAX = torch.iinfo(torch.int64).max


# ============================================================================================ top-k accumulator
class TopK:
    """Mergeable running top-k per neuron. State (all plain tensors, CPU or the model's device):

    values [n, k] float32 (-inf in empty slots) · doc [n, k] int64 (-1 empty) · pos [n, k] int64 · token [n, k]
    int64 · neurons [n] int64 (the layer's neuron indices tracked) · docs_seen [d] int64 sorted — plus n_tokens,
    layer and skip_bos (1-element int64 tensors in ``state_dict()``); k is ``values.shape[1]``.

    Rows are kept sorted by (value desc, doc asc, pos asc)."""

    def __init__(self, values, doc, pos, token, neurons, docs_seen, *, n_tokens: int, layer: int, skip_bos: bool):
        self.values, self.doc, self.pos, self.token = values, doc, pos, token
        self.neurons, self.docs_seen = neurons, docs_seen
        self.n_tokens, self.layer, self.skip_bos = int(n_tokens), int(layer), bool(skip_bos)

    def _tracks_all(self, width: int) -> bool:
        if self.neurons.numel() != width:
            return False
        return torch.equal(self.neurons, torch.arange(width, device=self.neurons.device))

    @property
    def k(self) -> int:
        return self.values.shape[1]

    @classmethod
    def empty(cls, layer: int, k: int, neurons: Sequence[int], *, skip_bos: bool = True, device="cpu") -> TopK:
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"k={k!r} contexts per neuron; allowed: a positive integer")
        idx = torch.as_tensor(list(neurons), dtype=torch.int64, device=device)
        n = idx.numel()
        return cls(torch.full((n, k), -math.inf, device=device),
                   torch.full((n, k), -1, dtype=torch.int64, device=device),
                   torch.full((n, k), -1, dtype=torch.int64, device=device),
                   torch.full((n, k), -1, dtype=torch.int64, device=device),
                   idx, torch.zeros(0, dtype=torch.int64, device=device),
                   n_tokens=0, layer=layer, skip_bos=skip_bos)

    # -------------------------------------------------------------------------------------- streaming update
    def update(self, acts: torch.Tensor, mask: torch.Tensor, doc_ids: torch.Tensor, tokens: torch.Tensor) -> None:
        """Fold in one batch. acts [b, pos, d_mlp] (the layer's hook_post), mask [b, pos] bool (False = padding),
        doc_ids [b] strictly increasing global document ids, tokens [b, pos]."""
        b, p, _ = acts.shape
        dev = self.values.device
        doc_ids = torch.as_tensor(doc_ids, dtype=torch.int64, device=dev)
        if b > 1 and not bool((doc_ids[1:] > doc_ids[:-1]).all()):
            raise ValueError("doc_ids within a batch must be strictly increasing (they define the tie-break)")
        if self.docs_seen.numel() and bool(torch.isin(doc_ids, self.docs_seen).any()):
            raise ValueError("some documents of this batch were already scanned by this accumulator")
        valid = mask.to(dev).clone()
        if self.skip_bos:
            valid[:, 0] = False
        x = acts.detach().to(dev, torch.float32).reshape(b * p, -1)  # [P, d_mlp], a view: never written to
        if not self._tracks_all(x.shape[1]):
            x = x[:, self.neurons]
        x = torch.where(valid.reshape(-1, 1), x, -math.inf)
        vals, flat = _batch_topk(x, self.k)  # [n, k]: the exact top set under the order, flat [b * pos] indices
        empty = vals == -math.inf
        row, pos = flat // p, flat % p
        # index_select, not fancy indexing: the latter is parallelised and costs ~20 ms here for 15k elements
        doc = torch.where(empty, -1, doc_ids.index_select(0, row.flatten()).view_as(row))
        pos = torch.where(empty, -1, pos)
        tok = torch.where(empty, -1, tokens.to(dev).reshape(-1).index_select(0, flat.flatten()).view_as(flat))
        self._absorb(vals, doc, pos, tok)
        self.docs_seen = torch.cat([self.docs_seen, doc_ids]).sort().values
        self.n_tokens += int(valid.sum())

    def _absorb(self, vals, doc, pos, tok) -> None:
        cat = [torch.cat(pair, dim=1) for pair in ((self.values, vals), (self.doc, doc), (self.pos, pos),
                                                   (self.token, tok))]
        order = _lex_order(cat[0], cat[1], cat[2])[:, : self.k]
        self.values, self.doc, self.pos, self.token = (t.gather(1, order) for t in cat)

    # -------------------------------------------------------------------------------------- merge / save
    def merge(self, other: TopK) -> TopK:
        """The accumulator of both scans together (a new object; neither input changes). Exact."""
        if not isinstance(other, TopK):
            raise TypeError(f"can only merge another TopK, got {type(other).__name__}")
        for what, a, b in (("layer", self.layer, other.layer), ("k", self.k, other.k),
                           ("skip_bos", self.skip_bos, other.skip_bos)):
            if a != b:
                raise ValueError(f"cannot merge scans with different {what}: {a} vs {b}")
        if not torch.equal(self.neurons.cpu(), other.neurons.cpu()):
            raise ValueError("cannot merge scans of different neuron sets")
        o = other.to(self.values.device)
        if bool(torch.isin(o.docs_seen, self.docs_seen).any()):
            raise ValueError("the two scans share documents; merge only scans of disjoint documents")
        out = TopK(self.values, self.doc, self.pos, self.token, self.neurons,
                   torch.cat([self.docs_seen, o.docs_seen]).sort().values,
                   n_tokens=self.n_tokens + o.n_tokens, layer=self.layer, skip_bos=self.skip_bos)
        out._absorb(o.values, o.doc, o.pos, o.token)
        return out

    def to(self, device) -> TopK:
        t = [x.to(device) for x in (self.values, self.doc, self.pos, self.token, self.neurons, self.docs_seen)]
        return TopK(*t, n_tokens=self.n_tokens, layer=self.layer, skip_bos=self.skip_bos)

    def state_dict(self) -> dict[str, torch.Tensor]:
        sd = {"values": self.values, "doc": self.doc, "pos": self.pos, "token": self.token,
              "neurons": self.neurons, "docs_seen": self.docs_seen}
        sd = {k: v.detach().cpu().contiguous() for k, v in sd.items()}
        for k, v in (("n_tokens", self.n_tokens), ("layer", self.layer), ("skip_bos", int(self.skip_bos))):
            sd[k] = torch.tensor([v], dtype=torch.int64)
        return sd

    @classmethod
    def from_state_dict(cls, sd: dict[str, torch.Tensor]) -> TopK:
        need = ("values", "doc", "pos", "token", "neurons", "docs_seen", "n_tokens", "layer", "skip_bos")
        missing = [k for k in need if k not in sd]
        if missing:
            raise ValueError(f"state dict lacks {missing}; expected keys {list(need)}")
        shape = tuple(sd["values"].shape)
        if len(shape) != 2 or any(tuple(sd[k].shape) != shape for k in ("doc", "pos", "token")) \
                or tuple(sd["neurons"].shape) != shape[:1]:
            raise ValueError(f"inconsistent state shapes: values {shape}, neurons {tuple(sd['neurons'].shape)}")
        return cls(sd["values"].float(), sd["doc"].long(), sd["pos"].long(), sd["token"].long(), sd["neurons"].long(),
                   sd["docs_seen"].long(), n_tokens=int(sd["n_tokens"][0]), layer=int(sd["layer"][0]),
                   skip_bos=bool(sd["skip_bos"][0]))

    def save(self, path) -> None:
        from safetensors.torch import save_file

        save_file(self.state_dict(), str(path))

    @classmethod
    def load(cls, path) -> TopK:
        from safetensors.torch import load_file

        return cls.from_state_dict(load_file(str(path)))

    def equal(self, other: TopK) -> bool:
        a, b = self.state_dict(), other.state_dict()
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _batch_topk(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-k of each column of x [P, n] under (value desc, index asc) -> (values [n, k], index [n, k]).

    torch.topk picks arbitrarily among equal values. Asking it for k+1 shows where the k-th value is tied with an
    entry left out; only those columns are redone, with a key that packs (value, -index) into one int64."""
    P = x.shape[0]
    kk = min(k, P)
    vals, idx = x.topk(min(k + 1, P), dim=0)  # [kk(+1), n]
    if torch.isnan(vals[0]).any():
        raise ValueError("NaN activation in the scanned layer; the model produced NaNs on this batch")
    if vals.shape[0] > kk:
        # an all-padding tail (-inf) is dropped anyway, so its ties don't matter
        tied = (vals[kk] == vals[kk - 1]) & (vals[kk - 1] > -math.inf)
        vals, idx = vals[:kk], idx[:kk]
        if tied.any():
            cols = tied.nonzero().flatten()
            sub = x[:, cols]
            _, pick = _sort_key(sub).topk(kk, dim=0)
            idx[:, cols] = pick
            vals[:, cols] = sub.gather(0, pick)
    if kk < k:  # fewer positions than k: pad with empty slots
        pad = k - kk
        vals = torch.cat([vals, vals.new_full((pad, x.shape[1]), -math.inf)])
        idx = torch.cat([idx, idx.new_zeros((pad, x.shape[1]))])
    return vals.T, idx.T


def _sort_key(x: torch.Tensor) -> torch.Tensor:
    """int64 key of x [P, m] whose order is (value desc, row asc): float bits made monotone, row in the low bits."""
    bits = (x + 0.0).view(torch.int32).to(torch.int64)  # + 0.0 turns -0.0 into +0.0 (they compare equal)
    ordered = torch.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    rows = torch.arange(x.shape[0], device=x.device, dtype=torch.int64)[:, None]
    return ordered * (1 << 32) + ((1 << 32) - 1 - rows)


def _lex_order(values, doc, pos) -> torch.Tensor:
    """Per-row permutation sorting [n, m] entries by (value desc, doc asc, pos asc); empty slots (doc -1) last."""
    d = torch.where(doc < 0, _INT64_MAX, doc)
    order = torch.argsort(pos, dim=1, stable=True)
    order = order.gather(1, torch.argsort(d.gather(1, order), dim=1, stable=True))
    return order.gather(1, torch.argsort(values.gather(1, order), dim=1, descending=True, stable=True))


# ============================================================================================ results
@dataclass(repr=False)
class NeuronActivations(Result):
    acts: torch.Tensor  # [pos, n_neurons]
    neurons: list[int]
    str_tokens: list[str]
    layer: int

    def top(self, n: int = 5) -> list[int]:
        """Neurons with the largest activation anywhere in this text."""
        peak = self.acts.max(0).values
        order = sorted(range(len(self.neurons)), key=lambda i: (-float(peak[i]), self.neurons[i]))
        return [self.neurons[i] for i in order[:n]]

    def of(self, neuron: int) -> torch.Tensor:
        """[pos] activations of one neuron."""
        if neuron not in self.neurons:
            raise ValueError(f"neuron {neuron!r} not in this result; it holds {len(self.neurons)} neurons "
                             f"({self.neurons[0]}..{self.neurons[-1]})")
        return self.acts[:, self.neurons.index(neuron)]

    def to_frame(self, neurons=None):
        """Long table (pos, token, neuron, activation) for ``neurons`` (default: the 5 top neurons on this text)."""
        import pandas as pd

        shown = self.top(5) if neurons is None else ([neurons] if isinstance(neurons, int) else list(neurons))
        rows = [{"pos": p, "token": self.str_tokens[p], "neuron": n, "activation": float(self.of(n)[p])}
                for n in shown for p in range(len(self.str_tokens))]
        return pd.DataFrame(rows)

    def summary(self) -> str:
        return f"layer {self.layer}: {len(self.neurons)} neurons over {len(self.str_tokens)} tokens; top {self.top(3)}"

    def plot(self, neurons=None, out=None):
        """Activation over the tokens for ``neurons`` (default: the 5 top neurons on this text)."""
        from .attention import token_label

        shown = self.top(5) if neurons is None else ([neurons] if isinstance(neurons, int) else list(neurons))
        n = len(self.str_tokens)
        fig = new_figure(figsize=(min(16, 2 + 0.45 * n), 3.8))
        ax = fig.add_subplot(1, 1, 1)
        for nn in shown:
            ax.plot(range(n), self.of(nn).numpy(), marker="o", ms=3, label=f"L{self.layer}N{nn}")
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_xticks(range(n), [token_label(t) for t in self.str_tokens], rotation=90, fontsize=8)
        ax.set_ylabel("activation (mlp.hook_post)")
        ax.legend(fontsize=8)
        ax.set_title(f"layer {self.layer} neuron activations")
        return save_fig(fig, out)


@dataclass(repr=False)
class NeuronScan(Result):
    """Top-k max-activating contexts per neuron. ``state`` is the mergeable accumulator; ``docs`` maps the global
    document ids it refers to onto documents (title, text), used to render contexts."""

    state: TopK
    docs: dict
    tokenizer: object = field(default=None)
    max_len: int = 128
    bos_token_id: int = 0
    _encoded: dict = field(default_factory=dict)

    @classmethod
    def from_state(cls, model, state: TopK, docs: Sequence, *, doc_offset: int = 0, max_len: int = 128):
        """Result for an accumulator (e.g. merged from shards); ``docs[i]`` is document ``doc_offset + i``."""
        ids = sorted({int(d) for d in state.doc.flatten().tolist() if d >= 0})
        table = {}
        for i in ids:
            j = i - doc_offset
            if not 0 <= j < len(docs):
                raise ValueError(f"the scan refers to document {i}, outside the given docs "
                                 f"{doc_offset}..{doc_offset + len(docs) - 1}")
            table[i] = docs[j]
        return cls(state=state, docs=table, tokenizer=model.tokenizer, max_len=max_len,
                   bos_token_id=model.bos_token_id)

    @property
    def layer(self) -> int:
        return self.state.layer

    def _ids(self, doc_id: int) -> list[int]:
        if doc_id not in self._encoded:
            d = self.docs[doc_id]
            text = d if isinstance(d, str) else d.text
            ids = [self.bos_token_id] + list(self.tokenizer.encode(text, add_special_tokens=False))
            self._encoded[doc_id] = ids[: self.max_len]
        return self._encoded[doc_id]

    def context(self, doc_id: int, pos: int, token: int, before: int = 10, after: int = 3) -> str:
        """Snippet around (doc, pos) with the token marked [[like this]]."""
        ids = self._ids(doc_id)
        if pos >= len(ids) or ids[pos] != token:
            raise ValueError(f"document {doc_id} does not match the scan at position {pos}: were the same documents "
                             "(and doc_offset) passed?")
        dec = self.tokenizer.decode
        text = f"{dec(ids[max(1, pos - before):pos])}[[{dec([ids[pos]])}]]{dec(ids[pos + 1:pos + 1 + after])}"
        return text.replace("\n", " ")

    def _title(self, doc_id: int) -> str:
        d = self.docs[doc_id]
        return (None if isinstance(d, str) else getattr(d, "title", None)) or f"doc {doc_id}"

    def to_frame(self, neurons=None):
        """One row per (neuron, rank): neuron, rank, activation, doc, title, pos, token, context."""
        import pandas as pd

        st = self.state
        wanted = None if neurons is None else set([neurons] if isinstance(neurons, int) else neurons)
        rows = []
        for i, n in enumerate(st.neurons.tolist()):
            if wanted is not None and n not in wanted:
                continue
            for r in range(st.k):
                d = int(st.doc[i, r])
                if d < 0:
                    break
                p, t = int(st.pos[i, r]), int(st.token[i, r])
                rows.append({"neuron": n, "rank": r, "activation": float(st.values[i, r]), "doc": d,
                             "title": self._title(d), "pos": p, "token": self.tokenizer.decode([t]),
                             "context": self.context(d, p, t)})
        cols = ["neuron", "rank", "activation", "doc", "title", "pos", "token", "context"]
        return pd.DataFrame(rows, columns=cols)

    def top_neurons(self, n: int = 10):
        """Neurons ranked by their largest activation over the scan, each with its top context."""
        import pandas as pd

        st = self.state
        peak = st.values[:, 0]
        order = sorted(range(len(peak)), key=lambda i: (-float(peak[i]), int(st.neurons[i])))
        rows = []
        for i in order[:n]:
            d = int(st.doc[i, 0])
            if d < 0:
                continue
            p, t = int(st.pos[i, 0]), int(st.token[i, 0])
            rows.append({"neuron": int(st.neurons[i]), "max_activation": float(peak[i]),
                         f"mean_top{st.k}": float(st.values[i][st.doc[i] >= 0].mean()),
                         "token": self.tokenizer.decode([t]), "title": self._title(d),
                         "context": self.context(d, p, t)})
        return pd.DataFrame(rows)

    def summary(self) -> str:
        st = self.state
        return (f"layer {st.layer}: top-{st.k} contexts of {len(st.neurons)} neurons over "
                f"{st.docs_seen.numel()} documents ({st.n_tokens} tokens)")

    def plot(self, n: int = 10, out=None):
        """The ``n`` neurons with the largest peak activation: their top-k activations, labelled with the top token."""
        from .attention import token_label

        top = self.top_neurons(n)
        st = self.state
        fig = new_figure(figsize=(8, 0.45 * len(top) + 1.5))
        ax = fig.add_subplot(1, 1, 1)
        index = {int(v): i for i, v in enumerate(st.neurons.tolist())}
        for y, row in enumerate(top.itertuples()):
            vals = st.values[index[row.neuron]]
            vals = vals[vals > -math.inf].numpy()
            ax.scatter(vals, [y] * len(vals), s=12, color="C0", alpha=0.6)
            ax.barh(y, vals[0], color="C0", alpha=0.25)
        ax.set_yticks(range(len(top)), [f"N{r.neuron} {token_label(repr(r.token))}" for r in top.itertuples()],
                      fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(f"activation (top-{st.k} contexts; bar = max)")
        ax.set_title(self.summary(), fontsize=9)
        return save_fig(fig, out)


@dataclass(repr=False)
class VocabProjection(Result):
    layer: int
    neuron: int
    promoted: list  # [(token, id, value)]
    suppressed: list
    note: str

    def to_frame(self):
        import pandas as pd

        rows = [{"direction": "promoted", "rank": r, "token": t, "token_id": i, "logit_per_unit": v}
                for r, (t, i, v) in enumerate(self.promoted)]
        rows += [{"direction": "suppressed", "rank": r, "token": t, "token_id": i, "logit_per_unit": v}
                 for r, (t, i, v) in enumerate(self.suppressed)]
        return pd.DataFrame(rows)

    def summary(self) -> str:
        return (f"L{self.layer}N{self.neuron} promotes {[t for t, _, _ in self.promoted[:5]]}, "
                f"suppresses {[t for t, _, _ in self.suppressed[:5]]}")

    def plot(self, out=None):
        from .attention import token_label

        fig = new_figure(figsize=(9, 0.3 * max(len(self.promoted), len(self.suppressed)) + 1.5))
        for j, (name, items, color) in enumerate((("promoted", self.promoted, "C2"),
                                                  ("suppressed", self.suppressed, "C3"))):
            ax = fig.add_subplot(1, 2, j + 1)
            ax.barh(range(len(items)), [v for _, _, v in items], color=color)
            ax.set_yticks(range(len(items)), [token_label(repr(t)) for t, _, _ in items], fontsize=8)
            ax.invert_yaxis()
            ax.set_title(f"L{self.layer}N{self.neuron} {name}", fontsize=9)
            ax.set_xlabel("logit per unit activation")
        fig.tight_layout()
        return save_fig(fig, out)


@dataclass(repr=False)
class NeuronAblation(Result):
    layer: int
    target: str
    target_id: int
    pos: int
    mode: str
    rows: list  # dicts: ablated, neurons, clean_logit, ablated_logit, delta, clean_prob, ablated_prob

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows)

    def summary(self) -> str:
        r = self.rows[-1]
        return (f"{self.mode}-ablating {r['ablated']} in layer {self.layer}: logit of {self.target!r} at pos "
                f"{self.pos} {r['clean_logit']:.3f} -> {r['ablated_logit']:.3f} ({r['delta']:+.3f})")

    def plot(self, out=None):
        fig = new_figure(figsize=(7, 0.35 * len(self.rows) + 1.5))
        ax = fig.add_subplot(1, 1, 1)
        deltas = [r["delta"] for r in self.rows]
        ax.barh(range(len(deltas)), deltas, color=["C3" if d < 0 else "C2" for d in deltas])
        ax.set_yticks(range(len(deltas)), [r["ablated"] for r in self.rows], fontsize=8)
        ax.invert_yaxis()
        ax.axvline(0, color="grey", lw=0.5)
        ax.set_xlabel(f"change in logit of {self.target!r} ({self.mode} ablation)")
        return save_fig(fig, out)


# ============================================================================================ the analyzer
class Neurons:
    """The FFN neurons of one layer of ``model``."""

    def __init__(self, model, layer: int):
        if model.d_mlp is None:
            raise ValueError(f"model {getattr(model, 'source', '')} has no MLP layers (attention-only)")
        self.model = model
        self.layer = model.check_layer(layer)
        self.hook = f"blocks.{self.layer}.mlp.hook_post"

    def __repr__(self) -> str:
        return f"Neurons(layer {self.layer} of {self.model.source}: {self.model.d_mlp} neurons)"

    def _neuron_list(self, neurons) -> list[int]:
        if neurons is None:
            return list(range(self.model.d_mlp))
        return self._check(neurons)

    def _check(self, neurons) -> list[int]:
        """Validated neuron indices; numpy/torch integer scalars (e.g. from a DataFrame) are accepted."""
        if getattr(neurons, "ndim", 0) > 0:  # torch / numpy arrays
            neurons = neurons.tolist()
        single = not isinstance(neurons, (list, tuple, range))
        idx = [as_int(n) for n in ([neurons] if single else neurons)]
        return self.model.check_neurons(self.layer, idx)

    # -------------------------------------------------------------------------------------- activations
    def activations(self, text, neurons=None) -> NeuronActivations:
        """Activations [pos, neuron] of ``neurons`` (default all) on one text."""
        idx = self._neuron_list(neurons)
        toks = self.model.to_tokens(text)
        if toks.shape[0] != 1:
            raise ValueError(f"activations() takes one text; got a batch of {toks.shape[0]}")
        acts = self.model.cache(toks, [self.hook])[self.hook][0][:, idx]
        return NeuronActivations(acts=acts, neurons=idx, str_tokens=self.model.to_str_tokens(toks), layer=self.layer)

    # -------------------------------------------------------------------------------------- dataset scan
    def scan(self, docs=None, *, n_docs: int | None = None, k: int = 10, neurons=None, batch_size: int = 8,
             max_len: int = 128, doc_offset: int = 0, skip_bos: bool = True, progress: bool = True) -> NeuronScan:
        """Top-``k`` max-activating (document, token) contexts of each neuron over a corpus.

        docs: a list of :class:`interp.corpus.Doc` or strings (default: ``wiki_documents(n_docs or 500)``);
        ``n_docs`` limits a given list to its first ``n_docs``. Document ``i`` of the list gets the global id
        ``doc_offset + i``. ``skip_bos``: leave out position 0 — BOS with no context has the same activation in
        every document and would fill the top-k with copies of itself. Padding never enters."""
        docs = self._docs(docs, n_docs)
        state = self.scan_state(docs, k=k, neurons=neurons, batch_size=batch_size, max_len=max_len,
                                doc_offset=doc_offset, skip_bos=skip_bos, progress=progress)
        return NeuronScan.from_state(self.model, state.to("cpu"), docs, doc_offset=doc_offset, max_len=max_len)

    @staticmethod
    def _docs(docs, n_docs):
        from ..core.corpus import documents

        return documents(docs, n_docs, default=DEFAULT_DOCS)

    def scan_state(self, docs=None, *, n_docs=None, k=10, neurons=None, batch_size=8, max_len=128, doc_offset=0,
                   skip_bos=True, progress=True) -> TopK:
        """The scan's raw accumulator (see :meth:`scan`); merge shards with ``TopK.merge``."""
        from ..core.corpus import token_batches

        docs = self._docs(docs, n_docs)
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r}; allowed: a positive integer")
        if not isinstance(doc_offset, int) or doc_offset < 0:
            raise ValueError(f"doc_offset={doc_offset!r}; allowed: an integer >= 0")
        model = self.model
        state = TopK.empty(self.layer, k, self._neuron_list(neurons), skip_bos=skip_bos,
                           device=model.device_of(self.layer))  # where this layer's activations arrive
        batch = {}

        def fold_and_stop(acts, hook):  # acts [b, pos, d_mlp]
            state.update(acts, batch["mask"], batch["ids"], batch["toks"])
            raise StopForward  # the scan needs nothing after this layer

        bar = _progress(len(docs), progress, f"scan L{self.layer}")
        try:
            with torch.no_grad(), model.hooks([(self.hook, fold_and_stop)], description=f"neuron scan L{self.layer}"):
                for toks, mask, idx in token_batches(model, docs, max_len=max_len, batch_size=batch_size):
                    batch.update(toks=toks, mask=mask, ids=torch.tensor(idx, dtype=torch.int64) + doc_offset)
                    try:
                        model.forward(toks)
                    except StopForward:
                        pass
                    else:
                        raise RuntimeError(f"hook {self.hook} did not fire during the forward pass")
                    bar.update(len(idx))
        finally:
            bar.close()
        return state

    # -------------------------------------------------------------------------------------- vocabulary
    def vocab(self, neuron: int, k: int = 10, *, apply_norm: bool = True) -> VocabProjection:
        """Tokens neuron ``neuron`` promotes / suppresses: its output row W_out[:, n] through the unembedding.

        With ``apply_norm`` the final norm's learned scale (and LayerNorm's mean-centring) is applied to the row
        first; the norm's data-dependent 1/rms (1/std) factor is left out — it is positive, so it rescales every
        logit equally and leaves the ranking unchanged. Values: logit change per unit of activation, up to that
        factor."""
        (n,) = self._check([neuron])
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k={k!r}; allowed: a positive integer")
        logits = self.logit_effect(n, apply_norm=apply_norm)
        top, bot = logits.topk(k), (-logits).topk(k)
        dec = self.model.tokenizer.decode if self.model.tokenizer is not None else str
        promoted = [(dec([int(i)]), int(i), float(v)) for v, i in zip(top.values, top.indices)]
        suppressed = [(dec([int(i)]), int(i), -float(v)) for v, i in zip(bot.values, bot.indices)]
        m = self.model
        note = ("raw row @ W_U" if not apply_norm or m.norm is None else
                "row * final RMSNorm scale @ W_U (1/rms omitted)" if m.norm == "rms" else
                "(row - mean) * final LayerNorm scale @ W_U (1/std omitted)")
        return VocabProjection(layer=self.layer, neuron=n, promoted=promoted, suppressed=suppressed, note=note)

    def logit_effect(self, neuron: int, *, apply_norm: bool = True) -> torch.Tensor:
        """[d_vocab] direct effect on the logits of one unit of activation of ``neuron`` (see :meth:`vocab`)."""
        (n,) = self._check([neuron])
        w = self.model.mlp_out_matrix(self.layer)[:, n].detach().to("cpu", torch.float32)  # [d_model]
        if apply_norm and self.model.norm is not None:
            if self.model.norm == "ln":
                w = w - w.mean()
            scale = self.model.final_norm_weight()
            if scale is not None:
                w = w * scale
        return w @ self.model.W_U

    # -------------------------------------------------------------------------------------- ablation
    def ablate(self, text, target, neurons, *, pos: int = -1, mode: str = "zero", mean_over=None,
               individually: bool = False) -> NeuronAblation:
        """Change of the ``target`` logit at ``pos`` when ``neurons`` are ablated together (and, with
        ``individually``, one at a time). ``target``: a single-token string (mind the leading space) or a token id."""
        m = self.model
        idx = self._check(neurons)
        toks = m.to_tokens(text)
        if toks.shape[0] != 1:
            raise ValueError(f"ablate() takes one text; got a batch of {toks.shape[0]}")
        p = m.check_pos(pos, toks.shape[1])
        target = as_int(target)
        if isinstance(target, str):
            tid = m.to_single_token(target)
        elif isinstance(target, int) and not isinstance(target, bool) and 0 <= target < m.d_vocab:
            tid = target
        else:
            raise ValueError(f"target {target!r}; allowed: a single-token string or a token id 0..{m.d_vocab - 1}")
        clean = m.run(toks)[0, p]
        groups = ([[i] for i in idx] if individually and len(idx) > 1 else []) + [idx]
        rows = []
        for g in groups:
            with m.ablate_neurons(self.layer, g, mode=mode, mean_over=mean_over):
                out = m.run(toks)[0, p]
            label = f"N{g[0]}" if len(g) == 1 else f"{len(g)} neurons"
            rows.append({"ablated": label, "neurons": g, "clean_logit": float(clean[tid]),
                         "ablated_logit": float(out[tid]), "delta": float(out[tid] - clean[tid]),
                         "clean_prob": float(clean.softmax(-1)[tid]), "ablated_prob": float(out.softmax(-1)[tid])})
        name = m.tokenizer.decode([tid]) if m.tokenizer is not None else str(tid)
        return NeuronAblation(layer=self.layer, target=name, target_id=tid, pos=p, mode=mode, rows=rows)


def neurons(model, layer: int) -> Neurons:
    """The FFN neurons of ``layer``: ``.activations(text)``, ``.scan(docs)``, ``.vocab(n)``, ``.ablate(...)``."""
    return Neurons(model, layer)


def _progress(total: int, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, desc=desc, unit="doc", leave=False)


# ============================================================================================ CLI and demo
def add_cli(subparsers) -> None:
    from ..cli import add_common

    p = subparsers.add_parser("neurons", help="top-activating contexts of one layer's FFN neurons")
    p.add_argument("--layer", type=int, required=True, help="layer index")
    p.add_argument("--top", type=int, default=10, help="how many neurons to show (by peak activation)")
    p.add_argument("--docs", type=int, default=DEFAULT_DOCS, help="documents of the Wikipedia corpus to scan")
    p.add_argument("--k", type=int, default=5, help="contexts kept per neuron")
    p.add_argument("--neuron", type=int, action="append", default=None,
                   help="show this neuron (repeatable) instead of the top ones")
    add_common(p)  # --model, --device, --json
    p.set_defaults(func=cli_neurons)


def cli_neurons(args, model=None) -> dict:
    """Handler of ``interp neurons``; ``model`` lets tests pass a loaded model."""
    if model is None:
        from ..cli import load_model

        model = load_model(args)
    if not isinstance(args.top, int) or args.top < 1:
        raise ValueError(f"--top {args.top!r}; allowed: a positive integer")
    view = neurons(model, args.layer)
    chosen = None if args.neuron is None else view._check(args.neuron)
    res = view.scan(n_docs=args.docs, k=args.k, progress=not args.json)
    ids = chosen if chosen is not None else res.top_neurons(args.top)["neuron"].tolist()
    frame = res.to_frame(ids)
    out, lines = [], [res.summary()]
    for n in ids:
        rows = frame[frame.neuron == n]
        v = view.vocab(n, k=5)
        item = {"neuron": n, "max_activation": float(rows.activation.max()) if len(rows) else None,
                "contexts": rows[["activation", "title", "token", "context"]].to_dict(orient="records"),
                "promotes": [t for t, _, _ in v.promoted], "suppresses": [t for t, _, _ in v.suppressed]}
        out.append(item)
        lines.append(f"N{n}: max {item['max_activation']:.2f}; promotes {item['promotes']}")
        lines += [f"    {c['activation']:7.2f}  {c['context']!r}  ({c['title']})" for c in item["contexts"]]
    return {"_text": "\n".join(lines), "layer": view.layer, "docs": int(res.state.docs_seen.numel()),
            "tokens": res.state.n_tokens, "k": args.k, "neurons": out}


DEMO_LAYER = 4  # early enough to scan in seconds on a CPU; its top neurons read digits and century ordinals


def demo(model) -> None:
    """``make demo`` section: the top neurons of one layer over 100 Wikipedia documents (first 48 tokens each)."""
    layer = min(DEMO_LAYER, model.n_layers - 1)
    view = neurons(model, layer)
    res = view.scan(n_docs=100, k=3, max_len=48, progress=False)
    print(f"== FFN neurons: {res.summary()}")
    for row in res.top_neurons(5).itertuples():
        contexts = res.to_frame(row.neuron).context.tolist()
        print(f"  L{layer}N{row.neuron:<5d} max {row.max_activation:5.2f}  " + "  |  ".join(repr(c) for c in contexts))
