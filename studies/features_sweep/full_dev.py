"""The condition added after stage 2 of the second sweep (README.md, "Second sweep"): every layer at the full
budget, today's settings and the pick, each scored on 200k counted tokens of the dev split (hours; not in
`make test`).

    .venv/bin/python studies/features_sweep/full_dev.py --config NAME [--threads 2] [--eval-tokens 200000]

Trains every layer's transcoder with the named settings on 2M train tokens (cached and resumable: run it again
after an interruption and it continues from the checkpoint; the dictionaries stay in `interp.features.cached`),
then scores them on dev: FVU, the k-largest-neurons baseline, dead latents over the tokens read. Appends one row to
`full_dev.jsonl`. The held-out split is not read.
"""

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

import interp
from interp.analyses.features import train_transcoders
from interp.analyses.features.quality import evaluate_transcoders
from interp.core.provenance import provenance

HERE = Path(__file__).parent
CONFIGS = {
    # named explicitly, so the names keep meaning what they meant when the condition was written
    "today": dict(rows=4, lr=2e-3, fit_batches=16, adam="foreach"),
    # the pick; fused Adam is the same optimiser in one kernel (tests/test_features.py), a quarter less time at
    # rows 1 (bench_features, one thread: 1.20 s a step against 1.62)
    "rows1_lr0.002": dict(rows=1, lr=2e-3, fit_batches=64, adam="fused"),
    # the pick with its dead latents restarted every 100k tokens in the first half (resample.py; README,
    # "The pick with restarts")
    "rows1_lr0.002_restarts": dict(rows=1, lr=2e-3, fit_batches=64, adam="fused", resample_every=100_000,
                                   resample_until=0.5),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", choices=sorted(CONFIGS), required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-tokens", type=int, default=200_000)
    ap.add_argument("--out", default=str(HERE / "full_dev.jsonl"))
    ap.add_argument("--layers", default=None, help="comma-separated layers (default: every layer)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ran = provenance(f"python studies/features_sweep/full_dev.py --config {args.config} --threads {args.threads} "
                     f"--eval-tokens {args.eval_tokens} --out {Path(args.out).name}"
                     + (f" --layers {args.layers}" if args.layers else ""))
    model = interp.load()
    layers = [int(x) for x in args.layers.split(",")] if args.layers else None
    t = time.time()
    ds = train_transcoders(model, layers, **CONFIGS[args.config])
    train_s = time.time() - t
    t = time.time()
    q = evaluate_transcoders(model, ds, tokens=args.eval_tokens, ce_tokens=0, split="dev")
    layers = {int(r["layer"]): {"fvu": r["fvu"], "fvu_neurons": r["fvu_neurons"], "dead_frac": r["dead_frac"]}
              for r in q.rows}
    row = {"config": args.config, "overrides": CONFIGS[args.config], "steps": ds.settings["steps"],
           "resampled": ds.settings.get("resampled"),
           "eval_tokens": q.settings["tokens"], "median_fvu": statistics.median(v["fvu"] for v in layers.values()),
           "max_dead_frac": max(v["dead_frac"] for v in layers.values()),
           "train_seconds_this_call": round(train_s), "eval_seconds": round(time.time() - t),
           "threads": args.threads, "torch": torch.__version__, "python": platform.python_version(),
           "date": time.strftime("%Y-%m-%d %H:%M"), "provenance": ran, "layers": layers}
    with open(args.out, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps({k: v for k, v in row.items() if k != "layers"}))


if __name__ == "__main__":
    main()
