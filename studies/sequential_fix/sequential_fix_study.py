"""Dev study for ROME's gradual drift in long runs of sequential edits (issue #13): which settings make each
edit smaller without losing the fact. In 200 edits in a row the loss drift was close to the sum of the 200
single edits' drifts (7.61% vs 7.09%, studies/editing_at_scale/README.md), so a candidate is judged by the
mean drift of single edits on 40 dev records, next to their efficacy / paraphrase / neighbourhood scores.
Writes sequential_fix_dev.json (beside this script). Dev split only; one process per pair of settings, one
thread each:

    OMP_NUM_THREADS=1 .venv/bin/python studies/sequential_fix/sequential_fix_study.py \
        default '{}' stop02 '{"v_loss_stop": 0.2}'
    (and the pairs stop05/clamp1, stop05c15/clamp15, clamp2/stop05c2 as in the JSON's "settings")
"""

import fcntl
import json
import statistics
import sys
from pathlib import Path

import torch

import interp  # noqa: E402
from interp import rome  # noqa: E402
from interp.editing.eval.run import evaluate  # noqa: E402

OUT = Path(__file__).with_name("sequential_fix_dev.json")
KEEP = ["case_id", "efficacy_score_post", "paraphrase_score_post", "neighborhood_score_post", "loss_drift",
        "delta_norm", "clamp", "opt_p_final", "failure"]


def main(name, hp, name2, hp2, n=40):
    torch.set_num_threads(1)
    model = interp.load(device="cpu")
    recs = rome.load_records(split="dev")[:n]
    res = evaluate(model, recs, "rome", hparams=hp, baseline="rome", baseline_hparams=hp2, generation=False,
                   lens=False, drift=True, progress=False)
    with open(OUT.with_suffix(".lock"), "w") as lock:  # pairs run in parallel processes: one writer at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        write_settings(res, name, name2)


def write_settings(res, name, name2):
    doc = json.loads(OUT.read_text()) if OUT.exists() else {"settings": {}}
    for nm, r in ((name, res), (name2, res.baseline)):
        rows = json.loads(r.frame.reset_index()[KEEP].to_json(orient="records"))
        norms = [x["delta_norm"] for x in rows if x["delta_norm"] is not None]
        doc["settings"][nm] = {"hparams": r.hparams, "summary": r.summary(),
                               "mean_loss_drift": statistics.mean(x["loss_drift"] for x in rows),
                               "median_delta_norm": statistics.median(norms), "rows": rows}
        print(nm, r.summary())
    OUT.write_text(json.dumps(doc, indent=1, default=str))


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4]))
