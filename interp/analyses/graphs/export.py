"""A graph in circuit-tracer's graph-file layout (``circuit_tracer/frontend/graph_models.py``: ``metadata``,
``qParams``, ``nodes``, ``links``), so that its public frontend can open interp's graphs. Node ids follow its
conventions: a feature ``"{layer}_{feature}_{pos}"``, an error ``"{layer}_-1_{pos}"``, an embedding
``"E_{token id}_{pos}"``, a logit ``"{n_layers + 1}_{token id}_{pos}"``. Only the pruned graph is written: kept
nodes, kept edges, and the embeddings and logits always."""

from __future__ import annotations


def _cantor(x: int, y: int) -> int:
    return (x + y) * (x + y + 1) // 2 + y


def _node(r, meta, prob) -> dict:
    n_layers, ids = meta["n_layers"], meta["token_ids"]
    base = {"ctx_idx": int(r.pos), "token_prob": 0.0, "is_target_logit": False, "run_idx": 0, "reverse_ctx_idx": 0,
            "clerp": "", "influence": float(r.influence), "activation": None}
    if r.kind == "feature":
        L, f = int(r.layer), int(r.feature)
        return {**base, "node_id": f"{L}_{f}_{r.pos}", "feature": _cantor(L, f), "layer": str(L),
                "feature_type": "cross layer transcoder", "jsNodeId": f"{L}_{f}-0", "activation": float(r.activation)}
    if r.kind == "error":
        L = int(r.layer)
        return {**base, "node_id": f"{L}_-1_{r.pos}", "feature": -1, "layer": str(L),
                "feature_type": "mlp reconstruction error", "jsNodeId": f"{L}_-1-{r.pos}"}
    if r.kind == "embedding":
        t = ids[int(r.pos)]
        return {**base, "node_id": f"E_{t}_{r.pos}", "feature": int(r.pos), "layer": "E", "feature_type": "embedding",
                "jsNodeId": f"E_{t}-{r.pos}"}
    t = int(r.feature)
    return {**base, "node_id": f"{n_layers + 1}_{t}_{r.pos}", "feature": t, "layer": str(n_layers + 1),
            "feature_type": "logit", "token_prob": prob, "is_target_logit": False, "jsNodeId": f"L_{t}-{r.pos}",
            "clerp": f'Output "{r.token}" (p={prob:.3f})'}


def circuit_tracer_json(graph, slug: str) -> dict:
    nodes = graph.nodes
    probs = dict(zip(nodes.index[nodes["kind"] == "logit"], graph.logit_probs.tolist()))
    out = {}
    for i, r in zip(nodes.index, nodes.itertuples()):
        if r.kept:
            out[i] = _node(r, graph.meta, float(probs.get(i, 0.0)))
    first_logit = min(probs) if probs else None
    if first_logit in out:
        out[first_logit]["is_target_logit"] = True
    links = [{"source": out[s]["node_id"], "target": out[t]["node_id"], "weight": w}
             for t, s, w in graph.edges(pruned=True).itertuples(index=False) if s in out and t in out]
    used = {x["source"] for x in links} | {x["target"] for x in links}
    keep = [n for n in out.values() if n["node_id"] in used or n["feature_type"] in ("embedding", "logit")]
    meta = {"slug": slug, "scan": f"interp-{graph.meta.get('model', 'model')}", "transcoder_list": [],
            "prompt_tokens": list(graph.tokens), "prompt": graph.meta.get("text", ""),
            "node_threshold": graph.meta.get("node_threshold"), "schema_version": 1}
    qparams = {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""}
    return {"metadata": meta, "qParams": qparams, "nodes": keep, "links": links}
