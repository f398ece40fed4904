"""What training every layer's transcoder costs on Gemma 3 270M, measured against SmolLM2-135M in the same run
(issue 34: "say what training them costs"). Not part of `make test`.

    OMP_NUM_THREADS=1 .venv/bin/python studies/features_cost/run.py --tokens 49152 --threads 1

Each model trains transcoders for all its layers at the defaults of ``TrainSettings`` (width, k, rows, context)
for ``--tokens`` tokens, uncached, and the wall time of every batch is recorded through the trainer's callback.
The rate is taken over the batches after the first ``fit_batches`` (whose ridge fit is a one-off) and the first
two after it; both models share the machine's state, so their ratio is the figure to carry to another machine.
The full-budget cost is the stored SmolLM2 run's wall time (``studies/features_full/quality.json``) times that
ratio, beside the trainer's own estimate (``estimate_seconds``). Writes cost.json next to this file.
"""

import argparse
import json
import os
import resource
import time
from pathlib import Path

import torch

import interp
from interp.analyses.features.train import TrainSettings, estimate_seconds, transcoder_sites
from interp.core.provenance import provenance

HERE = Path(__file__).parent


def measure(name: str, tokens: int) -> dict:
    model = interp.load(name)
    stamps = []
    t0 = time.perf_counter()
    interp.train_transcoders(model, tokens=tokens, cache=False, progress=False,
                             callback=lambda info: stamps.append((time.perf_counter(), info["seen"])))
    wall = time.perf_counter() - t0
    skip = TrainSettings().fit_batches + 2
    (t_a, seen_a), (t_b, seen_b) = stamps[skip - 1], stamps[-1]
    settings = TrainSettings(tokens=2_000_000).check(model.d_model)
    return {"model": name, "layers": model.n_layers, "d_model": model.d_model, "batches": len(stamps),
            "tokens": stamps[-1][1], "wall_seconds": round(wall, 1),
            "tokens_per_second": (seen_b - seen_a) / (t_b - t_a), "batches_timed": len(stamps) - skip,
            "trainer_estimate_2M_seconds": round(estimate_seconds(model, transcoder_sites(model, None), settings)),
            "peak_rss_gb_so_far": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=49152)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    prov = provenance(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '?')} .venv/bin/python "
                      f"studies/features_cost/run.py --tokens {args.tokens} "
                      f"--threads {args.threads}")  # read before the run: HEAD may move meanwhile
    rows = [measure(n, args.tokens) for n in ("smollm2-135m", "gemma3-270m")]
    smol, gemma = rows
    ratio = smol["tokens_per_second"] / gemma["tokens_per_second"]
    full = json.loads((HERE.parent / "features_full" / "quality.json").read_text())
    doc = {"rows": rows, "gemma_seconds_per_smollm2_second": ratio,
           "smollm2_full_run": {"train_seconds": full.get("train_seconds_this_call"),
                                "threads": full.get("machine", {}).get("threads"), "cpu": full.get("machine", {}).get("cpu")},
           "gemma_full_estimate_hours": None if not full.get("train_seconds_this_call")
           else full["train_seconds_this_call"] * ratio / 3600,
           "commit": prov["commit"], "command": prov["command"], "machine": prov["machine"], "date": prov["date"],
           "provenance": prov}
    (HERE / "cost.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
