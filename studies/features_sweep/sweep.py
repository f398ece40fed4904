"""Dev sweeps that chose the transcoders' settings (dev text only; see README.md).

Each configuration trains transcoders on layers 5, 15 and 25 together on the first TOKENS counted tokens of the
train split, and is scored on 40k counted tokens of the dev split: FVU, and the same MLP keeping its k largest
hidden activations (the neuron baseline at the same L0). One thread, so it can run beside other work.

    OMP_NUM_THREADS=1 .venv/bin/python studies/features_sweep/sweep.py [--set size|steps] [--tokens 200000] \
        [--only NAME,...] [--worker W --workers N] [--out FILE]

``--set size`` is the first sweep (width, k, lr; ``results.jsonl``); ``--set steps`` the second (rows per batch,
hence optimiser steps per token, and lr; ``steps_200k.jsonl``, ``steps_2m.jsonl``).
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
from interp.analyses.features.train import TrainSettings, estimate_seconds, transcoder_sites

HERE = Path(__file__).parent
SETS = {
    # name -> settings changed from TrainSettings' defaults at the time of the sweep
    "size": {f"w{w}_k{k}_lr{lr:g}": dict(width=w, k=k, lr=lr) for w, k, lr in [
        (2304, 32, 2e-3), (2304, 32, 4e-3), (4608, 32, 2e-3), (2304, 16, 2e-3), (2304, 64, 2e-3), (4608, 64, 2e-3)]},
    # fit_batches scales with 1/rows so the least-squares start reads the same 16 rows (~16k tokens) in every run
    "steps": {f"rows{r}_lr{lr:g}": dict(rows=r, lr=lr, fit_batches=64 // r) for r, lr in [
        (4, 2e-3), (2, 2e-3), (2, 1.4e-3), (1, 2e-3), (1, 1e-3), (4, 4e-3)]},
}
LAYERS = [5, 15, 25]


def run_config(model, name: str, overrides: dict, tokens: int, eval_tokens: int, commit: str) -> dict:
    """Train one configuration on LAYERS, score it on dev; the row written to the results file."""
    t = time.time()
    ds = train_transcoders(model, LAYERS, tokens=tokens, cache=False, progress=False, **overrides)
    train_s = time.time() - t
    q = evaluate_transcoders(model, ds, tokens=eval_tokens, ce_tokens=0, split="dev", progress=False)
    full = TrainSettings(**{**overrides, "tokens": 2_000_000})
    s = ds.settings
    return {"config": name, "width": s["width"], "k": s["k"], "lr": s["learning_rate"], "rows": s["rows"],
            "tokens": tokens, "steps": s["steps"], "init": s["init"], "fit_batches": s["fit_batches"],
            "train_seconds": round(train_s, 1), "commit": commit, "date": time.strftime("%Y-%m-%d %H:%M"),
            "full_run_estimate_hours_1thread": round(estimate_seconds(model, transcoder_sites(model), full) / 3600, 2),
            "layers": {int(r["layer"]): {"fvu": r["fvu"], "fvu_neurons": r["fvu_neurons"],
                                         "fvu_init": r["fvu_init"], "dead_frac": r["dead_frac"]}
                       for r in q.rows}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", choices=sorted(SETS), default="size")
    ap.add_argument("--only", default=None, help="comma-separated configuration names of the set")
    ap.add_argument("--tokens", type=int, default=200_000)
    ap.add_argument("--eval-tokens", type=int, default=40_000)
    ap.add_argument("--out", default=str(HERE / "results.jsonl"))
    ap.add_argument("--worker", type=int, default=0, help="run configurations worker, worker + workers, ...")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    configs = SETS[args.set]
    names = args.only.split(",") if args.only else list(configs)
    unknown = [n for n in names if n not in configs]
    if unknown:
        raise SystemExit(f"--only {unknown}: not in set {args.set!r}; allowed: {', '.join(configs)}")
    torch.set_num_threads(1)
    model = interp.load()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    for name in names[args.worker::args.workers]:
        row = run_config(model, name, configs[name], args.tokens, args.eval_tokens, commit)
        print(json.dumps(row), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
