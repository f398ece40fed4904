"""Gemma 3 270M's dead latents on dev (issue 33): today's AuxK settings against two stronger ones (see README.md).

Each configuration trains transcoders on layers 0 and 5 together (the two layers over the 5% bound on the
held-out table) at the full budget of TrainSettings (2M counted train tokens), then scores them on the dev split:
FVU, the k-largest-neurons baseline, dead latents over the whole split (at most --eval-tokens). The dictionaries
stay in the cache, so an interrupted configuration continues where it stopped when run again.

    .venv/bin/python studies/features_gemma_dead/run.py [--only NAME,...] [--threads 2]
"""

import argparse
import json
import time
from pathlib import Path

import torch

import interp
from interp.analyses.features.quality import evaluate_transcoders
from interp.core.provenance import provenance

HERE = Path(__file__).parent
LAYERS = [0, 5]
CONFIGS = {"today": {}, "aux_coef_0.125": {"aux_coef": 1 / 8}, "dead_tokens_25k": {"dead_tokens": 25_000},
           # the second study (README: "Restarting dead latents"): restarts during the first half of training
           "resample_200k": {"resample_every": 200_000, "resample_until": 0.5},
           "resample_100k": {"resample_every": 100_000, "resample_until": 0.5},
           # replaced resample_100k before it ran (README): restarts until 90% of the run
           "resample_100k_to_0.9": {"resample_every": 100_000, "resample_until": 0.9},
           # README, "Seed noise": today's settings with another seed, to size the spread a choice must beat
           "today_seed1": {"seed": 1},
           # README, "AuxK through softplus": the crowding study's second candidate, on two seeds from the start
           "aux_softplus": {"aux_act": "softplus"}, "aux_softplus_seed1": {"aux_act": "softplus", "seed": 1}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=None, help="comma-separated names of " + ", ".join(CONFIGS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-tokens", type=int, default=200_000)
    ap.add_argument("--study", default="auxk", help="which study the rows belong to: auxk (the first) or restarts")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise SystemExit(f"--only {unknown}; allowed: {', '.join(CONFIGS)}")
    torch.set_num_threads(args.threads)
    model = interp.load("gemma3-270m")
    for name in names:
        ran = provenance(f"python studies/features_gemma_dead/run.py --only {name} --threads {args.threads} "
                         f"--eval-tokens {args.eval_tokens} --study {args.study}")
        t = time.time()
        ds = interp.train_transcoders(model, LAYERS, progress=False, **CONFIGS[name])
        train_s = time.time() - t
        score_and_store(model, ds, name, CONFIGS[name], args.study, train_s, ran, args.eval_tokens)


def score_and_store(model, ds, name: str, overrides: dict, study: str, train_s: float, ran: dict,
                    eval_tokens: int) -> dict:
    """Score ``ds`` on dev (FVU, the neurons, at init, dead latents, L0) and append its row to results.jsonl."""
    t = time.time()
    q = evaluate_transcoders(model, ds, tokens=eval_tokens, ce_tokens=0, split="dev", progress=False)
    row = {"config": name, "overrides": overrides, "steps": ds.settings["steps"],
           "resampled": ds.settings.get("resampled"), "study": study,
           "train_seconds_this_call": round(train_s), "eval_seconds": round(time.time() - t),
           "dev_tokens": q.settings["tokens"], "date": time.strftime("%Y-%m-%d %H:%M"), "provenance": ran,
           "layers": {int(r["layer"]): {k: r[k] for k in ("fvu", "fvu_neurons", "fvu_init", "dead_frac", "l0")}
                      for r in q.rows}}
    print(json.dumps(row), flush=True)
    with open(HERE / "results.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    return row


if __name__ == "__main__":
    main()
