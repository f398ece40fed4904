"""The per-layer comparison with patching, asked the way patching asks it (issue 34; minutes, not part of
`make test`).

    .venv/bin/python studies/graphs_faithfulness/layers_contrast.py --split dev  [--n 40] [--threads 2]
    .venv/bin/python studies/graphs_faithfulness/layers_contrast.py --split test [--n 50] [--model NAME]

run.py compares the graph's influence on the answer's logit, summed by layer, with activation patching of each
layer's MLP output (clean into corrupted, all positions, metric logit(answer) − logit(the swapped subject's
answer)); over 50 test facts, Spearman 0.44. Influence is unsigned and about the answer alone, while patching
measures what separates the two answers. Here each graph carries both answers as logit nodes and every node's
total contribution to logit(answer) − logit(other) in the local replacement model
(``AttributionGraph.contributions(0, against=1)``, paths through later features included) is summed by layer:

* ``signed``: the layer's features' contributions;
* ``absolute``: their absolute values;
* ``signed_with_errors``: the layer's features' and error nodes' contributions (patching moves the whole MLP write,
  error included).

The same pairs as run.py (``fact_pairs`` over the split's known records, ``--seed``), the same patching. Rule,
fixed before any run: on dev, the measure with the highest Spearman over layers (means over pairs) against
patching; on test all three are reported, the dev choice named. Writes layers_contrast_{split}.json here
(``layers_contrast_{split}_NAME.json`` with ``--model NAME``).
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
from run import known_facts      # this folder's run.py: the same known facts, hence the same pairs

HERE = Path(__file__).parent
MEASURES = ("signed", "absolute", "signed_with_errors")


def by_layer(c, n_layers: int) -> dict:
    """The three per-layer sums of one graph's contributions frame."""
    out = {}
    for name, kinds, fn in (("signed", ["feature"], lambda v: v), ("absolute", ["feature"], abs),
                            ("signed_with_errors", ["feature", "error"], lambda v: v)):
        rows = c[c["kind"].isin(kinds)]
        s = rows.assign(v=fn(rows["contribution"])).groupby("layer")["v"].sum()
        out[name] = [float(s.get(L, 0.0)) for L in range(n_layers)]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", choices=("dev", "test"), required=True)
    ap.add_argument("--n", type=int, default=None, help="pairs (default: 40 on dev, 50 on test, as run.py)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default=None, help="a short name such as gemma3-270m (default: the embedded model)")
    add_dictionary_options(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    prov = provenance(" ".join(["python studies/graphs_faithfulness/layers_contrast.py", *sys.argv[1:]]))
    model = interp.load(args.model)
    tc = dictionaries_for(args, model)
    n = args.n or (40 if args.split == "dev" else 50)
    t0 = time.time()
    pairs = interp.patching.fact_pairs(model, known_facts(model, args.split), n=n, seed=args.seed)
    sums = {m: torch.zeros(model.n_layers, dtype=torch.float64) for m in MEASURES}
    per_pair = []
    for i, (x, a, b) in enumerate(zip(pairs.clean, pairs.answers, pairs.wrongs)):
        t = time.time()
        g = interp.attribution_graph(model, tc, x, targets=[a, b])
        layers = by_layer(g.contributions(0, against=1), model.n_layers)
        for m in MEASURES:
            sums[m] += torch.tensor(layers[m], dtype=torch.float64)
        per_pair.append({"clean": x, "answer": a, "other": b, "layers": layers})
        print(f"{i + 1}/{len(pairs)} {x!r}: {time.time() - t:.0f} s", flush=True)
    patch = interp.activation_patching(model, pairs, over="mlp_out", positions="all")
    patch_by_layer = patch.values.reshape(model.n_layers, -1).mean(-1).tolist()
    means = {m: (sums[m] / len(pairs)).tolist() for m in MEASURES}
    rho = {m: spearman(means[m], patch_by_layer) for m in MEASURES}
    doc = {"split": args.split, "n_pairs": len(pairs), "spearman_layers": rho, "graph_layers": means,
           "patching_layer_effect": patch_by_layer, "pairs": per_pair, "dictionaries": tc.settings,
           "model": model.source, "seconds": round(time.time() - t0), **prov}
    if args.split == "dev":
        doc["chosen"] = max(MEASURES, key=lambda m: rho[m])
    name = f"layers_contrast_{args.split}" + ("" if args.model is None else f"_{args.model}")
    (HERE / f"{name}.json").write_text(json.dumps(doc, indent=1))
    print("Spearman over layers against patching: " + ", ".join(f"{m} {v:.3f}" for m, v in rho.items()))
    if "chosen" in doc:
        print("chosen on dev:", doc["chosen"])


if __name__ == "__main__":
    main()
