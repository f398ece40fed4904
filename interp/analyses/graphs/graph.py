"""``attribution_graph(model, transcoders, text)``: the direct-effect graph of one prompt in its local replacement
model (:mod:`.replacement`), pruned by influence on the logits (:mod:`.prune`).

Nodes, in this order: active features (layer, position, feature; ordered by layer, then position, then feature),
error nodes (layer, position), token embeddings (position), logits (the top next tokens up to a cumulative
probability of ``0.95``, at most ``max_logits``, or the ``targets`` given). ``adjacency[t, s]`` is the direct
effect of source ``s`` on target ``t``: of a feature's pre-activation or a logit (minus the mean logit) — rows for
features and logits, columns for features, errors and embeddings. Rows are computed by backward passes through the
frozen model, ``batch`` targets at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...core.inputs import decode
from ...core.results import Result, new_figure, save_fig
from .replacement import LocalReplacement


@dataclass(repr=False)
class AttributionGraph(Result):
    """``nodes``: a frame (kind, layer, pos, feature, token, activation, influence, kept); ``adjacency`` [n, n]
    (target row, source column); ``logit_probs``: the logit nodes' probabilities; ``scores``: replacement and
    completeness (of the full and of the pruned graph)."""

    nodes: object
    adjacency: torch.Tensor
    logit_probs: torch.Tensor
    tokens: list
    scores: dict
    edge_mask: torch.Tensor | None = None
    meta: dict = field(default_factory=dict)

    def to_frame(self):
        return self.nodes

    def kinds(self, kind: str) -> torch.Tensor:
        return torch.tensor((self.nodes["kind"] == kind).to_numpy())

    def summary(self) -> str:
        n = self.nodes
        kept = n[n["kept"]]
        logits = n[n["kind"] == "logit"]["token"].tolist()
        return (f"attribution graph of {len(self.tokens)} tokens for {logits}: {int((n['kind'] == 'feature').sum())} "
                f"active features, {int((kept['kind'] == 'feature').sum())} kept after pruning; replacement score "
                f"{self.scores['replacement']:.3f}, completeness {self.scores['completeness']:.3f}")

    def to_json(self) -> dict:
        return {**super().to_json(), "tokens": self.tokens, "scores": self.scores, "meta": self.meta}

    def edges(self, *, pruned: bool = True):
        """The edges as a frame: target, source (node indices), weight."""
        import pandas as pd

        A = self.adjacency
        mask = A != 0
        if pruned and self.edge_mask is not None:
            mask &= self.edge_mask
        t, s = mask.nonzero(as_tuple=True)
        return pd.DataFrame({"target": t.numpy(), "source": s.numpy(), "weight": A[t, s].numpy()})

    def view(self, cards: dict | None = None):
        """The interactive pruned graph; ``cards``: ``{(layer, feature): interp.features.card(...)}`` shown when a
        feature node is clicked."""
        from .graph_view import graph_view

        return graph_view(self, cards)

    def to_circuit_tracer(self, slug: str = "interp-graph") -> dict:
        """The pruned graph in circuit-tracer's graph-file layout (what its frontend and Neuronpedia read)."""
        from .export import circuit_tracer_json

        return circuit_tracer_json(self, slug)

    def plot(self, *, out=None):
        n = self.nodes
        fig = new_figure(figsize=(9, 4.5))
        ax = fig.subplots()
        kept = n[n["kept"]]
        layer = kept["layer"].fillna(-1).to_numpy()
        top = self.meta.get("n_layers", int(max(layer.max(), 0)) + 1)
        y = [top if k == "logit" else (-1 if k == "embedding" else lay + (0.5 if k == "error" else 0))
             for k, lay in zip(kept["kind"], layer)]
        colors = {"feature": "C0", "error": "C7", "embedding": "C2", "logit": "C3"}
        ax.scatter(kept["pos"], y, c=[colors[k] for k in kept["kind"]], s=12)
        ax.set_xticks(range(len(self.tokens)), [repr(t)[1:-1] for t in self.tokens], rotation=60, fontsize=7)
        ax.set_ylabel("layer (embeddings at -1, logits on top)")
        ax.set_title(self.summary(), fontsize=8, wrap=True)
        return save_fig(fig, out)


def logit_targets(model, probs: torch.Tensor, *, targets=None, max_logits: int = 10, cumulative: float = 0.95):
    """Token ids of the logit nodes: ``targets`` (strings or ids), else the most probable tokens up to
    ``cumulative`` probability, at most ``max_logits``."""
    if targets is not None:
        ids = []
        for t in ([targets] if isinstance(targets, (str, int)) else targets):
            if isinstance(t, str):
                t = model.to_single_token(t)
            if not 0 <= int(t) < probs.shape[0]:
                raise ValueError(f"target id {t}; allowed: 0..{probs.shape[0] - 1}")
            ids.append(int(t))
        return ids
    if not 0 < cumulative <= 1 or max_logits < 1:
        raise ValueError(f"cumulative={cumulative}, max_logits={max_logits}; allowed: 0 < cumulative <= 1, "
                         f"max_logits >= 1")
    p, i = probs.sort(descending=True)
    n = int((p.cumsum(0) < cumulative).sum()) + 1
    return i[: min(n, max_logits)].tolist()


def compute_rows(lrm: LocalReplacement, targets: list, feature_index: dict, n_cols: int, batch: int) -> torch.Tensor:
    """[len(targets), n_cols] direct effects of every source on each target (see the module docstring)."""
    n_feat = len(feature_index)
    err0, emb0 = n_feat, n_feat + lrm.model.n_layers * lrm.n_pos
    out = torch.zeros(len(targets), n_cols)
    for start in range(0, len(targets), batch):
        part = targets[start:start + batch]
        g = lrm.tap_gradients(part, rows=min(batch, len(targets)))
        rows = slice(start, start + len(part))
        _fill(out, rows, g, lrm, feature_index, err0, emb0)
    return out


@torch.no_grad()
def _fill(out, rows, g, lrm, feature_index, err0, emb0):
    """Each source's edge into the targets of ``rows``: its written vector dotted with the target's gradient at
    the tap it is written to."""
    n_layers, n_pos = lrm.model.n_layers, lrm.n_pos
    out[rows, emb0:emb0 + n_pos] = (g["embed"] * lrm.embed).sum(-1)
    for L in range(n_layers):
        out[rows, err0 + L * n_pos: err0 + (L + 1) * n_pos] = (g[L] * lrm.error[L]).sum(-1)
        if L not in lrm.acts:
            continue
        d = lrm.dicts[L]
        a = lrm.acts[L]                                                    # [pos, width]
        pos, f = a.nonzero(as_tuple=True)
        if len(f) == 0:
            continue
        dec = d.W_dec.float()[f] * d.out_scale.float()                     # [n_active, d]
        eff = (g[L][:, pos] * dec).sum(-1) * a[pos, f]                     # [rows, n_active]
        cols = torch.tensor([feature_index[(L, int(p), int(k))] for p, k in zip(pos, f)])
        out[rows, cols] = eff


@dataclass(frozen=True)
class GraphSettings:
    """``max_logits`` / ``cumulative``: the logit nodes (most probable tokens to that probability, at most that
    many) unless targets are given; ``node_threshold`` / ``edge_threshold``: the cumulative influence pruning keeps
    (circuit-tracer's defaults); ``batch``: targets per backward pass; ``bos_features``: keep the BOS position's
    features as nodes (default: folded into that position's error nodes); ``max_feature_nodes``: compute at most
    this many feature rows, in influence order (the logits' rows first, then, batch by batch, the features of
    largest influence through the rows so far; features left out keep their edges into the computed rows)."""

    max_logits: int = 10
    cumulative: float = 0.95
    node_threshold: float = 0.8
    edge_threshold: float = 0.98
    batch: int = 64
    bos_features: bool = False
    max_feature_nodes: int | None = None


def attribution_graph(model, transcoders, text, *, targets=None, settings: GraphSettings | None = None,
                      **overrides) -> AttributionGraph:
    """The attribution graph of ``text`` (see the module docstring); options: :class:`GraphSettings` fields, as
    ``settings`` or keywords."""
    from dataclasses import fields, replace

    known = {f.name for f in fields(GraphSettings)}
    if set(overrides) - known:
        raise TypeError(f"unknown graph settings {sorted(set(overrides) - known)}; allowed: {', '.join(sorted(known))}")
    o = replace(settings or GraphSettings(), **overrides)
    max_logits, cumulative, batch, max_feature_nodes = o.max_logits, o.cumulative, o.batch, o.max_feature_nodes
    node_threshold, edge_threshold = o.node_threshold, o.edge_threshold
    import pandas as pd

    from ...core.inputs import check_int
    from .prune import graph_scores, influence, normalise, prune

    lrm = LocalReplacement(model, transcoders, text, bos_features=o.bos_features)
    probs = torch.softmax(lrm.logits, -1)
    logit_ids = logit_targets(model, probs, targets=targets, max_logits=max_logits, cumulative=cumulative)
    n_layers, n_pos = model.n_layers, lrm.n_pos
    strs = model.to_str_tokens(lrm.tokens[0])
    rows = []
    for L in sorted(lrm.acts):
        a = lrm.acts[L]
        for p, f in zip(*a.nonzero(as_tuple=True)):
            rows.append({"kind": "feature", "layer": L, "pos": int(p), "feature": int(f), "token": strs[int(p)],
                         "activation": float(a[p, f])})
    feature_index = {(r["layer"], r["pos"], r["feature"]): i for i, r in enumerate(rows)}
    for L in range(n_layers):
        for p in range(n_pos):
            rows.append({"kind": "error", "layer": L, "pos": p, "feature": None, "token": strs[p],
                         "activation": float(lrm.error[L][p].norm())})
    for p in range(n_pos):
        rows.append({"kind": "embedding", "layer": None, "pos": p, "feature": None, "token": strs[p],
                     "activation": float(lrm.embed[p].norm())})
    for t in logit_ids:
        rows.append({"kind": "logit", "layer": None, "pos": n_pos - 1, "feature": t, "token": decode(model, t),
                     "activation": float(lrm.logits[t] - lrm.logits.mean())})
    nodes = pd.DataFrame(rows, columns=["kind", "layer", "pos", "feature", "token", "activation"])
    n = len(nodes)
    n_feat = len(feature_index)
    logit_probs = probs[logit_ids]
    A = torch.zeros(n, n)
    A[n - len(logit_ids):] = compute_rows(lrm, [("logit", t) for t in logit_ids], feature_index, n, batch)
    keys = list(feature_index)
    done = torch.zeros(n_feat, dtype=torch.bool)
    limit = n_feat if max_feature_nodes is None else min(check_int("max_feature_nodes", max_feature_nodes, 1), n_feat)
    w = torch.zeros(n)
    w[n - len(logit_ids):] = logit_probs
    if limit == n_feat:      # every row: no order needed
        A[:n_feat] = compute_rows(lrm, [("feature", *k) for k in keys], feature_index, n, batch)
        done[:] = True
    while int(done.sum()) < limit:
        # the next rows: the features of largest influence on the logits through the rows computed so far
        inf = influence(normalise(A), w)[:n_feat].masked_fill(done, -1.0)
        pick = inf.topk(min(batch, limit - int(done.sum()))).indices
        A[pick] = compute_rows(lrm, [("feature", *keys[i]) for i in pick.tolist()], feature_index, n, batch)
        done[pick] = True
    node_mask, edge_mask, node_inf = prune(A, nodes["kind"].to_numpy(), logit_probs, node_threshold, edge_threshold)
    nodes["influence"] = node_inf.numpy()
    nodes["kept"] = node_mask.numpy()
    scores = graph_scores(A, nodes["kind"].to_numpy(), logit_probs)
    scores.update({f"pruned_{k}": v for k, v in graph_scores(A * edge_mask, nodes["kind"].to_numpy(),
                                                              logit_probs).items()})
    return AttributionGraph(nodes, A, logit_probs, strs, scores, edge_mask,
                            meta={"text": text if isinstance(text, str) else "", "n_layers": n_layers,
                                  "token_ids": lrm.tokens[0].tolist(), "model": model.source,
                                  "node_threshold": node_threshold, "edge_threshold": edge_threshold,
                                  "layers_with_transcoders": sorted(lrm.acts), "feature_rows": int(done.sum())})
