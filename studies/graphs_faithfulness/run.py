"""Are attribution graphs faithful to the real model? (issue 34; hours on 2 cores: not part of `make test`.)

    .venv/bin/python studies/graphs_faithfulness/run.py [--model NAME] [--n 50] [--top 10] [--threads 2] \
        [--dictionaries FOLDER]

For each of ``--n`` test-split fact prompts (``interp.patching.fact_pairs`` over the records of
interp/editing/records/facts.jsonl whose answer the model ranks first, seeded), the graph of the prompt with the true answer as its one logit node, then:

* feature by feature (the ``--top`` features by influence on that logit): the graph's prediction of what ablating
  the feature does to the logit (minus the mean logit) — its total effect in the local replacement model, paths
  through other features included (``AttributionGraph.predicted_ablation``) — against the real model with that
  feature ablated (its error kept, ``interp.features.intervene``): sign agreement and Spearman's rho;
* layer by layer: the graph's influence of each layer's features, summed, against exhaustive activation patching
  of each layer's MLP output (all positions, clean into corrupted: `interp.activation_patching` on
  `interp.patching.fact_pairs`), both averaged over the prompts: Spearman's rho over layers.

Writes results.json (``results_NAME.json`` with ``--model NAME``; with the commit, command, machine and settings)
next to this file and prints the figures. Another model reads its own records (``load_records(model=...)``).
"""

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

import interp
from interp.analyses.patching.activation import spearman
from interp.cli.features import add_dictionary_options, dictionaries_for
from interp.core.provenance import provenance
from interp.editing.facts import load_records

HERE = Path(__file__).parent


def bootstrap_over_prompts(per_prompt: list, seed: int, draws: int = 1000) -> dict:
    """95% percentile intervals of the sign agreement and the pooled Spearman, resampling prompts (the ablations
    of one prompt are not independent of each other)."""
    gen = torch.Generator().manual_seed(seed)
    sign, rho = [], []
    for _ in range(draws):
        pick = torch.randint(len(per_prompt), (len(per_prompt),), generator=gen).tolist()
        pred = [x for i in pick for x in per_prompt[i]["predicted"]]
        meas = [x for i in pick for x in per_prompt[i]["measured"]]
        sign.append(sum((a > 0) == (b > 0) for a, b in zip(pred, meas)) / len(pred))
        rho.append(spearman(pred, meas))
    q = torch.tensor([0.025, 0.975], dtype=torch.float64)
    return {"sign_agreement": torch.quantile(torch.tensor(sign, dtype=torch.float64), q).tolist(),
            "spearman_feature_effects": torch.quantile(torch.tensor(rho, dtype=torch.float64), q).tolist()}


def known_facts(model, split: str) -> list[dict]:
    """The split's records whose answer the model ranks first (layers_contrast.py reads the same ones)."""
    known = []
    for r in load_records(split=split, model=model):
        with torch.no_grad():
            top = int(model.run(r.prompt.format(r.subject))[0, -1].argmax())
        if model.to_str_tokens(torch.tensor([top]))[0] == r.target_true:
            known.append(r.to_dict())
    return known


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="a short name such as gemma3-270m (default: the embedded model)")
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    add_dictionary_options(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    prov = provenance(" ".join(["python studies/graphs_faithfulness/run.py", *sys.argv[1:]]))
    model = interp.load(args.model)
    tc = dictionaries_for(args, model)
    t0 = time.time()
    known = known_facts(model, "test")
    # clean / corrupted pairs (subject swapped within a relation): the graphs read the clean prompts, the layer
    # comparison patches MLP outputs from clean into corrupted on the same pairs
    pairs = interp.patching.fact_pairs(model, known, n=args.n, seed=args.seed)
    chosen = [(m["case_id"], prompt, answer) for m, prompt, answer in zip(pairs.meta, pairs.clean, pairs.answers)]
    pairs_pred, pairs_meas, per_prompt, layer_inf = [], [], [], torch.zeros(model.n_layers)
    layer_inf_err = torch.zeros(model.n_layers)
    for case_id, prompt, answer in chosen:
        t = time.time()
        g = interp.attribution_graph(model, tc, prompt, targets=[answer])
        n = g.nodes
        feats = g.predicted_ablation().head(args.top)
        toks = model.to_tokens(prompt)
        tid = model.to_single_token(answer)
        base_v = float(n[n["kind"] == "logit"]["activation"].iloc[0])      # the real model's logit minus the mean
        meas, prd = [], []
        for _, row in feats.iterrows():
            edit = [(int(row["layer"]), int(row["feature"]), "ablate", 0.0, [int(row["pos"])])]
            with torch.no_grad(), interp.features.intervene(model, tc, edit):
                lg = model.forward(toks)[0, -1].float()
            meas.append(float(lg[tid] - lg.mean()) - base_v)
            prd.append(float(row["predicted"]))
        pairs_pred += prd
        pairs_meas += meas
        per_layer = n[n["kind"].isin(["feature", "error"])].pivot_table(
            index="layer", columns="kind", values="influence", aggfunc="sum", fill_value=0.0)
        per_layer = per_layer.reindex(range(model.n_layers), fill_value=0.0)
        layer_inf += torch.tensor(per_layer["feature"].to_numpy())
        layer_inf_err += torch.tensor(per_layer.sum(1).to_numpy())
        per_prompt.append({"case_id": case_id, "prompt": prompt, "target": answer, "predicted": prd,
                           "measured": meas, "ablated": feats[["layer", "pos", "feature"]].astype(int).values.tolist(),
                           "summary": g.summary(), "seconds": round(time.time() - t, 1),
                           "scores": g.scores})
        print(f"{len(per_prompt)}/{len(chosen)} {prompt!r}: sign agreement "
              f"{sum((a > 0) == (b > 0) for a, b in zip(prd, meas))}/{len(prd)}, {time.time() - t:.0f} s", flush=True)
    patch = interp.activation_patching(model, pairs, over="mlp_out", positions="all")
    patch_by_layer = patch.values.mean(-1).tolist() if patch.values.dim() > 1 else patch.values.tolist()
    sign = sum((a > 0) == (b > 0) for a, b in zip(pairs_pred, pairs_meas)) / max(len(pairs_pred), 1)
    doc = {"n_prompts": len(chosen), "top": args.top, "sign_agreement": sign,
           "spearman_feature_effects": spearman(pairs_pred, pairs_meas),
           "intervals_95": bootstrap_over_prompts(per_prompt, args.seed),
           "median_spearman_per_prompt": float(torch.tensor([spearman(r["predicted"], r["measured"])
                                                            for r in per_prompt]).nanmedian()),
           "graph_layer_influence_with_errors": (layer_inf_err / max(len(chosen), 1)).tolist(),
           "spearman_layers_with_errors": spearman(layer_inf_err.tolist(), patch_by_layer),
           "graph_layer_influence": (layer_inf / max(len(chosen), 1)).tolist(),
           "patching_layer_effect": patch_by_layer,
           "spearman_layers": spearman(layer_inf.tolist(), patch_by_layer), "prompts": per_prompt,
           "commit": prov["commit"], "command": prov["command"], "provenance": prov, "model": model.source,
           "dictionaries": tc.settings,
           "machine": {"cores": os.cpu_count(), "threads": args.threads, "torch": torch.__version__,
                       "python": platform.python_version()}, "seconds": round(time.time() - t0)}
    name = "results" if args.model is None else f"results_{args.model}"
    (HERE / f"{name}.json").write_text(json.dumps(doc, indent=1))
    print(f"sign agreement {sign:.3f} over {len(pairs_pred)} ablations; Spearman {doc['spearman_feature_effects']:.3f}; "
          f"layers: Spearman {doc['spearman_layers']:.3f} (features), {doc['spearman_layers_with_errors']:.3f} "
          f"(features and errors); 95% intervals over prompts {doc['intervals_95']}")


if __name__ == "__main__":
    main()
