"""Where MEMIT's neighbourhood falls on facts_shared.jsonl (issue 37): a run's per-record CSV, broken down.

    .venv/bin/python studies/memit_shared/analyse.py studies/memit_shared/dev_baseline.csv

For each record of the batch: its relation, how many facts of the same batch share its true object (their edits
move away from the object its neighbours should keep) and how many rewrite *to* its true object, or to its new
object (edits that pull the relation's template toward the neighbours' answer, or toward the wrong one), and its neighbourhood score before and after.
Prints the scores per relation and by those counts.

    .venv/bin/python studies/memit_shared/analyse.py --paired BEFORE.csv AFTER.csv

Two runs of the same records (e.g. the default before and now): each score's per-record difference, after minus
before, with a 95% interval (``interp.editing.eval.report.mean_ci``, normal) and how many records moved each way.

    .venv/bin/python studies/memit_shared/analyse.py --by-pair ONE_AT_A_TIME.csv BATCHED.csv

The same records edited one at a time and in one batch: NS over unedited neighbours by how many other facts of the
batch share the fact's (relation, true → new) pair, and that count's correlation with what batching changed.

    .venv/bin/python studies/memit_shared/analyse.py --runs STUDY.json [STUDY.json ...] [--relation religion]

The runs of ``memit_key_rule.py compare`` outputs (one line per batch size and setting): success-form ES, PS, NS,
NS over unedited neighbours, their harmonic mean (ES, PS, NS: the study's rule), the strict forms, and the same
over one relation's facts of the batch with ``--relation``.
"""

import json
import sys
from pathlib import Path

import pandas as pd


def breakdown(path: str) -> dict:
    t = pd.read_csv(path)
    t = t[t["error"].isna()] if "error" in t else t
    # per record: facts of the batch with the same true object, rewritten to its true object (the neighbours'
    # answer), rewritten to its new object (the object its neighbours must not drift to)
    new_counts = t.groupby(["relation", "target_new"]).size()
    t = t.assign(same_true=t.groupby(["relation", "target_true"])["case_id"].transform("count") - 1,
                 to_true=[int(new_counts.get(k, 0)) for k in zip(t["relation"], t["target_true"])],
                 to_new=[int(new_counts[k]) - 1 for k in zip(t["relation"], t["target_new"])])
    cols = ["efficacy_score_post", "paraphrase_score_post", "neighborhood_score_pre", "neighborhood_score_post",
            "neighborhood_acc_post", "neighborhood_unedited_score_post"]
    cols = [c for c in cols if c in t]

    def table(by):
        g = t.groupby(by, observed=True)
        return g[cols].mean().mul(100).round(1).assign(n=g.size())

    bins = [-1, 0, 2, 5, 100]
    return {"per_relation": table("relation"),
            "by_other_facts_rewritten_to_the_same_new_object": table(pd.cut(t["to_new"], bins)),
            "by_facts_sharing_the_true_object": table(pd.cut(t["same_true"], [-1, 0, 2, 5, 10, 100])),
            "by_facts_rewritten_to_the_true_object": table(pd.cut(t["to_true"], bins)),
            "overall": t[cols].mean().mul(100).round(1)}


def edited_neighbours(records: str, split: str, n: int | None) -> str:
    """How many neighbourhood prompts of the first ``n`` records of ``split`` name a subject those records edit (the
    prompt is one of the batch's rewrite prompts), when they are edited in one batch."""
    from interp.editing.eval.run import batch_prompts
    from interp.editing.facts import load_records

    recs = load_records(records, split=split)[:n]
    edited = batch_prompts(recs)
    hits = [sum(q in edited for q in r.neighborhood_prompts) for r in recs]
    total = sum(len(r.neighborhood_prompts) for r in recs)
    return (f"{records} {split}, {len(recs)} records in one batch: {sum(hits)} of {total} neighbourhood prompts "
            f"({sum(hits) / total:.1%}) name an edited subject; {sum(h > 0 for h in hits)} records have one")


def paired(before: str, after: str) -> pd.DataFrame:
    """Per-record differences (after - before, points) of the success scores over the records both runs kept."""
    from interp.editing.eval.report import mean_ci

    a, b = (pd.read_csv(p).set_index("case_id") for p in (before, after))
    rows = {}
    for c in ("efficacy_score_post", "paraphrase_score_post", "neighborhood_score_post",
              "neighborhood_unedited_score_post"):
        d = (b[c] - a[c]).dropna() * 100
        ci = mean_ci(c, d.tolist())
        rows[c.removesuffix("_post")] = {"n": ci["n"], "mean": ci["mean"], "ci_low": ci["ci_low"],
                                         "ci_high": ci["ci_high"], "worse": int((d < 0).sum()),
                                         "better": int((d > 0).sum())}
    return pd.DataFrame(rows).T


def runs_table(paths: list, relation: str | None = None) -> pd.DataFrame:
    out = []
    for path in paths:
        for run in json.loads(Path(path).read_text())["runs"]:
            rows = [r for r in run["rows"] if relation is None or r["relation"] == relation]
            mean = lambda k: 100 * sum(r[k] for r in rows if r.get(k) is not None) / max(
                1, sum(r.get(k) is not None for r in rows))
            es, ps, ns = (mean(f"{s}_score") for s in ("efficacy", "paraphrase", "neighborhood"))
            out.append({"n": run["n"], "facts": len(rows), "λ": run["mom2_update_weight"],
                        "γ": run.get("bare_key_weight", 0.0), "μ": run.get("preserve_weight", 0.0),
                        "ν": run.get("neighbour_mean_weight", 0.0),
                        "preserved": (f"{run.get('preserve_select', 'first')} {run['preserve_count']}"
                                      if run.get("preserve_weight") else "-"),
                        "ES": es, "PS": ps, "NS": ns, "NS unedited": mean("neighborhood_unedited_score"),
                        "HM": 3 / sum(1 / max(v, 1e-9) for v in (es, ps, ns)),
                        "strict ES": mean("efficacy_acc"), "strict PS": mean("paraphrase_acc"),
                        "strict NS": mean("neighborhood_acc")})
    return pd.DataFrame(out).sort_values(["n", "preserved", "λ", "μ", "ν"]).reset_index(drop=True)


def by_pair(single: str, batched: str) -> tuple:
    """(table by the count of other batch facts sharing the fact's (relation, true, new) triple, the correlation
    of that count with batched − one-at-a-time NS unedited)."""
    col = "neighborhood_unedited_score_post"
    a, b = (pd.read_csv(p).set_index("case_id") for p in (single, batched))
    b = b.assign(single=a.loc[b.index, col],
                 sharing=b.groupby(["relation", "target_true", "target_new"])["relation"].transform("size") - 1)
    g = b.groupby("sharing")
    table = pd.DataFrame({"facts": g.size(), "one_at_a_time": g["single"].mean() * 100,
                          "batched": g[col].mean() * 100})
    return table, float(b["sharing"].corr(b[col] - b["single"]))


if __name__ == "__main__":
    if sys.argv[1] == "--by-pair":               # analyse.py --by-pair ONE_AT_A_TIME.csv BATCHED.csv
        table, r = by_pair(sys.argv[2], sys.argv[3])
        print(table.round(1).to_string())
        print(f"correlation of the count with batched - one at a time: {r:.2f}")
        sys.exit()
    if sys.argv[1] == "--runs":                  # analyse.py --runs STUDY.json ... [--relation R]
        args = sys.argv[2:]
        rel = args[args.index("--relation") + 1] if "--relation" in args else None
        files = [a for i, a in enumerate(args) if a != "--relation" and (i == 0 or args[i - 1] != "--relation")]
        print(runs_table(files, rel).round(1).to_string())
        sys.exit(0)
    if sys.argv[1] == "--paired":                # analyse.py --paired BEFORE.csv AFTER.csv
        print(paired(sys.argv[2], sys.argv[3]).round(2).to_string())
        sys.exit()
    if sys.argv[1] == "--edited-neighbours":     # analyse.py --edited-neighbours RECORDS SPLIT [N]
        print(edited_neighbours(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else None))
        sys.exit()
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 20)
    for name, frame in breakdown(sys.argv[1]).items():
        print(f"\n== {name}\n{frame}")
