"""How much does one ROME edit raise the loss of text it was not about? Dev split only (``loss_rise_seq.json``): the
numbers behind ``interp.editing.defaults.GUARD_BOUND``, the ``max_loss_rise`` sequential_edits gives ROME on the embedded model.

The rule fixed before the numbers were seen was: the bound is the smallest multiple of 0.5 that is at least twice
the largest rise of any dev edit in the sequential run (each measured on top of the earlier ones), so that no dev
edit would be refused. The dev run itself held edits of the kind that collapsed the test run: Times Square (edit
52) raised the loss by 2.79% (the evaluation's drift went 3.1% -> 6.0% in that one step) and Windows (edit 97) by
0.80%; every other edit by at most 0.48%. Both are "each"-rule edits whose v* did not converge (target
probability 0.40 and 0.45, below the failure diagnosis's 0.5: edits that do not flip their prompt; Times Square
has efficacy 0 alone, key_rule.json). An edit that fails anyway is not worth protecting, so the rule became: twice
the largest rise of the dev edits whose v* converged, rounded up to 0.5 — 2 x 0.48 -> 1.0 (the pre-set rule would
have given 6.0). The change is stated in this study's README.md too.

    OMP_NUM_THREADS=1 .venv/bin/python studies/loss_rise/loss_rise_study.py --n 100 --sequential \
        --out studies/loss_rise/loss_rise_seq.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

import interp
from interp import rome
from interp.editing.keys import key_stats
from interp.editing.drift import drift_set, drift_texts, text_nll


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--sequential", action="store_true", help="keep every edit (rises on top of earlier ones)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = interp.load(device="cpu")
    layer = rome.default_layer(model)
    stats = key_stats(model, layer, rome.RomeHparams.mom2_n_tokens, progress=False)
    texts = drift_set(model, drift_texts())
    loss0 = text_nll(model, texts)
    records = rome.load_records(split="dev")[: args.n]
    rows, kept, t0 = [], [], time.perf_counter()
    before = loss0  # the loss of the model as the next edit finds it
    try:
        for f in records:
            base = {"case_id": f.case_id, "subject": f.subject, "target_new": f.target_new}
            try:
                e = rome.edit(model, f.prompt, f.subject, f.target_new, layer, stats=stats, max_loss_rise=1e9)
            except ValueError as err:  # the target is already the model's answer
                rows.append({**base, "error": str(err)})
                continue
            after = text_nll(model, texts)
            rows.append({**base, "loss_rise": e.norms["loss_rise"], "drift_rise": 100 * (after - before) / before,
                         "drift": 100 * (after - loss0) / loss0, "relative_update": e.norms["relative_update"],
                         "key_dot": e.norms["key_dot"], "key_rule": e.norms["key_rule"],
                         "p_final": math.exp(-e.norms["nll_final"])})
            if args.sequential:
                kept.append(e)
                before = after
            else:
                e.revert()
            print(f"{len(rows)}/{len(records)} {f.subject}: rise {rows[-1]['loss_rise']:+.3f}% "
                  f"(eval texts {rows[-1]['drift_rise']:+.3f}%)", flush=True)
    finally:
        for e in reversed(kept):
            e.revert()
    ok = [r for r in rows if "error" not in r]
    rises = sorted(r["loss_rise"] for r in ok)
    doc = {"command": "OMP_NUM_THREADS=1 .venv/bin/python studies/loss_rise/loss_rise_study.py "
                      + " ".join(sys.argv[1:]),
           "split": "dev", "layer": layer, "sequential": args.sequential, "n": len(ok),
           "wall_seconds": time.perf_counter() - t0,
           "loss_rise_max": rises[-1], "loss_rise_median": rises[len(rises) // 2],
           "corr_guard_vs_eval_texts": float(torch.corrcoef(torch.tensor(
               [[r["loss_rise"] for r in ok], [r["drift_rise"] for r in ok]], dtype=torch.float64))[0, 1]),
           "rows": rows}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print({k: v for k, v in doc.items() if k != "rows"})


if __name__ == "__main__":
    main()
