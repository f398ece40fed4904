"""Wider MEMIT layer ranges (issue 37; dev only): applies the rule written in README.md ("Wider layer ranges") to
the ``memit_key_rule.py compare --layers`` outputs, one per range, and writes ``layers_dev.json``.

    .venv/bin/python studies/memit_shared/layers.py studies/memit_shared/layers_dev_0-4.json \
        studies/memit_shared/layers_dev_0-5.json studies/memit_shared/layers_dev_0-6.json

Each file holds the mixed dev batch (the own split's first-of-subject dev facts, then the second set's, one batch)
at γ 0 and γ 4. Today's default is (0-4, γ 4); the default before the bare-key row is (0-4, γ 0). Eligible: the
second set's part keeps ES >= 95; the own part's ES and PS each within 0.5 below today's; the own part's NS at least
the pre-row default's. The eligible run with the highest NS over the batch wins if it beats today's by more than 0.5
(ties within 0.1: the narrower range, then the smaller γ). Paired differences: per record, normal 95% interval.
"""

import json
import sys
from pathlib import Path

from interp.core.provenance import provenance
from interp.editing.eval.report import mean_ci

HERE = Path(__file__).parent
TODAY, BEFORE_ROW = ("0-4", 4.0), ("0-4", 0.0)
SCORES = ("efficacy", "paraphrase", "neighborhood", "neighborhood_unedited")


def paired(run, ref, name: str, part: slice = slice(None)) -> dict:
    # by position, not by case_id: the two sets' case ids overlap
    after, before = run["rows"][part], ref["rows"][part]
    if [r["case_id"] for r in after] != [r["case_id"] for r in before]:
        raise SystemExit("two runs of different facts, or in another order")
    diff = [100 * (a[f"{name}_score"] - b[f"{name}_score"]) for a, b in zip(after, before)]
    ci = mean_ci(name, diff)
    return {"mean": ci["mean"], "ci": [ci["ci_low"], ci["ci_high"]], "n": ci["n"]}


def scores(agg: dict) -> dict:
    return {s: agg[f"{s}_score"]["mean"] for s in SCORES} | {"harmonic_mean": agg["harmonic_mean"]}


def load(paths: list) -> dict:
    """(range, γ) -> run, with each run's range and the size of its own part."""
    runs = {}
    for path in paths:
        doc = json.loads(Path(path).read_text())
        span = f"{doc['layers'][0]}-{doc['layers'][-1]}"
        for run in doc["runs"]:
            if "aggregates_main" not in run:
                raise SystemExit(f"{path}: a run without both parts (compare --n all --also ...)")
            runs[(span, float(run["bare_key_weight"]))] = run | {"layers": doc["layers"]}
    for k in (TODAY, BEFORE_ROW):
        if k not in runs:
            raise SystemExit(f"no run for range {k[0]} at γ {k[1]:g}: the reference runs are needed")
    return runs


def measured(run: dict, today: dict, before: dict, what: str) -> dict:
    """One mixed-batch run's row: its scores over the batch and each part, and its paired differences with today's
    default and the default before the row; ``eligible`` by the rule the mixed-batch studies share (module doc)."""
    n_own = today["aggregates_main"]["efficacy_score"]["n"]
    if run["aggregates_main"]["efficacy_score"]["n"] != n_own:
        raise SystemExit(f"{what}: another own part than today's")
    o, f = scores(run["aggregates_main"]), scores(run["aggregates_also"])
    t, b = scores(today["aggregates_main"]), scores(before["aggregates_main"])
    return {"all": scores(run["aggregates"]), "own": o, "second_set": f,
            "failed_subject_first": run["aggregates"]["efficacy_fail_subject_first"],
            "relative_update": run["relative_update"],
            "neighborhood_vs_today": paired(run, today, "neighborhood"),
            "own_neighborhood_vs_before_row": paired(run, before, "neighborhood", slice(0, n_own)),
            "second_set_neighborhood_vs_before_row": paired(run, before, "neighborhood", slice(n_own, None)),
            "seconds": run["seconds"],
            "eligible": (f["efficacy"] >= 95.0 and o["efficacy"] >= t["efficacy"] - 0.5
                         and o["paraphrase"] >= t["paraphrase"] - 0.5 and o["neighborhood"] >= b["neighborhood"])}


def table(runs: dict) -> tuple[list, dict]:
    today, before = runs[TODAY], runs[BEFORE_ROW]
    rows = []
    for (span, gamma), run in sorted(runs.items(), key=lambda kv: (int(kv[0][0].split("-")[1]), kv[0][1])):
        rows.append({"layers": span, "gamma": gamma} | measured(run, today, before, f"range {span} γ {gamma:g}"))
    eligible = [r for r in rows if r["eligible"]]
    best = None
    if eligible:
        top = max(r["all"]["neighborhood"] for r in eligible)
        best = next(r for r in eligible if r["all"]["neighborhood"] >= top - 0.1)  # rows run narrow first, γ 0 first
    today_ns = scores(today["aggregates"])["neighborhood"]
    adopt = best is not None and best["all"]["neighborhood"] > today_ns + 0.5
    pick = best if adopt else next(r for r in rows if (r["layers"], r["gamma"]) == TODAY)
    return rows, {"layers": pick["layers"], "gamma": pick["gamma"], "changed": adopt,
                  "best_eligible": {"layers": best["layers"], "gamma": best["gamma"]} if best else None}


def main():
    paths = sys.argv[1:]
    if not paths:
        raise SystemExit(__doc__)
    rows, choice = table(load(paths))
    for r in rows:
        a, o, f = r["all"], r["own"], r["second_set"]
        d, b = r["neighborhood_vs_today"], r["own_neighborhood_vs_before_row"]
        print(f"{r['layers']} γ {r['gamma']:g}: ES {a['efficacy']:.1f} PS {a['paraphrase']:.1f} NS {a['neighborhood']:.1f} | "
              f"own {o['efficacy']:.1f}/{o['paraphrase']:.1f}/{o['neighborhood']:.1f} | second "
              f"{f['efficacy']:.1f}/{f['paraphrase']:.1f}/{f['neighborhood']:.1f} | NS vs today {d['mean']:+.2f} "
              f"[{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}] | own NS vs before the row {b['mean']:+.2f} "
              f"[{b['ci'][0]:+.2f}, {b['ci'][1]:+.2f}] | subject-first fails {r['failed_subject_first']}"
              f"{' | eligible' if r['eligible'] else ''}")
    print(f"choice: {choice}")
    out = {"rule": __doc__.split("\n\n")[2].replace("\n", " "), "inputs": paths, "rows": rows, "choice": choice,
           "command": "studies/memit_shared/layers.py " + " ".join(paths), "provenance": provenance()}
    (HERE / "layers_dev.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
