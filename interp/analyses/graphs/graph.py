"""``attribution_graph(model, transcoders, text)``: the direct-effect graph of one prompt in its local replacement
model (:mod:`.replacement`), pruned by influence on the logits (:mod:`.prune`).

Nodes, in this order: active features (layer, position, feature; ordered by layer, then position, then feature;
with ``max_feature_nodes``, those given rows),
error nodes (layer, position), token embeddings (position), logits (the top next tokens up to a cumulative
probability of ``0.95``, at most ``max_logits``, or the ``targets`` given). ``adjacency[t, s]`` is the direct
effect of source ``s`` on target ``t``: of a feature's pre-activation or a logit (minus the mean logit) — rows for
features and logits, columns for features, errors and embeddings. Rows are computed by backward passes through the
frozen model, ``batch`` targets at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...core.inputs import check_int, decode
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
        active = self.meta.get("active_features", int((n["kind"] == "feature").sum()))
        rows = self.meta.get("feature_rows", active)
        folded = f" ({rows} with rows, the rest folded into error nodes)" if rows < active else ""
        return (f"attribution graph of {len(self.tokens)} tokens for {logits}: {active} active features{folded}, "
                f"{int((kept['kind'] == 'feature').sum())} kept after pruning; replacement score "
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

    def predicted_ablation(self, logit: int = 0, *, against: int | None = None):
        """The graph's prediction of ablating each feature on its own: the change of logit node ``logit`` (its
        logit minus the mean logit) when the feature is set to 0 in the local replacement model, through every
        path (``-a_s * T_s`` with ``T = j + Jᵀ T``: ``j`` the direct edges into the logit and ``J[t, s] = A[t, s] /
        a_s`` those between features, each divided by its source's activation). ``against``: another logit
        node; then the change of the difference logit[logit] − logit[against] (the effect is linear in ``j``, so
        the contrast's direct edges are the two rows' difference). -> the feature nodes' frame with a
        ``predicted`` column, largest influence first. Compare with ``interp.features.intervene`` on the real
        model, whose attention, norms and TopK selections are not frozen."""
        feat, acts, total, _ = self._total_effects(logit, against)
        out = self.nodes[self.nodes["kind"] == "feature"].copy()
        out["predicted"] = (-total * acts).numpy()
        return out.sort_values("influence", ascending=False)

    def supporting(self, logit: int = 0, *, against: int | None = None, k: int | None = None):
        """The features the graph predicts raise logit node ``logit`` (over ``against``) most: those whose
        :meth:`predicted_ablation` is negative, most negative first, the first ``k`` of them (all by default). The
        rule ``studies/graphs_swap`` chose on dev fact pairs for which features to turn off on one prompt and on
        (from another prompt's graph) to swap an answer; ``interp graph --against`` lists them."""
        k = check_int("k", k, 1, allow_none=True)
        f = self.predicted_ablation(logit, against=against).sort_values("predicted")
        f = f[f["predicted"] < 0]
        return f if k is None else f.head(k)

    def contributions(self, logit: int = 0, *, against: int | None = None):
        """Every node's total contribution to logit node ``logit`` (minus ``against``, as in
        :meth:`predicted_ablation`) in the local replacement model: its direct edge plus its edges into features
        times those features' total effects ``T``. A feature's is minus its predicted ablation; an error or
        embedding node's is what removing its write would change, its paths through features included. ->
        the nodes frame with a ``contribution`` column (0 at the logit nodes)."""
        feat, _, total, row = self._total_effects(logit, against)
        c = row + total @ self.adjacency.double()[feat]
        c[self.kinds("logit")] = 0.0
        out = self.nodes.copy()
        out["contribution"] = c.numpy()
        return out

    def _total_effects(self, logit, against):
        """(feature mask, their activations, ``T`` over features, the logit (contrast) row of the adjacency)."""
        feat = self.kinds("feature")
        logits = self.kinds("logit").nonzero().flatten()
        logit = check_int("logit", logit, 0, len(logits) - 1)
        against = check_int("against", against, 0, len(logits) - 1, allow_none=True)
        if against == logit:
            raise ValueError(f"against={against} is the logit itself; allowed: another of 0..{len(logits) - 1}")
        A = self.adjacency.double()
        acts = torch.tensor(self.nodes["activation"].to_numpy(), dtype=torch.float64)[feat]
        row = A[int(logits[logit])] - (A[int(logits[against])] if against is not None else 0.0)
        J = A[feat][:, feat] / acts[None, :]                                   # d pre_t / d a_s, direct
        total = torch.linalg.solve((torch.eye(len(acts), dtype=torch.float64) - J).T, row[feat] / acts)
        return feat, acts, total, row

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


def compute_rows(lrm: LocalReplacement, targets: list, blocks: dict, out: torch.Tensor, batch: int) -> None:
    """Fill ``out`` [len(targets), n_cols] with the direct effects of every source on each target (see the module
    docstring); ``blocks``: :func:`source_blocks`."""
    for start in range(0, len(targets), batch):
        part = targets[start:start + batch]
        _fill(out[start:start + len(part)], lrm.tap_gradients(part), lrm, blocks)


@torch.no_grad()
def source_blocks(lrm: LocalReplacement, feature_index: dict) -> dict:
    """Every source's written vector, grouped by the tap it is written to: ``{"embed": (vectors [pos, d], columns
    [pos]), L: (errors [pos, d], columns [pos], feature writes [pos, kmax, d], columns [pos, kmax])}``, each
    feature's ``a_f * W_dec[f] * out_scale`` at its position, padded with zero vectors at column -1."""
    n_feat, n_pos = len(feature_index), lrm.n_pos
    err0, emb0 = n_feat, n_feat + lrm.model.n_layers * n_pos
    blocks = {"embed": (lrm.embed, torch.arange(emb0, emb0 + n_pos))}
    for L in range(lrm.model.n_layers):
        err = (lrm.error[L], torch.arange(err0 + L * n_pos, err0 + (L + 1) * n_pos))
        if L not in lrm.acts:
            blocks[L] = (*err, None, None)
            continue
        a, d = lrm.acts[L], lrm.dicts[L]
        kmax = max(int((a != 0).sum(-1).max()), 1)
        vecs = torch.zeros(n_pos, kmax, d.W_dec.shape[1])
        cols = torch.full((n_pos, kmax), -1, dtype=torch.long)
        dec = d.W_dec.float() * d.out_scale.float()                               # [width, d]
        for p in range(n_pos):
            f = a[p].nonzero().flatten()
            vecs[p, :len(f)] = a[p, f, None] * dec[f]
            cols[p, :len(f)] = torch.tensor([feature_index[(L, p, int(k))] for k in f], dtype=torch.long)
        blocks[L] = (*err, vecs, cols)
    return blocks


@torch.no_grad()
def _fill(out, g, lrm, blocks):
    """Each source's edge into the targets of ``out``'s rows: its written vector dotted with the target's gradient
    at the tap it is written to."""
    vecs, cols = blocks["embed"]
    out[:, cols] = torch.einsum("rpd,pd->rp", g["embed"], vecs)
    for L in range(lrm.model.n_layers):
        err, err_cols, feats, feat_cols = blocks[L]
        out[:, err_cols] = torch.einsum("rpd,pd->rp", g[L], err)
        if feats is None:
            continue
        eff = torch.bmm(g[L].transpose(0, 1), feats.transpose(1, 2))            # [pos, rows, kmax]
        real = feat_cols >= 0
        out[:, feat_cols[real]] = eff.transpose(0, 1)[:, real]                  # [rows, n_active]


@dataclass(frozen=True)
class GraphSettings:
    """``max_logits`` / ``cumulative``: the logit nodes (most probable tokens to that probability, at most that
    many) unless targets are given; ``node_threshold`` / ``edge_threshold``: the cumulative influence pruning keeps
    (circuit-tracer's defaults); ``batch``: targets per backward pass; ``bos_features``: keep the BOS position's
    features as nodes (default: folded into that position's error nodes); ``max_feature_nodes``: compute at most
    this many feature rows, in influence order (the logits' rows first, then, every few batches, the features of
    largest influence through the rows so far); a feature left without a row is folded into its (layer, position)
    error node, as circuit-tracer's ``max_feature_nodes`` leaves it out of the graph (here its write still counts,
    so every row still sums to its target's value)."""

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

    from .prune import graph_scores, prune

    known = {f.name for f in fields(GraphSettings)}
    if set(overrides) - known:
        raise TypeError(f"unknown graph settings {sorted(set(overrides) - known)}; allowed: {', '.join(sorted(known))}")
    o = replace(settings or GraphSettings(), **overrides)
    lrm = LocalReplacement(model, transcoders, text, bos_features=o.bos_features)
    probs = torch.softmax(lrm.logits, -1)
    logit_ids = logit_targets(model, probs, targets=targets, max_logits=o.max_logits, cumulative=o.cumulative)
    strs = model.to_str_tokens(lrm.tokens[0])
    nodes, feature_index = _node_frame(model, lrm, strs, logit_ids)
    n, n_feat, n_logit = len(nodes), len(feature_index), len(logit_ids)
    logit_probs = probs[logit_ids]
    limit = n_feat if o.max_feature_nodes is None else min(check_int("max_feature_nodes", o.max_feature_nodes, 1),
                                                           n_feat)
    blocks = source_blocks(lrm, feature_index)
    if limit == n_feat:      # every row, in node order: no ranking needed, and batches stay within a layer
        A = torch.zeros(n, n)
        compute_rows(lrm, [("logit", t) for t in logit_ids], blocks, A[n - n_logit:], o.batch)
        compute_rows(lrm, [("feature", *k) for k in feature_index], blocks, A[:n_feat], o.batch)
    else:
        E, row_nodes = _rows_in_influence_order(lrm, feature_index, blocks, logit_ids, logit_probs, limit, o.batch)
        nodes, A = _fold_unvisited(lrm, nodes, feature_index, E, row_nodes)
    kinds = nodes["kind"].to_numpy()
    node_mask, edge_mask, node_inf = prune(A, kinds, logit_probs, o.node_threshold, o.edge_threshold)
    nodes["influence"] = node_inf.numpy()
    nodes["kept"] = node_mask.numpy()
    scores = graph_scores(A, kinds, logit_probs)
    scores.update({f"pruned_{k}": v for k, v in graph_scores(A * edge_mask, kinds, logit_probs).items()})
    return AttributionGraph(nodes, A, logit_probs, strs, scores, edge_mask,
                            meta={"text": text if isinstance(text, str) else "", "n_layers": model.n_layers,
                                  "token_ids": lrm.tokens[0].tolist(), "model": model.source,
                                  "node_threshold": o.node_threshold, "edge_threshold": o.edge_threshold,
                                  "layers_with_transcoders": sorted(lrm.acts), "feature_rows": limit,
                                  "active_features": n_feat})


def _node_frame(model, lrm: LocalReplacement, strs: list, logit_ids: list):
    """(nodes frame in the module docstring's order, ``{(layer, pos, feature): node index}``)."""
    import pandas as pd

    rows = []
    for L in sorted(lrm.acts):
        a = lrm.acts[L]
        for p, f in zip(*a.nonzero(as_tuple=True)):
            rows.append({"kind": "feature", "layer": L, "pos": int(p), "feature": int(f), "token": strs[int(p)],
                         "activation": float(a[p, f])})
    feature_index = {(r["layer"], r["pos"], r["feature"]): i for i, r in enumerate(rows)}
    for L in range(model.n_layers):
        for p in range(lrm.n_pos):
            rows.append({"kind": "error", "layer": L, "pos": p, "feature": None, "token": strs[p],
                         "activation": float(lrm.error[L][p].norm())})
    for p in range(lrm.n_pos):
        rows.append({"kind": "embedding", "layer": None, "pos": p, "feature": None, "token": strs[p],
                     "activation": float(lrm.embed[p].norm())})
    for t in logit_ids:
        rows.append({"kind": "logit", "layer": None, "pos": lrm.n_pos - 1, "feature": t, "token": decode(model, t),
                     "activation": float(lrm.logits[t] - lrm.logits.mean())})
    return pd.DataFrame(rows, columns=["kind", "layer", "pos", "feature", "token", "activation"]), feature_index


RERANK_EVERY = 4        # batches of rows between re-rankings by influence (circuit-tracer's update_interval)


def _rows_in_influence_order(lrm, feature_index, blocks, logit_ids, logit_probs, limit, batch):
    """``(E [n_logits + limit, n], row_nodes)``: the logits' rows, then ``limit`` feature rows in influence order —
    every ``RERANK_EVERY`` batches, the unvisited features of largest influence through the rows so far, computed
    sorted by layer (a batch's backward pass starts at its highest layer)."""
    from .prune import influence_through_rows, normalise

    n_feat, n_logit = len(feature_index), len(logit_ids)
    n = n_feat + (lrm.model.n_layers + 1) * lrm.n_pos + n_logit
    keys = list(feature_index)
    E = torch.zeros(n_logit + limit, n)
    row_nodes = torch.empty(n_logit + limit, dtype=torch.long)
    compute_rows(lrm, [("logit", t) for t in logit_ids], blocks, E[:n_logit], batch)
    row_nodes[:n_logit] = torch.arange(n - n_logit, n)
    w = torch.zeros(n_logit + limit)
    w[:n_logit] = logit_probs.float()
    done = torch.zeros(n_feat, dtype=torch.bool)
    filled = n_logit
    while filled < len(E):
        inf = influence_through_rows(normalise(E[:filled]), row_nodes[:filled], w[:filled])[:n_feat]
        pick = inf.masked_fill(done, -1.0).topk(min(RERANK_EVERY * batch, len(E) - filled)).indices
        pick = pick.sort().values                     # node order is layer order
        new = slice(filled, filled + len(pick))
        compute_rows(lrm, [("feature", *keys[i]) for i in pick.tolist()], blocks, E[new], batch)
        row_nodes[new] = pick
        done[pick] = True
        filled += len(pick)
    return E, row_nodes


def _fold_unvisited(lrm, nodes, feature_index, E, row_nodes):
    """The graph of the visited features only: each unvisited feature leaves the node set and its edges join its
    (layer, position) error node's (what it writes is added there, so every row's sum is unchanged); the error
    node's activation becomes the norm of the error plus those writes. -> (nodes, adjacency [n', n'])."""
    n_feat = len(feature_index)
    n_pos = lrm.n_pos
    visited = torch.zeros(n_feat, dtype=torch.bool)
    visited[row_nodes[row_nodes < n_feat]] = True
    n_kept = int(visited.sum())
    col = torch.empty(len(nodes), dtype=torch.long)                     # old node index -> new node index
    col[:n_feat][visited] = torch.arange(n_kept)
    keys = torch.tensor(list(feature_index))                             # [n_feat, 3] layer, pos, feature
    col[:n_feat][~visited] = n_kept + keys[~visited, 0] * n_pos + keys[~visited, 1]
    col[n_feat:] = torch.arange(n_feat, len(nodes)) - n_feat + n_kept
    n_new = len(nodes) - n_feat + n_kept
    A = torch.zeros(n_new, n_new)
    A[col[row_nodes]] = torch.zeros(len(E), n_new).index_add_(1, col, E)
    keep = torch.cat([visited, torch.ones(len(nodes) - n_feat, dtype=torch.bool)]).numpy()
    nodes = nodes[keep].reset_index(drop=True)
    with torch.no_grad():
        seen = keys[visited]
        for L, a in lrm.acts.items():
            un = a.clone()
            mine = seen[seen[:, 0] == L]
            un[mine[:, 1], mine[:, 2]] = 0
            d = lrm.dicts[L]
            written = lrm.error[L] + (un @ d.W_dec.float()) * d.out_scale.float()      # [pos, d]
            at = n_kept + L * n_pos
            nodes.loc[at:at + n_pos - 1, "activation"] = written.norm(dim=-1).numpy()
    return nodes, A
