"""Dev sweep that chose the transcoders' width, k and learning rate (dev text only; see README.md).

Each configuration trains transcoders on layers 5, 15 and 25 together on the first TOKENS counted tokens of the
train split, and is scored on 40k counted tokens of the dev split: FVU, and the same MLP keeping its k largest
hidden activations (the neuron baseline at the same L0). One thread, so it can run beside other work.

    OMP_NUM_THREADS=1 .venv/bin/python studies/features_sweep/sweep.py [--tokens 200000] [--out results.jsonl]
"""

import argparse
import json
import subprocess
import time
from pathlib import Path

import torch

import interp
from interp.analyses.features import train_transcoders
from interp.analyses.features.quality import evaluate_transcoders
from interp.analyses.features.train import Site, TrainSettings, estimate_seconds

CONFIGS = [  # (width, k, lr)
    (2304, 32, 2e-3), (2304, 32, 4e-3), (4608, 32, 2e-3), (2304, 16, 2e-3), (2304, 64, 2e-3), (4608, 64, 2e-3),
]
LAYERS = [5, 15, 25]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=200_000)
    ap.add_argument("--eval-tokens", type=int, default=40_000)
    ap.add_argument("--out", default=str(Path(__file__).with_name("results.jsonl")))
    ap.add_argument("--worker", type=int, default=0, help="run configurations worker, worker + workers, ...")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = interp.load()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    for width, k, lr in CONFIGS[args.worker::args.workers]:
        t = time.time()
        ds = train_transcoders(model, LAYERS, width=width, k=k, lr=lr, tokens=args.tokens, cache=False,
                               progress=False)
        train_s = time.time() - t
        q = evaluate_transcoders(model, ds, tokens=args.eval_tokens, ce_tokens=0, split="dev", progress=False)
        full = TrainSettings(width=width, k=k, lr=lr, tokens=2_000_000)
        sites = {L: Site.transcoder(model, L) for L in range(model.n_layers)}
        row = {"width": width, "k": k, "lr": ds.settings["learning_rate"], "tokens": args.tokens,
               "init": ds.settings["init"], "fit_batches": ds.settings["fit_batches"],
               "train_seconds": round(train_s, 1), "commit": commit, "date": time.strftime("%Y-%m-%d %H:%M"),
               "full_run_estimate_hours_1thread": round(estimate_seconds(model, sites, full) / 3600, 2),
               "layers": {int(r["layer"]): {"fvu": r["fvu"], "fvu_neurons": r["fvu_neurons"],
                                            "fvu_init": r["fvu_init"], "dead_frac": r["dead_frac"]}
                          for r in q.rows}}
        print(json.dumps(row), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
