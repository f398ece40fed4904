"""Which keys should a ROME update answer to? Dev split only (``key_rule.json``).

ROME's update ``M' = M + u v^T`` is solved so that ``v . k* = 1`` for ``k*``, the subject key averaged over the
prompt in several sampled contexts; the v* optimisation assumed ``u`` arrives in full in every context. A
context whose key is far from ``k*`` gets only ``v . k`` of it (``key_match`` for the bare rewrite prompt). This
study edits each dev record with both :data:`interp.editing.rome.KEY_RULES` ("mean": ROME; "each": ``v . k = 1``
for every templated key, the bare prompt included) and scores rewrite, paraphrase and neighbourhood prompts in
both forms (no generation, drift or lens: only the scores differ between the rules' choice).

    OMP_NUM_THREADS=1 .venv/bin/python data/key_rule_study.py --n 60 [--records FILE --out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import interp
from interp import rome
from interp.editing.eval_measure import fact_scores, measure_probs
from interp.editing.eval_report import mean_ci
from interp.editing.rome import KEY_RULES


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=60, help="the first N records")
    ap.add_argument("--records", default=None, help="a JSON-lines file (default: the dev split of facts.jsonl)")
    ap.add_argument("--rules", default=",".join(KEY_RULES), help="comma-separated key rules to compare")
    ap.add_argument("--out", default=str(Path(__file__).with_name("key_rule.json")))
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = interp.load(device="cpu")
    layer = rome.default_layer(model)
    stats = rome.key_stats(model, layer, rome.RomeHparams.mom2_n_tokens, progress=False)
    records = (rome.load_records(args.records) if args.records else rome.load_records(split="dev"))[: args.n]
    rules = args.rules.split(",")
    rows, t0 = [], time.perf_counter()
    for f in records:
        for rule in rules:
            row = {"case_id": f.case_id, "relation": f.relation, "subject": f.subject, "rule": rule}
            try:
                e = rome.edit(model, f.prompt, f.subject, f.target_new, layer, stats=stats, key_rule=rule)
            except ValueError as err:  # the target is already the model's answer
                rows.append({**row, "error": str(err)})
                continue
            try:
                pr = measure_probs(model, [f])[0]
            finally:
                e.revert()
            row.update(fact_scores(pr["probs"], pr["hits"]))
            row.update({k: e.norms[k] for k in ("key_match", "key_dot", "relative_update", "nll_final")},
                       steps=len(e.losses))
            rows.append(row)
        print(f"{len(rows) // len(rules)}/{len(records)} {f.subject}: " + ", ".join(
            f"{r['rule']} ES {r.get('efficacy_score', float('nan')):.2f} NS {r.get('neighborhood_score', float('nan')):.2f}"
            for r in rows[-len(rules):]), flush=True)
    summary = {}
    for rule in rules:
        ok = [r for r in rows if r["rule"] == rule and "error" not in r]
        summary[rule] = {m: mean_ci(m, [100 * r[m] for r in ok]) for m in
                         ("efficacy_score", "paraphrase_score", "neighborhood_score", "efficacy_acc", "paraphrase_acc",
                          "neighborhood_acc")}
        summary[rule]["key_match_median"] = sorted(r["key_match"] for r in ok)[len(ok) // 2]
        summary[rule]["n"] = len(ok)
    doc = {"command": "OMP_NUM_THREADS=1 .venv/bin/python data/key_rule_study.py " + " ".join(sys.argv[1:]),
           "layer": layer, "wall_seconds": time.perf_counter() - t0, "summary": summary, "rows": rows}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    for rule, s in summary.items():
        print(rule, {k: (round(v["mean"], 1) if isinstance(v, dict) else v) for k, v in s.items()})


if __name__ == "__main__":
    main()
