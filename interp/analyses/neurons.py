"""FFN neurons of one layer: ``interp.neurons(model, layer)``.

A *neuron* is one coordinate of the hidden vector that multiplies the MLP's down projection,
``blocks.{layer}.mlp.hook_post``: ``act(gate) * up`` on gated MLPs (SmolLM2, Llama), ``act(pre)`` on GPT-2.
Neuron ``n`` writes ``activation * W_out[:, n]`` into the residual stream (``model.mlp_out_matrix(layer)[:, n]``);
on Gemma that sum passes through the post-MLP norm first, whose learned scale ``vocab`` folds in (its 1/rms is a
positive factor shared by all neurons of a token).

``neurons(model, layer)`` returns a :class:`Neurons` view with

- ``activations(text)``   — every neuron's activation at every token (plot over tokens),
- ``scan(docs, k=10)``    — streaming top-k max-activating contexts per neuron over a corpus,
- ``vocab(neuron)``       — the neuron's output row through the unembedding: tokens it promotes / suppresses,
- ``ablate(text, target, neurons)`` — effect of zero/mean-ablating neurons on a target logit (``mode="mean",
  mean_over=scan``: each neuron set to its mean over the scan's tokens, which ``scan`` records).

The scan keeps its running state in a :class:`~interp.analyses.topk.TopK` accumulator of plain tensors whose
merge is exact (see ``topk``); shards of a corpus scanned separately (``doc_offset`` gives global document ids)
merge to the one-go scan.

Speed and memory: the scan is ``accumulate.scan``: it captures only ``mlp.hook_post`` of its layer and stops the
forward pass right there, so later layers and the unembedding are never computed; it holds one batch of that one
layer's activations ([batch, pos, d_mlp]) plus the [d_mlp, k] state, never a cache.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..core import arch, moe
from ..core.corpus import documents
from ..core.hooks import capture
from ..core.inputs import as_int, check_int, decode, one_text, target_id
from ..core.results import Result, jsonable, new_figure, save_fig
from .accumulate import scan
from .attention import token_label
from .topk import TopK

__all__ = ["DEFAULT_DOCS", "NeuronAblation", "NeuronActivations", "NeuronScan", "Neurons", "TopK", "VocabProjection",
           "neurons"]

DEFAULT_DOCS = 500


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

    def to_json(self, neurons=None) -> dict:
        """The summary, tokens, top neurons and the long table for ``neurons`` (default: the 5 top ones)."""
        return {"result": type(self).__name__, "summary": self.summary(), "layer": self.layer,
                "str_tokens": list(self.str_tokens), "top": self.top(5),
                "rows": jsonable(self.to_frame(neurons).to_dict(orient="records"))}

    def view(self, neurons=None):
        """Interactive view: the tokens coloured by each of ``neurons``' activation (default: the 5 top ones)."""
        from .neurons_view import activations_view

        return activations_view(self, neurons)

    def plot(self, neurons=None, *, out=None):
        """Activation over the tokens for ``neurons`` (default: the 5 top neurons on this text)."""
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
    model: object = field(default=None, repr=False)  # for the view: activations in context, vocabulary projection
    mean: torch.Tensor | None = None  # [tracked neurons] mean activation over the scanned non-BOS tokens (scan())

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
                   bos_token_id=model.bos_token_id, model=model)

    @property
    def layer(self) -> int:
        return self.state.layer

    def mean_of(self, neurons) -> torch.Tensor:
        """[len(neurons)] float32: each neuron's mean activation over the scanned non-BOS tokens (what
        ``Neurons.ablate(..., mode="mean", mean_over=scan)`` writes)."""
        if self.mean is None:
            raise ValueError("this scan holds no mean activations (only Neurons.scan records them, not a state "
                             "merged from shards)")
        index = {int(v): i for i, v in enumerate(self.state.neurons.tolist())}
        idx = [as_int(n) for n in ([neurons] if isinstance(neurons, int) else list(neurons))]
        missing = [n for n in idx if n not in index]
        if missing:
            raise ValueError(f"neurons {missing} were not scanned; this scan holds {len(index)} neurons")
        return self.mean[[index[n] for n in idx]].float()

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

    def to_json(self, neurons=None) -> dict:
        """The summary, the scan's size and one row per (neuron, rank) for ``neurons`` (default: all of them)."""
        st = self.state
        return {"result": type(self).__name__, "summary": self.summary(), "layer": st.layer, "k": st.k,
                "docs": int(st.docs_seen.numel()), "tokens": st.n_tokens,
                "rows": jsonable(self.to_frame(neurons).to_dict(orient="records"))}

    def view(self, neurons=None, *, n: int = 8, before: int = 10, after: int = 3, vocab_k: int = 8):
        """Interactive view of ``neurons`` (default: the ``n`` with the largest peak): each top-k context with every
        token coloured by the neuron's activation there (one forward per document, stopped at this layer), beside
        the neuron's vocabulary projection."""
        from .neurons_view import scan_view

        shown = self.top_neurons(n)["neuron"].tolist() if neurons is None else (
            [neurons] if isinstance(neurons, int) else list(neurons))
        probe = None if self.model is None else Neurons(self.model, self.layer)
        return scan_view(self, shown, doc_ids=self._ids, probe=probe, before=before, after=after, vocab_k=vocab_k)

    def plot(self, n: int = 10, *, out=None):
        """The ``n`` neurons with the largest peak activation: their top-k activations, labelled with the top token."""
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

    def to_json(self) -> dict:
        return {**super().to_json(), "layer": self.layer, "neuron": self.neuron, "note": self.note}

    def plot(self, *, out=None):
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
    """``target`` is the token actually scored (a multi-token target string is scored by its first token;
    ``label`` keeps the text given)."""

    layer: int
    target: str
    target_id: int
    pos: int
    mode: str
    rows: list  # dicts: ablated, neurons, clean_logit, ablated_logit, delta, clean_prob, ablated_prob
    label: str = ""

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows)

    def summary(self) -> str:
        r = self.rows[-1]
        return (f"{self.mode}-ablating {r['ablated']} in layer {self.layer}: logit of {self.target!r} at pos "
                f"{self.pos} {r['clean_logit']:.3f} -> {r['ablated_logit']:.3f} ({r['delta']:+.3f})")

    def to_json(self) -> dict:
        return {**super().to_json(), "layer": self.layer, "target": self.target, "target_id": self.target_id,
                "label": self.label or self.target, "pos": self.pos, "mode": self.mode}

    def plot(self, *, out=None):
        fig = new_figure(figsize=(7, 0.35 * len(self.rows) + 1.5))
        ax = fig.add_subplot(1, 1, 1)
        deltas = [r["delta"] for r in self.rows]
        ax.barh(range(len(deltas)), deltas, color=["C3" if d < 0 else "C2" for d in deltas])
        ax.set_yticks(range(len(deltas)), [r["ablated"] for r in self.rows], fontsize=8)
        ax.invert_yaxis()
        ax.axvline(0, color="grey", lw=0.5)
        ax.set_xlabel(f"change in logit of {self.target!r} ({self.mode} ablation)")
        return save_fig(fig, out)


class _TopKWithMean(TopK):
    """The scan's top-k that also sums each tracked neuron's activation over the counted (real, non-BOS) tokens,
    for :attr:`NeuronScan.mean`. Merging or saving keeps only the top-k."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.act_sum = torch.zeros(self.neurons.numel(), dtype=torch.float64, device=self.values.device)
        self.act_count = 0

    def add(self, batch, acts: dict) -> None:
        super().add(batch, acts)
        (a,) = acts.values()  # [b, pos, d_mlp]
        w = batch.counted.to(a.device, torch.float64)
        a = a.index_select(-1, self.neurons.to(a.device)).to(torch.float64)
        self.act_sum += torch.einsum("bp,bpn->n", w, a).to(self.act_sum.device)
        self.act_count += int(batch.counted.sum())


# ============================================================================================ the analyzer
class Neurons:
    """The FFN neurons of one layer of ``model``."""

    def __init__(self, model, layer: int):
        if model.d_mlp is None:
            raise ValueError(f"model {getattr(model, 'source', '')} has no MLP layers (attention-only)")
        if moe.is_moe(model):  # mlp.hook_post is the block's output there, not a hidden vector
            raise ValueError(f"layer {layer} of {model.source} is a routed mixture of {moe.n_experts(model)} "
                             "experts, not one MLP; its neurons belong to each expert: use "
                             "interp.experts.expert_neurons(model, layer, expert)")
        self.model = model
        self.layer = model.check_layer(layer)
        self.hook = f"blocks.{self.layer}.mlp.hook_post"

    def __repr__(self) -> str:
        return f"Neurons(layer {self.layer} of {self.model.source}: {self.model.d_mlp} neurons)"

    def _neuron_list(self, neurons) -> list[int]:
        if neurons is None:
            return list(range(self.model.d_mlp))
        return self.check(neurons)

    def check(self, neurons) -> list[int]:
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
        toks = one_text(self.model, text)
        store, _ = capture(self.model, toks, [self.hook], keep=lambda name, t: t[0].detach().to("cpu", torch.float32),
                           stop=True, description=f"neuron activations L{self.layer}")
        acts = store[self.hook][:, idx]
        return NeuronActivations(acts=acts, neurons=idx, str_tokens=self.model.to_str_tokens(toks), layer=self.layer)

    # -------------------------------------------------------------------------------------- dataset scan
    def scan(self, docs=None, *, n_docs: int | None = None, k: int = 10, neurons=None, batch_size: int = 8,
             max_len: int = 128, doc_offset: int = 0, skip_bos: bool = True, progress: bool = True) -> NeuronScan:
        """Top-``k`` max-activating (document, token) contexts of each neuron over a corpus.

        docs: a list of :class:`interp.core.corpus.Doc` or strings (default: ``wiki_documents(n_docs or 500)``);
        ``n_docs`` limits a given list to its first ``n_docs``. Document ``i`` of the list gets the global id
        ``doc_offset + i``. ``skip_bos``: leave out position 0 — BOS with no context has the same activation in
        every document and would fill the top-k with copies of itself. Padding never enters."""
        docs = self._docs(docs, n_docs)
        state = self.scan_state(docs, k=k, neurons=neurons, batch_size=batch_size, max_len=max_len,
                                doc_offset=doc_offset, skip_bos=skip_bos, progress=progress, _mean=True)
        res = NeuronScan.from_state(self.model, state.to("cpu"), docs, doc_offset=doc_offset, max_len=max_len)
        res.mean = (state.act_sum.cpu() / max(state.act_count, 1)).float() if state.act_count else None
        return res

    @staticmethod
    def _docs(docs, n_docs):
        return documents(docs, n_docs, default=DEFAULT_DOCS)

    def scan_state(self, docs=None, *, n_docs=None, k=10, neurons=None, batch_size=8, max_len=128, doc_offset=0,
                   skip_bos=True, progress=True, _mean=False) -> TopK:
        """The scan's raw accumulator (see :meth:`scan`); merge shards with ``TopK.merge``."""
        docs = self._docs(docs, n_docs)
        check_int("batch_size", batch_size, 1)
        check_int("doc_offset", doc_offset, 0)
        state = (_TopKWithMean if _mean else TopK).empty(self.layer, k, self._neuron_list(neurons), skip_bos=skip_bos,
                           device=self.model.device_of(self.layer))  # where this layer's activations arrive
        return scan(self.model, docs, state, batch_size=batch_size, max_len=max_len, doc_offset=doc_offset,
                    progress=progress, desc=f"scan L{self.layer}")

    # -------------------------------------------------------------------------------------- vocabulary
    def vocab(self, neuron: int, k: int = 10, *, apply_norm: bool = True) -> VocabProjection:
        """Tokens neuron ``neuron`` promotes / suppresses: its output row W_out[:, n] through the unembedding.

        With ``apply_norm`` the final norm's learned scale (and LayerNorm's mean-centring) is applied to the row
        first; the norm's data-dependent 1/rms (1/std) factor is left out — it is positive, so it rescales every
        logit equally and leaves the ranking unchanged. Values: logit change per unit of activation, up to that
        factor."""
        (n,) = self.check([neuron])
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k={k!r}; allowed: a positive integer")
        logits = self.logit_effect(n, apply_norm=apply_norm)
        top, bot = logits.topk(k), (-logits).topk(k)
        promoted = [(decode(self.model, i), int(i), float(v)) for v, i in zip(top.values, top.indices)]
        suppressed = [(decode(self.model, i), int(i), -float(v)) for v, i in zip(bot.values, bot.indices)]
        m = self.model
        note = ("raw row @ W_U" if not apply_norm or m.norm is None else
                "row * final RMSNorm scale @ W_U (1/rms omitted)" if m.norm == "rms" else
                "(row - mean) * final LayerNorm scale @ W_U (1/std omitted)")
        if apply_norm and arch.has_post_norms(m):
            note = note.replace("row *", "row * post-MLP norm scale *", 1)
        return VocabProjection(layer=self.layer, neuron=n, promoted=promoted, suppressed=suppressed, note=note)

    def logit_effect(self, neuron: int, *, apply_norm: bool = True) -> torch.Tensor:
        """[d_vocab] direct effect on the logits of one unit of activation of ``neuron`` (see :meth:`vocab`)."""
        (n,) = self.check([neuron])
        w = self.model.mlp_out_matrix(self.layer)[:, n].detach().to("cpu", torch.float32)  # [d_model]
        post = arch.post_norm_gain(self.model, self.layer, "mlp") if apply_norm else None
        if post is not None:  # Gemma: the MLP's write is normed again before it joins the residual
            w = w * post
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
        ``individually``, one at a time). ``target``: a token id or a string (mind the leading space); a string of
        several tokens is scored by its first token, with a warning (the result's ``target`` names it).

        ``mode="mean"``: each neuron set to its mean over ``mean_over`` — a text / tokens, a :class:`NeuronScan`
        of this layer (its mean over the scanned corpus tokens), or None (the mean over ``text`` itself)."""
        m = self.model
        idx = self.check(neurons)
        from_scan = isinstance(mean_over, NeuronScan)
        if from_scan and (mode != "mean" or mean_over.layer != self.layer):
            raise ValueError(f"mean_over=<scan of layer {mean_over.layer}> needs mode='mean' and a scan of layer "
                             f"{self.layer} (got mode={mode!r})")
        toks = one_text(m, text)
        p = m.check_pos(pos, toks.shape[1])
        scored = target_id(m, target)
        tid = scored.id
        clean = m.run(toks)[0, p]
        groups = ([[i] for i in idx] if individually and len(idx) > 1 else []) + [idx]
        rows = []
        for g in groups:
            means = {"values": mean_over.mean_of(g)} if from_scan else {"mean_over": mean_over}
            with m.ablate_neurons(self.layer, g, mode=mode, **means):
                out = m.run(toks)[0, p]
            label = f"N{g[0]}" if len(g) == 1 else f"{len(g)} neurons"
            rows.append({"ablated": label, "neurons": g, "clean_logit": float(clean[tid]),
                         "ablated_logit": float(out[tid]), "delta": float(out[tid] - clean[tid]),
                         "clean_prob": float(clean.softmax(-1)[tid]), "ablated_prob": float(out.softmax(-1)[tid])})
        return NeuronAblation(layer=self.layer, target=scored.token, target_id=tid, pos=p, mode=mode, rows=rows,
                              label=scored.label)


def neurons(model, layer: int) -> Neurons:
    """The FFN neurons of ``layer``: ``.activations(text)``, ``.scan(docs)``, ``.vocab(n)``, ``.ablate(...)``."""
    return Neurons(model, layer)
