"""Which facts get MEMIT's bare-key row (issue 37; dev only): applies the rule written in README.md ("Which facts
get the bare-key row") to the two merged ``memit_key_rule.py compare`` outputs and writes ``bare_rows_dev.json``.

    .venv/bin/python studies/memit_shared/bare_rows.py studies/memit_shared/bare_rows_fs_dev.json \
        studies/memit_shared/bare_rows_own_dev.json

FS: the second fact set's 233 first-of-subject dev facts at once; OWN: the project's own 231. Candidates have
γ = 4 ("mismatch" or "alone", at a threshold τ); the γ = 0 run is the reference. Eligible: FS efficacy ≥ 95 and FS
harmonic mean at most 0.5 below today's default's ("mismatch", τ 0.5). The eligible candidate with the highest OWN
neighbourhood score wins if it beats today's default by more than 0.2; ties go to "mismatch", then the larger τ.
Beside each OWN score: its per-record difference from γ = 0 with a normal 95% interval.
"""

import json
import sys
from pathlib import Path

from interp.core.provenance import provenance
from interp.editing.eval.report import mean_ci

HERE = Path(__file__).parent
TODAY = ("mismatch", 0.5)


def key(run) -> tuple:
    return (run["bare_key_when"], float(run["bare_key_threshold"])) if run["bare_key_weight"] else ("none", 0.0)


def score(run, name: str) -> float:
    return run["aggregates"][f"{name}_score"]["mean"]


def paired(run, ref, name: str) -> dict:
    before = {r["case_id"]: r[f"{name}_score"] for r in ref["rows"]}
    diff = [100 * (r[f"{name}_score"] - before[r["case_id"]]) for r in run["rows"]]
    ci = mean_ci(name, diff)
    return {"mean": ci["mean"], "ci": [ci["ci_low"], ci["ci_high"]]}


def table(fs_doc: dict, own_doc: dict) -> tuple[list, dict]:
    fs = {key(r): r for r in fs_doc["runs"]}
    own = {key(r): r for r in own_doc["runs"]}
    ref_own, today = own[("none", 0.0)], fs[TODAY]
    rows = []
    for k in sorted(fs, key=lambda k: (k[0] != "none", k[0] != "mismatch", -k[1])):
        f, o = fs[k], own[k]
        rows.append({"when": k[0], "threshold": k[1] if k[0] != "none" else None,
                     "fs": {s: score(f, s) for s in ("efficacy", "paraphrase", "neighborhood", "neighborhood_unedited")}
                     | {"harmonic_mean": f["aggregates"]["harmonic_mean"], "bare_rows": f["bare_rows"]},
                     "own": {s: score(o, s) for s in ("efficacy", "paraphrase", "neighborhood", "neighborhood_unedited")}
                     | {"harmonic_mean": o["aggregates"]["harmonic_mean"], "bare_rows": o["bare_rows"],
                        "neighborhood_vs_gamma0": paired(o, ref_own, "neighborhood"),
                        "neighborhood_unedited_vs_gamma0": paired(o, ref_own, "neighborhood_unedited")},
                     "eligible": k[0] != "none" and score(f, "efficacy") >= 95.0
                     and f["aggregates"]["harmonic_mean"] >= today["aggregates"]["harmonic_mean"] - 0.5})
    eligible = [r for r in rows if r["eligible"]]
    best = max(eligible, key=lambda r: (round(r["own"]["neighborhood"], 9), r["when"] == "mismatch", r["threshold"]))
    base = next(r for r in rows if (r["when"], r["threshold"]) == TODAY)
    pick = best if best["own"]["neighborhood"] > base["own"]["neighborhood"] + 0.2 else base
    return rows, {"when": pick["when"], "threshold": pick["threshold"],
                  "best_eligible": {"when": best["when"], "threshold": best["threshold"]}}


def main():
    fs_doc, own_doc = (json.loads(Path(p).read_text()) for p in sys.argv[1:3])
    rows, chosen = table(fs_doc, own_doc)
    for r in rows:
        f, o = r["fs"], r["own"]
        d = o["neighborhood_vs_gamma0"]
        print(f"{r['when']:8s} τ={r['threshold']}: FS ES {f['efficacy']:.1f} PS {f['paraphrase']:.1f} "
              f"NS {f['neighborhood']:.1f} HM {f['harmonic_mean']:.2f} | OWN ES {o['efficacy']:.1f} "
              f"PS {o['paraphrase']:.1f} NS {o['neighborhood']:.1f} (vs γ0 {d['mean']:+.2f} "
              f"[{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}]) | eligible {r['eligible']}")
    print("chosen:", chosen)
    doc = {"rule": __doc__.split("Candidates have")[1].strip(), "rows": rows, "chosen": chosen,
           "inputs": sys.argv[1:3], **provenance(" ".join(["python studies/memit_shared/bare_rows.py", *sys.argv[1:]]))}
    (HERE / "bare_rows_dev.json").write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
