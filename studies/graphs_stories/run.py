"""Notebook 09's three graphs and its swap, rerun with the full transcoders (issue 34; minutes, not part of `make test`).

    .venv/bin/python studies/graphs_stories/run.py [--threads 2] [--dictionaries FOLDER]

Notebook 09 runs every analysis live on transcoders trained on 40,000 tokens, so that it reruns in the tests; its
null results (no France-like feature on the two-step prompt, a failed Paris→Rome swap) were about those weak
dictionaries. This script applies the notebook's rules unchanged, fixed there before these dictionaries existed, to
the full transcoders (2,000,000 tokens; `studies/features_full/run.py` or `interp features train`):

* the Eiffel prompt: the graph's summary and scores, its top-10 features ablated one at a time in the real model
  (sign agreement, Spearman), and the graph's influence per (layer, position) beside exhaustive MLP patching of
  each cell (The Colosseum → The Eiffel Tower; metric logit(Paris) − logit(Rome));
* the two-step prompt: among the 20 most influential features, those whose decoder promotes France, French or
  Paris among its 10 most promoted tokens;
* the IOI prompt: the share of influence by position, the 8 most influential features;
* the swap: Paris's top-k features off, and Rome's top-k (from the Colosseum prompt's graph) clamped on, for
  k = 5, 10 (the rule), 20, with 10 seeded draws of random active Colosseum features in place of the top 10 as the
  control; the notebook's after-the-fact signed variant is run too and labelled so, and the rule that
  studies/graphs_swap chose on dev fact pairs (contrast, k = 40, clamped at 2x), with its halves alone.

Writes results.json (with the commit, command and machine) next to this file, or to ``--out``.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import interp
from interp.analyses.patching.activation import spearman
from interp.cli.features import add_dictionary_options, dictionaries_for
from interp.core.provenance import provenance

HERE = Path(__file__).parent
PROMPT = "The Eiffel Tower is located in the city of"
CORRUPT = "The Colosseum is located in the city of"
TWO_STEP = "The Eiffel Tower is in a country whose official language is"
IOI = "When Mary and John went to the store, John gave a drink to"
FRANCE_LIKE = ("France", "French", "Paris")


def records(frame, cols) -> list[dict]:
    """Rows as dicts, the node's indices as ints (the nodes frame holds them as floats beside its NaNs)."""
    return [{c: int(r[c]) if c in ("layer", "pos", "feature") else r[c] for c in cols}
            for r in frame[cols].to_dict("records")]


def centred_logit(model, tc, toks, token, edits=()) -> float:
    """The real model's logit of ``token`` minus the mean logit, with the feature edits applied (errors kept)."""
    with torch.no_grad(), interp.features.intervene(model, tc, list(edits)):
        lg = model.forward(toks)[0, -1].float()
    return float(lg[token] - lg.mean())


def eiffel(model, tc, g) -> dict:
    toks, paris = model.to_tokens(PROMPT), model.to_single_token(" Paris")
    n = g.nodes
    base = float(n.loc[n["kind"] == "logit", "activation"].iloc[0])
    top = g.predicted_ablation().head(10)
    measured = [centred_logit(model, tc, toks, paris, [(int(r.layer), int(r.feature), "ablate", 0.0, [int(r.pos)])])
                - base for r in top.itertuples()]
    predicted = top["predicted"].tolist()
    metric = interp.patching.logit_diff([" Paris"], [" Rome"])
    patch = interp.activation_patching(model, PROMPT, CORRUPT, metric, over="mlp_out", positions="each")
    grid = torch.zeros_like(patch.values)
    inner = n[n["kind"].isin(["feature", "error"])]
    for (layer, pos), v in inner.groupby(["layer", "pos"])["influence"].sum().items():
        grid[int(layer), int(pos)] = v
    tokens = model.to_str_tokens(toks[0])

    def top5(v):
        return [f"L{int(i) // v.shape[1]} {tokens[int(i) % v.shape[1]]!r}" for i in v.flatten().topk(5).indices]

    return {"summary": g.summary(), "scores": g.scores,
            "top10": records(top, ["layer", "pos", "token", "feature", "activation", "influence"]),
            "predicted": predicted, "measured": measured,
            "sign_agreement": sum((a > 0) == (b > 0) for a, b in zip(predicted, measured)),
            "spearman": spearman(predicted, measured),
            "cells": grid.numel(), "spearman_cells": spearman(patch.values.flatten().tolist(), grid.flatten().tolist()),
            "patching_top5": top5(patch.values), "graph_top5": top5(grid)}


def two_step(model, tc) -> dict:
    g = interp.attribution_graph(model, tc, TWO_STEP, targets=[" French"])
    rows = []
    for r in g.predicted_ablation().head(20).itertuples():
        promoted = [t for t, _ in interp.features.promoted_tokens(model, tc[int(r.layer)], int(r.feature))["promoted"]]
        rows.append({"layer": int(r.layer), "pos": int(r.pos), "token": r.token, "feature": int(r.feature),
                     "influence": float(r.influence), "predicted": float(r.predicted),
                     "france_like": [t for t in promoted if t.strip() in FRANCE_LIKE], "promoted": promoted})
    return {"summary": g.summary(), "scores": g.scores, "top20": rows,
            "passing": sum(bool(r["france_like"]) for r in rows)}


def ioi(model, tc) -> dict:
    g = interp.attribution_graph(model, tc, IOI, targets=[" Mary", " John"])
    n = g.nodes
    inner = n[n["kind"].isin(["feature", "error", "embedding"])]
    share = inner.groupby(["pos", "token"])["influence"].sum() / inner["influence"].sum()
    top = g.predicted_ablation().head(8)
    return {"summary": g.summary(), "scores": g.scores,
            "share_by_position": [{"pos": int(p), "token": t, "share": float(s)} for (p, t), s in share.items()],
            "top8": records(top, ["layer", "pos", "token", "feature", "activation", "influence", "predicted"])}


def swap(model, tc, g) -> dict:
    gc = interp.attribution_graph(model, tc, CORRUPT, targets=[" Rome"])
    toks = model.to_tokens(PROMPT)
    paris, rome = model.to_single_token(" Paris"), model.to_single_token(" Rome")
    eiffel_top, colosseum = g.predicted_ablation(), gc.predicted_ablation()

    def probs(off, on, scale=1.0):
        edits = ([(int(r.layer), int(r.feature), "ablate", 0.0, [int(r.pos)]) for r in off.itertuples()] +
                 [(int(r.layer), int(r.feature), "clamp", scale * float(r.activation), [int(r.pos)])
                  for r in on.itertuples()])
        with torch.no_grad(), interp.features.intervene(model, tc, edits):
            p = model.forward(toks)[0, -1].float().softmax(-1)
        v, i = p.topk(3)
        return {"p_paris": p[paris].item(), "p_rome": p[rome].item(),
                "top3": [(model.to_str_tokens(torch.tensor([int(j)]))[0], float(x)) for x, j in zip(v, i)]}

    rows = [{"intervention": "none", **probs(eiffel_top.head(0), colosseum.head(0))}]
    for k in (5, 10, 20):
        rows.append({"intervention": f"k={k}: Paris's top k off", **probs(eiffel_top.head(k), colosseum.head(0))})
        rows.append({"intervention": f"k={k}: off, and Rome's top k on",
                     **probs(eiffel_top.head(k), colosseum.head(k))})
    rows.append({"intervention": "signed, k=10: off, and on (chosen after, in notebook 09)",
                 **probs(eiffel_top.sort_values("predicted").head(10), colosseum.sort_values("predicted").head(10))})
    # the rule studies/graphs_swap chose on 40 dev fact pairs (after this script's own rules): both answers as logit
    # nodes, the 40 features each graph predicts most raise its answer over the other, clamped at twice their value
    both, both_c = (interp.attribution_graph(model, tc, p, targets=t) for p, t in
                    ((PROMPT, [" Paris", " Rome"]), (CORRUPT, [" Rome", " Paris"])))

    def contrast(graph, k=40):
        return graph.supporting(0, against=1, k=k)

    rows.append({"intervention": "contrast, k=40, on at 2x (chosen on dev pairs, studies/graphs_swap)",
                 **probs(contrast(both), contrast(both_c), 2.0)})
    rows.append({"intervention": "contrast, k=40: off only", **probs(contrast(both), both_c.nodes.iloc[0:0])})
    rows.append({"intervention": "contrast, k=40: on at 2x only",
                 **probs(both.nodes.iloc[0:0], contrast(both_c), 2.0)})
    gen, wins = torch.Generator().manual_seed(0), 0
    for _ in range(10):
        pick = torch.randperm(len(colosseum), generator=gen)[:10].tolist()
        r = probs(eiffel_top.head(10), colosseum.iloc[pick])
        wins += r["p_rome"] > r["p_paris"]
    return {"colosseum_summary": gc.summary(), "rows": rows, "random_control_rome_wins_of_10": int(wins)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    add_dictionary_options(ap)
    ap.add_argument("--out", default=str(HERE / "results.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    # read before the work: HEAD may move while it runs
    prov = provenance(" ".join(["python studies/graphs_stories/run.py", *sys.argv[1:]]))
    model = interp.load()
    tc = dictionaries_for(args, model)      # --dictionaries FOLDER, else the cached defaults
    t0 = time.time()
    g = interp.attribution_graph(model, tc, PROMPT, targets=[" Paris"])
    doc = {"eiffel": eiffel(model, tc, g), "two_step": two_step(model, tc), "ioi": ioi(model, tc),
           "swap": swap(model, tc, g), "dictionaries": tc.settings, "seconds": round(time.time() - t0),
           **prov}
    Path(args.out).write_text(json.dumps(doc, indent=1, default=float))
    e, s = doc["eiffel"], doc["swap"]
    print(f"Eiffel: sign {e['sign_agreement']}/10, Spearman {e['spearman']:.2f}; cells Spearman "
          f"{e['spearman_cells']:.2f}; two-step: {doc['two_step']['passing']} of 20 France-like; swap:")
    for r in s["rows"]:
        print(f"  {r['intervention']:58} p(Paris) {r['p_paris']:.3f}  p(Rome) {r['p_rome']:.3f}")
    print(f"  random control: Rome above Paris in {s['random_control_rome_wins_of_10']} of 10")


if __name__ == "__main__":
    main()
