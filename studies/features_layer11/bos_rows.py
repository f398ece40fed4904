"""Rows that start with BOS (issue 33, dev only): does the fix the layer-11 diagnosis points to work?

Layers 11 and 28 hold a few positions (position 1 of a row cut from the middle of a document, no BOS before it)
whose MLP writes carry most of the layer's variance and of its transcoder's error (``README.md``). With
``TrainSettings.bos_rows`` every row starts with BOS and holds ``ctx - 1`` tokens of the stream, so no row has a
position without BOS before it. This trains the two layers' transcoders both ways on the first
``--tokens`` counted train tokens (default settings otherwise, no cache) and scores each on ``--eval-tokens`` dev
tokens read both ways: FVU beside the k-largest-neurons baseline at the same L0.

    OMP_NUM_THREADS=1 .venv/bin/python studies/features_layer11/bos_rows.py --bos-rows 0 --out /tmp/plain.json &
    OMP_NUM_THREADS=1 .venv/bin/python studies/features_layer11/bos_rows.py --bos-rows 1 --out /tmp/bos.json
    .venv/bin/python studies/features_layer11/bos_rows.py --merge /tmp/plain.json /tmp/bos.json \\
        --out studies/features_layer11/bos_rows.json
"""

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

import interp
from interp.analyses.features import train_transcoders
from interp.analyses.features.quality import evaluate_transcoders
from interp.core.provenance import provenance

LAYERS = [11, 28]


def run(args) -> dict:
    torch.set_num_threads(1)
    model = interp.load()
    t0 = time.perf_counter()
    ds = train_transcoders(model, LAYERS, tokens=args.tokens, bos_rows=bool(args.bos_rows), cache=False,
                           progress=False)
    out = {"trained_with_bos_rows": bool(args.bos_rows), "tokens": args.tokens, "eval_tokens": args.eval_tokens,
           "train_seconds": time.perf_counter() - t0, "scored": {}}
    for bos in (False, True):  # evaluate_transcoders reads the rows the settings name: scored both ways so
        view = replace(ds, settings={**ds.settings, "bos_rows": bos})
        q = evaluate_transcoders(model, view, tokens=args.eval_tokens, ce_tokens=0, split="dev", progress=False)
        out["scored"]["bos_rows" if bos else "plain_rows"] = {
            int(r["layer"]): {"fvu": r["fvu"], "fvu_neurons": r["fvu_neurons"], "fvu_init": r["fvu_init"],
                              "dead_frac": r["dead_frac"], "l0": r["l0"]} for r in q.rows}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bos-rows", type=int, choices=[0, 1])
    ap.add_argument("--tokens", type=int, default=200_000)
    ap.add_argument("--eval-tokens", type=int, default=100_000)
    ap.add_argument("--merge", nargs="+")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.merge:
        runs = [json.loads(Path(p).read_text()) for p in args.merge]
        doc = {"layers": LAYERS, "split": "dev", "runs": runs,
               **provenance(" ; ".join(r["command"] for r in runs) + " ; ... --merge " + " ".join(args.merge))}
        for r in runs:
            r.pop("commit", None), r.pop("dirty", None), r.pop("version", None), r.pop("machine", None)
        Path(args.out).write_text(json.dumps(doc, indent=1))
        for r in runs:
            for how, layers in r["scored"].items():
                for L, v in layers.items():
                    print(f"trained {'BOS' if r['trained_with_bos_rows'] else 'plain'} rows, scored on {how}: layer "
                          f"{L}: FVU {v['fvu']:.3f}, neurons {v['fvu_neurons']:.3f}, ratio "
                          f"{v['fvu'] / v['fvu_neurons']:.2f}, L0 {v['l0']:.1f}")
        return
    if args.bos_rows is None:
        sys.exit("--bos-rows 0|1 (or --merge FILES)")
    out = run(args)
    out.update(provenance(f"OMP_NUM_THREADS=1 .venv/bin/python studies/features_layer11/bos_rows.py --bos-rows "
                          f"{args.bos_rows} --tokens {args.tokens} --eval-tokens {args.eval_tokens} --out {args.out}"))
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out["scored"]))


if __name__ == "__main__":
    main()
