"""The mergeable top-k accumulator of a neuron scan (``neurons.Neurons.scan``).

Entries are ordered by (activation descending, document id ascending, position ascending) — a total order, so
ties are broken deterministically and ``A.merge(B)`` equals the scan of A+B in one go, exactly. Shards of a corpus
can therefore be scanned in separate processes (global document ids), saved with ``save()`` (safetensors) and
merged, or reduced over torch.distributed ranks with ``accumulate.reduce``. Bit-identical activations are needed
for bit-identical merges: split a corpus at a multiple of ``batch_size`` so each document is run in the same
padded batch in both cases.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .accumulate import Accumulator

_INT64_MAX = torch.iinfo(torch.int64).max


# ============================================================================================ top-k accumulator
class TopK(Accumulator):
    """Mergeable running top-k per neuron. State (all plain tensors, CPU or the model's device):

    values [n, k] float32 (-inf in empty slots) · doc [n, k] int64 (-1 empty) · pos [n, k] int64 · token [n, k]
    int64 · neurons [n] int64 (the layer's neuron indices tracked) · docs_seen [d] int64 sorted — plus n_tokens
    (a 1-element int64 tensor in ``state_dict()``), layer and skip_bos (its metadata); k is ``values.shape[1]``.

    Rows are kept sorted by (value desc, doc asc, pos asc). Ranks reduce it by gathering every rank's state and
    merging in rank order (``reduction = "merge"``): a sum would not be a top-k."""

    reduction = "merge"

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

    @property
    def hook_names(self) -> list[str]:
        return [f"blocks.{self.layer}.mlp.hook_post"]

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
    def add(self, batch, acts: dict) -> None:
        """Fold in one scan batch (``accumulate.scan``)."""
        (a,) = acts.values()
        self.update(a, batch.mask, batch.doc_ids, batch.tokens)

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

    def state_dict(self) -> dict:
        tensors = {"values": self.values, "doc": self.doc, "pos": self.pos, "token": self.token,
                   "neurons": self.neurons, "docs_seen": self.docs_seen}
        tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
        tensors["n_tokens"] = torch.tensor([self.n_tokens], dtype=torch.int64)
        return {"tensors": tensors, "meta": {"layer": self.layer, "skip_bos": self.skip_bos, "k": self.k}}

    @classmethod
    def from_state_dict(cls, state: dict) -> TopK:
        sd, meta = state["tensors"], state["meta"]
        need = ("values", "doc", "pos", "token", "neurons", "docs_seen", "n_tokens")
        missing = [k for k in need if k not in sd] + [k for k in ("layer", "skip_bos") if k not in meta]
        if missing:
            raise ValueError(f"state lacks {missing}; expected tensors {list(need)} and meta layer, skip_bos")
        shape = tuple(sd["values"].shape)
        if len(shape) != 2 or any(tuple(sd[k].shape) != shape for k in ("doc", "pos", "token")) \
                or tuple(sd["neurons"].shape) != shape[:1]:
            raise ValueError(f"inconsistent state shapes: values {shape}, neurons {tuple(sd['neurons'].shape)}")
        return cls(sd["values"].float(), sd["doc"].long(), sd["pos"].long(), sd["token"].long(), sd["neurons"].long(),
                   sd["docs_seen"].long(), n_tokens=int(sd["n_tokens"].reshape(-1)[0]), layer=int(meta["layer"]),
                   skip_bos=bool(meta["skip_bos"]))

    def equal(self, other: TopK) -> bool:
        a, b = self.state_dict(), other.state_dict()
        ta, tb = a["tensors"], b["tensors"]
        return a["meta"] == b["meta"] and ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)


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
