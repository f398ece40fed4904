"""The graph's exactness on a full model with its full transcoders (issue 34; minutes, not part of `make test`).

    .venv/bin/python studies/graphs_exactness/run.py [--model NAME] [--threads 2] [--dictionaries FOLDER]

The tests check the local replacement model and the edges on tiny models. This asks the same of real graphs, on
the prompts of notebook 09 (and an IOI prompt), with every active feature given its row:

* the frozen forward (attention patterns and norm scales frozen, each MLP its transcoder plus its error) against
  the real model's logits at every position: the largest absolute difference, and that over the logits' spread;
* each feature's and logit node's incoming edges plus its constant terms (the frozen forward with every source at
  zero) against its value (a feature's pre-activation, a logit minus the mean logit): the largest error over the
  tests' float32 bound, 1e-4 of the value plus 1e-6 of the terms' absolute sum (at most 1 meets it);
* an active feature's value against its activation in the graph.

Writes results.json (``results_NAME.json`` with ``--model NAME``) here.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import interp
from interp.analyses.graphs import LocalReplacement
from interp.cli.features import add_dictionary_options, dictionaries_for
from interp.core.provenance import provenance

HERE = Path(__file__).parent
PROMPTS = ("The Eiffel Tower is located in the city of",
           "The Eiffel Tower is in a country whose official language is",
           "When Mary and John went to the store, John gave a drink to")


def values(lrm, rows, *, zero_sources: bool) -> torch.Tensor:
    """Each row's value in the frozen forward: a feature's pre-activation, or a logit minus the mean logit."""
    with torch.no_grad():
        logits, reads = lrm.run(1, keep_reads=True, zero_sources=zero_sources)
    last = logits[0, -1].float()
    out = []
    for kind, *key in rows:
        if kind == "logit":
            out.append(last[key[0]] - last.mean())
        else:
            L, p, f = key
            d = lrm.dicts[L]
            out.append(d.pre(d.normalise(reads[L][0, p:p + 1].float()))[0, f])
    return torch.stack(out).float()


def check(model, tc, text: str) -> dict:
    t = time.time()
    g = interp.attribution_graph(model, tc, text)
    graph_s = time.time() - t
    lrm = LocalReplacement(model, tc, text)
    with torch.no_grad():
        real = model.forward(model.to_tokens(text))[0].float()          # [pos, vocab]
        frozen, _ = lrm.run(1)
    diff = (frozen[0].float() - real).abs().max()
    nodes = g.nodes
    feats = nodes[nodes["kind"] == "feature"]
    rows = [("feature", int(r.layer), int(r.pos), int(r.feature)) for r in feats.itertuples()]
    logit_rows = nodes.index[nodes["kind"] == "logit"]
    rows += [("logit", int(nodes.loc[i, "feature"])) for i in logit_rows]
    index = list(feats.index) + list(logit_rows)
    value, const = values(lrm, rows, zero_sources=False), values(lrm, rows, zero_sources=True)
    A = g.adjacency[index]
    err = (A.sum(1) + const - value).abs()
    bound = 1e-4 * value.abs() + 1e-6 * (A.abs().sum(1) + const.abs())
    acts = torch.tensor(feats["activation"].to_numpy(), dtype=torch.float32)
    return {"text": text, "tokens": len(g.tokens), "summary": g.summary(), "graph_seconds": round(graph_s, 1),
            "active_features": len(feats), "logit_nodes": [str(x) for x in nodes.loc[logit_rows, "token"]],
            "frozen_vs_real_max_abs": float(diff), "real_logit_std": float(real.std()),
            "edges_plus_constants_over_bound": float((err / bound).max().detach()),
            "rows_outside_bound": int((err > bound).sum()), "rows": len(rows),
            "edges_plus_constants_max_abs": float(err.max()),
            "feature_value_vs_activation_max_abs": float((value[:len(feats)] - acts).abs().max())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="a short name such as gemma3-270m (default: the embedded model)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="the file to write (default: results[_NAME].json here)")
    add_dictionary_options(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    prov = provenance(" ".join(["python studies/graphs_exactness/run.py", *sys.argv[1:]]))
    model = interp.load(args.model)
    tc = dictionaries_for(args, model)
    out = []
    for text in PROMPTS:
        r = check(model, tc, text)
        out.append(r)
        print(f"{text!r}: frozen vs real {r['frozen_vs_real_max_abs']:.2e} (logit std {r['real_logit_std']:.2f}); "
              f"edges + constants vs value: {r['edges_plus_constants_over_bound']:.2f} of the bound "
              f"({r['rows_outside_bound']} of {r['rows']} rows outside it); "
              f"feature values vs activations {r['feature_value_vs_activation_max_abs']:.2e}; "
              f"{r['active_features']} features, {r['graph_seconds']} s", flush=True)
    assert model.attached_hook_count() == 0
    doc = {"model": model.source, "prompts": out, "dictionaries": tc.settings, **prov}
    name = "results" if args.model is None else f"results_{args.model}"
    Path(args.out or HERE / f"{name}.json").write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
