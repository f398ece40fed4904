"""Mass and sequential editing runs behind notebook 05b (the ``*.json`` beside this script; the notebook only
reads them). From the repository root::

    OMP_NUM_THREADS=1 .venv/bin/python studies/editing_at_scale/editing_at_scale.py --editor rome --n 250 \
        --checkpoints 1,10,50,100,150,200,250 --probe-every 5 \
        --out studies/editing_at_scale/rome_seq250_guard.json
    OMP_NUM_THREADS=1 .venv/bin/python studies/editing_at_scale/editing_at_scale.py --editor memit --n 100 \
        --batch-size 10 --out ...
    OMP_NUM_THREADS=1 .venv/bin/python studies/editing_at_scale/editing_at_scale.py --editor memit --n 100 \
        --batch-size 100 --out ...

Records: the first ``--n`` records of the test split in file order (``interp.rome.load_records(split="test")``;
``--split dev``: of the dev split, for choices); ``--start`` skips some. ``--shuffle-seed S`` first reorders the
whole split with ``random.Random(S).shuffle`` (notebook 05b's validation on an order no decision saw uses S = 1,
the seed written into the notebook before the run). Each run is
:func:`interp.editing.eval.scale.sequential_edits` on the embedded SmolLM2-135M. The JSON is rewritten after every
checkpoint (with a ``partial`` key until the run ends), so a run stopped after hours keeps what it finished.
``--state DIR`` also saves the edited weights after every step; the same command run again continues from the
last saved step (for a run longer than a session, e.g. ROME's 464 edits in a row):

    OMP_NUM_THREADS=1 .venv/bin/python studies/editing_at_scale/editing_at_scale.py --editor rome --n 464 \
        --probe-every 10 --checkpoints 1,10,50,100,200,300,400,464 \
        --state studies/editing_at_scale/rome_seq464.state \
        --out studies/editing_at_scale/rome_seq464.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch

import interp
from interp import rome
from interp.core.provenance import provenance
from interp.editing.eval.scale import sequential_edits


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--editor", choices=["rome", "ft", "memit"], required=True)
    ap.add_argument("--n", type=int, required=True, help="records (the first N of the split)")
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--shuffle-seed", type=int, default=None,
                    help="reorder the whole split with random.Random(SEED).shuffle before taking records")
    ap.add_argument("--split", choices=["test", "dev"], default="test",
                    help="dev: for choices (write its runs outside studies/editing_at_scale/, which "
                         "notebook 05b reads)")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--checkpoints", default=None, help="comma-separated step numbers")
    ap.add_argument("--hparam", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--probe-every", type=int, default=1, help="steps between retention / entropy measurements")
    ap.add_argument("--measure-from", type=int, default=1, help="the first step measured (earlier ones only edit)")
    ap.add_argument("--no-score-before", action="store_true", help="do not score the facts on the unedited model")
    ap.add_argument("--state", default=None, help="directory to save the run after every step and continue from")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    hp = {k: json.loads(v) for k, v in (h.split("=", 1) for h in args.hparam)}
    model = interp.load(device="cpu")
    records = rome.load_records(split=args.split)
    if args.shuffle_seed is not None:
        random.Random(args.shuffle_seed).shuffle(records)
    records = records[args.start: args.start + args.n]
    cps = [int(c) for c in args.checkpoints.split(",")] if args.checkpoints else None
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    command = "OMP_NUM_THREADS=1 .venv/bin/python studies/editing_at_scale/editing_at_scale.py " + " ".join(sys.argv[1:])
    prov = provenance(command)  # read at the start: HEAD may move during a run of hours

    def write(res, partial: bool) -> None:
        doc = res.to_json()
        doc["command"], doc["commit"], doc["provenance"] = command, prov["commit"], prov
        doc["wall_seconds"] = res.seconds  # over every session of a continued run (--state)
        if partial:  # a stopped run keeps what it finished; the last checkpoint's step says how far it got
            doc["partial"] = f"written at checkpoint step {res.steps[-1]['step']} of {len(records)} facts' run"
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        tmp.replace(out)

    res = sequential_edits(model, records, args.editor, batch_size=args.batch_size, checkpoints=cps,
                           hparams=hp or None, probe_every=args.probe_every,
                           measure_from=args.measure_from, score_before=not args.no_score_before,
                           on_checkpoint=lambda r: write(r, partial=True), state_dir=args.state)
    write(res, partial=False)
    print(res.summary())


if __name__ == "__main__":
    main()
