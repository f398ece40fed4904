"""Why layer 11's transcoder explains so little (issue 33): where its MLP write's variance sits, on dev text.

    .venv/bin/python studies/features_layer11/diagnose.py [--tokens 40000] [--layers 10,11,12] [--threads 2]
        [--dictionaries FOLDER] [--out FILE]

The stored held-out table (studies/features_full/quality.json) has layer 11 at FVU 0.91 while the same MLP keeping
only its 16 largest neurons reaches 0.067, and yet splicing the transcoder in costs no cross-entropy (score 1.05).
That pattern fits a write whose variance sits in a few tokens and a few neurons that the loss barely depends on.
This script measures it on the **dev** split (the held-out split is left for the table), for each layer given:

* the share of the write's variance (Σ|y − ȳ|² over tokens) in the top 0.1% and 1% of tokens, and which tokens;
* the share of the transcoder's squared error in those same tokens, and the FVU with them left out;
* the share of the top tokens' write carried by one neuron (the largest |hidden × its down-projection row|);
* the neuron baseline's FVU with and without those tokens.

Writes a JSON (default: results.json next to this file) with the commit and command.
"""

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import torch

import interp
from interp.analyses.features.data import batches, counted
from interp.analyses.features.quality import _neuron_write
from interp.core.hooks import capture
from interp.cli.features import add_dictionary_options, dictionaries_for
from interp.core.provenance import provenance

HERE = Path(__file__).parent


def collect(model, tc, layers, tokens, seed=0, bos_rows=False):
    """Per counted dev token and layer: |y − ȳ|² (after the mean is known), the transcoder's and the neuron
    baseline's squared errors, the largest single neuron's write and the token ids."""
    names = [n for L in layers for n in (tc[L].site.read, tc[L].site.write, f"blocks.{L}.mlp.hook_post")]
    ys = {L: [] for L in layers}
    err = {L: [] for L in layers}
    err_n = {L: [] for L in layers}
    top_neuron = {L: [] for L in layers}
    ids, where, seen = [], [], 0
    with torch.no_grad():
        for toks in batches(model, "dev", rows=4, seed=seed, bos_rows=bos_rows):
            if seen >= tokens:
                break
            flat = counted(toks, model.bos_token_id).reshape(-1)
            store, _ = capture(model, toks, names, stop=True, description="layer 11 diagnosis")
            acts = {n: t.reshape(-1, t.shape[-1])[flat].float() for n, t in store.items()}
            ids.append(toks.reshape(-1)[flat])
            # each counted token's position in its row and since its document's BOS, and the token before it
            pos = torch.arange(toks.shape[1]).expand_as(toks)
            since = pos - torch.cummax(torch.where(toks == model.bos_token_id, pos, 0), 1).values
            prev = torch.cat([toks[:, :1], toks[:, :-1]], 1)
            where.append(torch.stack([pos.reshape(-1), since.reshape(-1), prev.reshape(-1)], 1)[flat])
            for L in layers:
                d = tc[L].eval()
                x, y, h = acts[d.site.read], acts[d.site.write], acts[f"blocks.{L}.mlp.hook_post"]
                ys[L].append(y)
                err[L].append((y - d.decode(d.encode(x), x)).pow(2).sum(-1))
                err_n[L].append((y - _neuron_write(model, L, h, d)).pow(2).sum(-1))
                w_out = model.mlp_out_module(L).weight.float()          # [d_model, d_mlp]
                contrib = h.abs() * w_out.norm(dim=0)                   # |hidden| x its row's norm: [n, d_mlp]
                v, j = contrib.max(-1)
                top_neuron[L].append(torch.stack([j.float(), v]))
            seen += int(flat.sum())
    return ({L: torch.cat(ys[L]) for L in layers}, {L: torch.cat(err[L]) for L in layers},
            {L: torch.cat(err_n[L]) for L in layers}, {L: torch.cat(top_neuron[L], 1) for L in layers},
            torch.cat(ids), torch.cat(where))


def layer_report(model, y, e, e_n, tn, ids, where) -> dict:
    dev = (y - y.mean(0)).pow(2).sum(-1).double()                    # [n] each token's share of the variance
    order = dev.argsort(descending=True)
    total, n = float(dev.sum()), len(dev)
    out = {"tokens": n, "fvu": float(e.sum()) / total, "fvu_neurons": float(e_n.sum()) / total,
           "largest_10": [{"token": model.to_str_tokens(ids[i:i + 1])[0],
                           "before": model.to_str_tokens(where[i, 2:3])[0], "pos_in_row": int(where[i, 0]),
                           "pos_in_document": int(where[i, 1]), "variance_share": float(dev[i]) / total,
                           "transcoder_error_share": float(e[i] / e.sum()), "neuron": int(tn[0, i]),
                           "neuron_share_of_norm": float(tn[1, i]) / float(y[i].norm())}
                          for i in order[:10].tolist()]}
    for frac in (0.001, 0.01):
        top = order[: max(1, int(n * frac))]
        rest = order[len(top):]
        dev_rest = float(((y[rest] - y[rest].mean(0)).pow(2).sum(-1)).sum())
        neurons = Counter(int(j) for j in tn[0, top].tolist()).most_common(3)
        out[f"top_{frac:g}"] = {
            "n": len(top), "variance_share": float(dev[top].sum()) / total,
            "transcoder_error_share": float(e[top].sum() / e.sum()),
            "fvu_without": float(e[rest].sum()) / dev_rest, "fvu_neurons_without": float(e_n[rest].sum()) / dev_rest,
            "most_common_tokens": Counter(model.to_str_tokens(ids[top])).most_common(8),
            "largest_neuron_most_common": neurons,
            "median_norm_ratio_to_rest": float(dev[top].sqrt().median() / dev[rest].sqrt().median())}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=40_000)
    ap.add_argument("--layers", default="10,11,12")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bos-rows", action="store_true", help="rows that start with BOS (TrainSettings.bos_rows)")
    add_dictionary_options(ap)
    ap.add_argument("--out", default=str(HERE / "results.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    prov = provenance(" ".join(["python studies/features_layer11/diagnose.py", *sys.argv[1:]]))
    model = interp.load()
    tc = dictionaries_for(args, model)      # --dictionaries FOLDER, else the cached defaults
    layers = [int(x) for x in args.layers.split(",")]
    ys, err, err_n, tn, ids, where = collect(model, tc, layers, args.tokens, bos_rows=args.bos_rows)
    doc = {"split": "dev", "dictionaries": tc.settings,
           "layers": {L: layer_report(model, ys[L], err[L], err_n[L], tn[L], ids, where) for L in layers}, **prov}
    Path(args.out).write_text(json.dumps(doc, indent=1))
    for L, r in doc["layers"].items():
        t1, t01 = r["top_0.01"], r["top_0.001"]
        print(f"layer {L}: FVU {r['fvu']:.3f} (neurons {r['fvu_neurons']:.3f}) over {r['tokens']:,} dev tokens; "
              f"top 0.1% of tokens hold {t01['variance_share']:.1%} of the variance, {t01['transcoder_error_share']:.1%}"
              f" of the error; without them FVU {t01['fvu_without']:.3f} (neurons {t01['fvu_neurons_without']:.3f}); "
              f"top 1%: {t1['variance_share']:.1%} / {t1['transcoder_error_share']:.1%}, FVU without "
              f"{t1['fvu_without']:.3f}; tokens {t01['most_common_tokens'][:4]}; neurons "
              f"{t01['largest_neuron_most_common']}")
        for t in r["largest_10"][:5]:
            print(f"    {t['before']!r} {t['token']!r} row pos {t['pos_in_row']}, doc pos {t['pos_in_document']}: "
                  f"{t['variance_share']:.1%} of the variance, {t['transcoder_error_share']:.1%} of the error, "
                  f"neuron {t['neuron']} ({t['neuron_share_of_norm']:.2f} of the write's norm)")


if __name__ == "__main__":
    main()
