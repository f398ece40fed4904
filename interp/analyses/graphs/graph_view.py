"""The interactive view of an attribution graph (:mod:`interp.analyses.graphs`): the pruned graph laid out by
layer and position, offline (no script or font from the network)."""

from __future__ import annotations

from pathlib import Path

from ...core.views import View, rounded

SCRIPT = Path(__file__).with_name("graph_view.js")  # draws the view kind "attribution_graph"


def graph_view(g, cards: dict | None = None) -> View:
    """``cards``: ``{(layer, feature): FeatureCard}`` shown when a feature node is clicked."""
    n = g.nodes
    kept = [int(i) for i in n.index[n["kept"]]]
    where = {i: j for j, i in enumerate(kept)}
    nodes = []
    for i in kept:
        r = n.loc[i]
        nodes.append({"kind": r["kind"], "layer": None if r["layer"] != r["layer"] or r["layer"] is None
                      else int(r["layer"]), "pos": int(r["pos"]),
                      "feature": None if r["feature"] is None or r["feature"] != r["feature"] else int(r["feature"]),
                      "token": str(r["token"]), "activation": rounded([float(r["activation"])], 4)[0],
                      "influence": rounded([float(r["influence"])], 4)[0]})
    edges = [[where[int(s)], where[int(t)], rounded([float(w)], 4)[0]]
             for t, s, w in g.edges(pruned=True).itertuples(index=False) if int(s) in where and int(t) in where]
    data = {"title": "attribution graph", "summary": g.summary(), "tokens": list(g.tokens),
            "n_layers": g.meta.get("n_layers", 0), "nodes": nodes, "edges": edges, "scores": g.scores,
            "cards": {f"{k[0]}_{k[1]}": c.view().data for k, c in (cards or {}).items()},
            "note": "edges: direct effects in the local replacement model (attention patterns and norm scales frozen, "
                    "each MLP its transcoder plus an error); green raises its target, red lowers it"}
    return View("attribution_graph", data["title"], data, script=SCRIPT)
