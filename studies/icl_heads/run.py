"""Do the induction heads carry the in-context-learning score? (issue 35: notebook 04's 8 contexts, widened.)

    .venv/bin/python studies/icl_heads/run.py [--n-docs 32] [--n-random 10] [--threads 2]

Notebook 04 measures Olsson et al.'s ICL score (loss at token 500 minus loss at token 50) on 8 contexts of
concatenated Wikipedia summaries, with its top-5 induction heads mean-ablated and with one layer-matched random set:
neither change is distinguishable from zero there. This runs the same measurement (`interp.induction.icl_ablation`,
the notebook's settings: windows of 21 tokens, `context="concat"`, shuffle seed 0) on ``--n-docs`` contexts, with
``--n-random`` layer-matched random head sets, so the top set's change is read against a spread of random changes
and not against one draw. The heads are the notebook's: `interp.induction_heads(seq_len=50, batch=4, seed=0)`, top 5
by induction score. The notebook's 8 contexts are the first 8 of these (same shuffle).

Writes results.json next to this file (commit, command, machine, settings, every condition's per-context scores)
and prints the summary.
"""

import argparse
import json
import os
import platform
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

import interp
from interp import induction as ind

HERE = Path(__file__).parent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-docs", type=int, default=32)
    ap.add_argument("--n-random", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    t0 = time.time()
    model = interp.load()
    scan = interp.induction_heads(model, seq_len=50, batch=4, seed=0)
    top = [tuple(h) for h in scan.top(5).index]
    ctx = dict(context="concat", early=50, late=500, window=21, n_docs=args.n_docs, batch_size=8)
    abl = ind.icl_ablation(model, top, n_random=args.n_random, seed=0, **ctx)
    print(abl.summary())

    base = abl.baseline.row_scores
    top_change = abl.top.row_scores - base
    rand_changes = np.stack([r.row_scores - base for r in abl.random])        # [n_random, n_docs]
    rand_means = rand_changes.mean(1)
    doc = {"result": abl.to_json(), "top_heads": [list(h) for h in top],
           "top_change": float(top_change.mean()),
           "random_changes": rand_means.tolist(),
           "random_change_mean": float(rand_means.mean()), "random_change_sd": float(rand_means.std(ddof=1)),
           # how many random sets move the score at least as much as the top set, either way
           "random_at_least_as_large": int((np.abs(rand_means) >= abs(top_change.mean())).sum()),
           "row_scores": {"baseline": base.tolist(), "top": abl.top.row_scores.tolist(),
                          "random": [r.row_scores.tolist() for r in abl.random]},
           "settings": {**ctx, "seed": 0, "n_random": args.n_random, "mode": "mean", "match_layers": True,
                        "heads_from": "interp.induction_heads(model, seq_len=50, batch=4, seed=0).top(5)"},
           "commit": commit,
           "command": f"python studies/icl_heads/run.py --n-docs {args.n_docs} --n-random {args.n_random} "
                      f"--threads {args.threads}",
           "machine": {"cores": os.cpu_count(), "threads": args.threads, "torch": torch.__version__,
                       "python": platform.python_version()}, "seconds": round(time.time() - t0)}
    (HERE / "results.json").write_text(json.dumps(interp.core.results.jsonable(doc), indent=1))
    print(f"top-5 change {doc['top_change']:+.3f}; random sets {doc['random_change_mean']:+.3f} "
          f"(SD {doc['random_change_sd']:.3f}); {doc['random_at_least_as_large']}/{args.n_random} random sets move it "
          f"at least as much; {doc['seconds']} s")


if __name__ == "__main__":
    main()
