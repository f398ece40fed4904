"""Do the neighbourhood losses of facts that share a (true → new) pair add up? (dev only; issue 37.)

For each pair with at least ``--min-facts`` facts among one relation's dev facts of facts_shared.jsonl: the pair's
neighbourhood prompts that name none of the relation's dev subjects (the neighbours no edit of the relation
rewrites), and on each the margin ``m = NLL(new) - NLL(true)`` (mean per-token NLL, nats; > 0: the true object is
preferred, as the success-form score counts it). Measured unedited (``m0``), after each fact of the pair alone
(MEMIT, today's default, one fact: ``m_i``) and after the pair's facts at once (``m_G``); every edit reverted, the
weights checked. If the spillovers add up, ``m_G - m0`` is close to ``Σ_i (m_i - m0)``.

    OMP_NUM_THREADS=2 .venv/bin/python studies/memit_shared/spillover.py --relation religion \\
        --out studies/memit_shared/religion_dev_spillover.json
"""

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import torch

import interp
from interp.core.provenance import provenance
from interp.editing.eval.measure import target_nll
from interp.editing.facts import load_records
from interp.editing.memit import memit_edit

RECORDS = "interp/editing/records/facts_shared.jsonl"


def margins(model, prompts, true, new) -> torch.Tensor:
    return target_nll(model, prompts, [new] * len(prompts)) - target_nll(model, prompts, [true] * len(prompts))


def edited_margins(model, facts, prompts, true, new) -> torch.Tensor:
    e = memit_edit(model, facts)
    try:
        return margins(model, prompts, true, new)
    finally:
        e.revert()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--relation", default="religion")
    ap.add_argument("--min-facts", type=int, default=3)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    model = interp.load(device="cpu")
    facts = [f for f in load_records(RECORDS, split="dev") if f.relation == args.relation]
    edited = {f.text for f in facts}
    groups = defaultdict(list)
    for f in facts:
        groups[(f.target_true, f.target_new)].append(f)
    digest, t0, out = model.weights_digest(), time.perf_counter(), []
    for (true, new), fs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        if len(fs) < args.min_facts:
            continue
        prompts = sorted({p for f in fs for p in f.neighborhood_prompts if p not in edited})
        m0 = margins(model, prompts, true, new)
        alone = torch.stack([edited_margins(model, [f], prompts, true, new) for f in fs])      # [facts, prompts]
        together = edited_margins(model, fs, prompts, true, new)
        summed = m0 + (alone - m0).sum(0)
        d_sum, d_all = (summed - m0), (together - m0)
        out.append({"pair": f"{true.strip()} -> {new.strip()}", "facts": [f.subject for f in fs],
                    "prompts": prompts, "m0": m0.tolist(), "alone": alone.tolist(), "together": together.tolist(),
                    "kept_unedited": float((m0 > 0).double().mean()),
                    "kept_worst_alone": float((alone > 0).all(0).double().mean()),
                    "kept_if_summed": float((summed > 0).double().mean()),
                    "kept_together": float((together > 0).double().mean()),
                    "mean_change_summed": float(d_sum.mean()), "mean_change_together": float(d_all.mean()),
                    "corr_summed_together": float(torch.corrcoef(torch.stack([d_sum, d_all]))[0, 1])})
        r = out[-1]
        print(f"{r['pair']} ({len(fs)} facts, {len(prompts)} prompts): kept unedited {r['kept_unedited']:.2f}, "
              f"each alone {r['kept_worst_alone']:.2f}, summed {r['kept_if_summed']:.2f}, together "
              f"{r['kept_together']:.2f}; mean margin change summed {r['mean_change_summed']:+.2f} together "
              f"{r['mean_change_together']:+.2f} (r = {r['corr_summed_together']:.2f})", flush=True)
    if model.weights_digest() != digest:
        raise SystemExit("the weights did not come back")
    doc = {"relation": args.relation, "split": "dev", "seconds": time.perf_counter() - t0, "pairs": out,
           **provenance(f"OMP_NUM_THREADS=2 .venv/bin/python studies/memit_shared/spillover.py --relation "
                        f"{args.relation} --min-facts {args.min_facts} --out {args.out}")}
    Path(args.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
