"""The full-budget transcoders of issue 33 and their held-out quality table (hours: not part of `make test`).

    .venv/bin/python studies/features_full/run.py [--model smollm2-135m] [--threads 2] [--eval-tokens 200000]

Trains every layer at the defaults of TrainSettings (resumable: run it again after an interruption and it continues
from the checkpoint in the cache), then evaluates on the held-out split: FVU, dead latents over `--eval-tokens`,
CE-loss scores over 8,192 tokens, every layer replaced at once, each beside the k-largest-neurons baseline and the
dictionaries as training started. Writes quality.json (the table, the settings, the commit, the machine, the
wall times) and quality.png next to this file; the dictionaries stay in the cache (`interp.features.cached`).
"""

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch

import interp
from interp.analyses.features.quality import evaluate_transcoders
from interp.core.provenance import provenance

HERE = Path(__file__).parent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-tokens", type=int, default=200_000)
    ap.add_argument("--ce-tokens", type=int, default=8192)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    command = ("python studies/features_full/run.py" + (f" --model {args.model}" if args.model else "")
               + f" --threads {args.threads} --eval-tokens {args.eval_tokens} --ce-tokens {args.ce_tokens}")
    # the commit the code ran at and whether it was dirty, read before the hours of work (HEAD may move meanwhile)
    ran = provenance(command)
    commit = ran["commit"]
    model = interp.load(args.model)
    t = time.time()
    tc = interp.train_transcoders(model)
    train_s = time.time() - t
    t = time.time()
    q = evaluate_transcoders(model, tc, tokens=args.eval_tokens, ce_tokens=args.ce_tokens)
    eval_s = time.time() - t
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    doc = {**q.to_json(), "commit": commit,
           "command": command,
           "model": model.source, "train_seconds_this_call": round(train_s), "eval_seconds": round(eval_s),
           "machine": {"cpu": cpu, "cores": os.cpu_count(), "threads": args.threads, "torch": torch.__version__,
                       "python": platform.python_version()},
           "date": time.strftime("%Y-%m-%d %H:%M"), "provenance": ran}
    name = "quality" if args.model is None else f"quality_{args.model}"
    (HERE / f"{name}.json").write_text(json.dumps(doc, indent=1))
    q.plot(out=HERE / f"{name}.png")
    print(q.summary())


if __name__ == "__main__":
    main()
