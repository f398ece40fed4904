"""Where to edit: ROME at the subject's last token (the default) against ROME at the subject token where the
causal trace's MLP effect peaks, on dev records only (``edit_position.json`` beside this script; notebook 05
reads it).

    OMP_NUM_THREADS=1 .venv/bin/python studies/edit_position/edit_position.py --n 20

Per record (the first ``--n`` dev records in file order): a causal trace of the rewrite prompt (noise, 10 samples,
MLP restorations with a 10-layer window, at every subject token) for the true answer; the peak is the subject token
with the largest MLP indirect effect at any layer. Both edits use the default layer and hyperparameters; only
``subject_token`` differs. Scores: interp.rome.evaluate (success and strict forms), generation / drift / lens off.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import interp
from interp import rome
from interp.analyses.trace import causal_trace
from interp.editing.eval.report import SCORES, mean_ci

KEYS = [f"{m}_{k}" for m in (*SCORES, "paraphrase_other") for k in ("score", "acc")]


def scores(model, rec, layer, token: int) -> dict:
    res = rome.evaluate(model, [rec], "rome", layer=layer, hparams={"subject_token": token}, generation=False,
                        drift=False, lens=False, progress=False)
    row = res.to_frame().iloc[0]
    return {k: 100 * float(row[f"{k}_post"]) for k in KEYS if f"{k}_post" in row}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--start", type=int, default=0, help="skip the first START dev records")
    ap.add_argument("--merge", default=None, metavar="JSON", help="add the records of an earlier run's file")
    ap.add_argument("--out", default=str(Path(__file__).parent / "edit_position.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = interp.load(device="cpu")
    layer = rome.default_layer(model)
    records = rome.load_records(split="dev")[args.start: args.start + args.n]
    t0 = time.perf_counter()
    rows = []
    for rec in records:
        tr = causal_trace(model, rec.text, rec.subject, rec.target_true, kinds=["mlp"], positions=["subject"])
        s0, s1 = tr.subject_range
        eff = tr.effects["mlp"][:, s0:s1].nan_to_num(nan=-1e9)
        peak_layer, peak_k = divmod(int(eff.argmax()), s1 - s0)
        last_k = s1 - s0 - 1
        row = {"case_id": rec.case_id, "subject": rec.subject, "tokens": tr.tokens[s0:s1], "peak_token": peak_k,
               "peak_layer": peak_layer, "peak_effect": float(eff[peak_layer, peak_k]),
               "last_token_best_effect": float(eff[:, last_k].max()),
               "effect_at_edit_layer": {"peak": float(eff[layer, peak_k]), "last": float(eff[layer, last_k])}}
        row["last"] = scores(model, rec, layer, -1)
        row["peak"] = row["last"] if peak_k == last_k else scores(model, rec, layer, peak_k)
        rows.append(row)
        print(rec.case_id, tr.tokens[s0:s1], "peak", peak_k, "last", row["last"]["efficacy_score"],
              "peak", row["peak"]["efficacy_score"], flush=True)
    commands = ["OMP_NUM_THREADS=1 .venv/bin/python studies/edit_position/edit_position.py "
                + " ".join(sys.argv[1:])]
    seconds = time.perf_counter() - t0
    if args.merge:
        old = json.loads(Path(args.merge).read_text())
        rows = old["records"] + rows
        commands = old.get("commands", [old.get("command")]) + commands
        seconds += old["seconds"]
    differ = [r for r in rows if r["peak_token"] != len(r["tokens"]) - 1]
    agg = {}
    for rule in ("last", "peak"):
        for subset, rs in (("all", rows), ("differ", differ)):
            agg[f"{rule}_{subset}"] = {k: mean_ci(k, [r[rule][k] for r in rs if k in r[rule]], bounds=(0, 100))
                                       for k in KEYS}
    doc = {"commands": commands,
           "model": "embedded SmolLM2-135M-Instruct", "split": "dev", "layer": layer, "n_records": len(rows),
           "n_peak_not_last": len(differ), "seconds": seconds, "aggregates": agg, "records": rows}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    for k in ("all", "differ"):
        print(k, {rule: round(agg[f"{rule}_{k}"]["efficacy_score"]["mean"], 1) for rule in ("last", "peak")},
              {rule: round(agg[f"{rule}_{k}"]["paraphrase_score"]["mean"], 1) for rule in ("last", "peak")})


if __name__ == "__main__":
    main()
