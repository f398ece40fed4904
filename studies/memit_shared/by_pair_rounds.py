"""Religion's neighbours under MEMIT when facts that share a (relation, true → new) pair are not solved together
(dev only; issue 37). The batch is split into rounds: a fact's round is how many facts of its pair came before it
in file order, so no round holds two facts of one pair. The rounds are applied one after another (each solve sees
the model the earlier rounds edited, as ``sequential_edits`` does), every fact is then scored with all of them in
place, NS unedited over the neighbours no round rewrites, and every round is reverted (weights checked).

    OMP_NUM_THREADS=1 .venv/bin/python studies/memit_shared/by_pair_rounds.py --relation religion \\
        --out studies/memit_shared/religion_dev_pair_rounds.json
    ... --rounds one --out /tmp/religion_dev_one_round.json      # all at once: the check against religion_dev_b34

Beside it, the stored runs of the same facts: all at once (``religion_dev_b34``) and one at a time
(``religion_dev_b1``).
"""

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import torch

import interp
from interp.core.provenance import provenance
from interp.editing.eval.run import batch_prompts
from interp.editing.eval.scale import aggregate_scores, record_scores
from interp.editing.facts import load_records
from interp.editing.memit import memit_edit

RECORDS = "interp/editing/records/facts_shared.jsonl"


def pair_rounds(facts) -> list[list]:
    seen, rounds = Counter(), []
    for f in facts:
        k = seen[(f.relation, f.target_true, f.target_new)]
        seen[(f.relation, f.target_true, f.target_new)] += 1
        while len(rounds) <= k:
            rounds.append([])
        rounds[k].append(f)
    return rounds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--relation", default="religion")
    ap.add_argument("--split", default="dev", choices=["dev"])
    ap.add_argument("--rounds", default="pair", choices=["pair", "one"],
                    help="pair: no round holds two facts of one pair; one: every fact in one round (the check "
                         "against the stored all-at-once run)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = interp.load(device="cpu")
    facts = [f for f in load_records(RECORDS, split=args.split) if f.relation == args.relation]
    rounds = pair_rounds(facts) if args.rounds == "pair" else [facts]
    digest = model.weights_digest()
    t0 = time.perf_counter()
    edits = []
    try:
        for r in rounds:
            edits.append(memit_edit(model, r))
        rows = record_scores(model, facts, [batch_prompts(facts)] * len(facts))
    finally:
        for e in reversed(edits):
            e.revert()
    if model.weights_digest() != digest:
        raise SystemExit("the weights did not come back")
    for r, f in zip(rows, facts):
        r.update(case_id=f.case_id, subject=f.subject, pair=f"{f.target_true.strip()} -> {f.target_new.strip()}")
    out = {"facts": f"{len(facts)} {args.split} facts of relation {args.relation} in {RECORDS}, in file order",
           "rounds": [len(r) for r in rounds], "seconds": time.perf_counter() - t0,
           "aggregates": aggregate_scores(rows), "rows": rows,
           **provenance("OMP_NUM_THREADS=1 .venv/bin/python studies/memit_shared/by_pair_rounds.py "
                        f"--relation {args.relation} --rounds {args.rounds} --out {args.out}")}
    Path(args.out).write_text(json.dumps(out, indent=1))
    a = out["aggregates"]
    print(f"{len(facts)} facts in rounds {out['rounds']} ({out['seconds']:.0f} s): ES {a['efficacy_score']['mean']:.1f} "
          f"PS {a['paraphrase_score']['mean']:.1f} NS {a['neighborhood_score']['mean']:.1f} NS unedited "
          f"{a['neighborhood_unedited_score']['mean']:.1f} strict NS {a['neighborhood_acc']['mean']:.1f}")


if __name__ == "__main__":
    main()
