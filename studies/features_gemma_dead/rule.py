"""The rule of a study in this folder (README.md), applied to its rows of results.jsonl: the table and the pick.

    .venv/bin/python studies/features_gemma_dead/rule.py [--study restarts]

Pick: the lowest worst-layer dead fraction, provided the median dev FVU over the layers is at most 0.005 above
today's; ties within 0.5 percentage points go to today's, then to the smaller change (the order of ORDER).
"""

import argparse
import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent
ORDER = {"auxk": ["today", "aux_coef_0.125", "dead_tokens_25k"],
         "restarts": ["today", "resample_200k", "resample_100k_to_0.9"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--study", default="restarts", choices=sorted(ORDER))
    ap.add_argument("--today-from", default=None,
                    help="take today's row from another study's runs, e.g. bias, whose today is the rerun on the "
                         "AMD EPYC (another machine, perhaps: said in the output)")
    args = ap.parse_args()
    rows = {}
    for line in (HERE / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        study = r.get("study", "auxk")
        if study == args.study and not (args.today_from and r["config"] == "today"):
            rows[r["config"]] = r
        elif args.today_from and study == args.today_from and r["config"] == "today":
            rows["today"] = r
            print(f"today's row from study {study!r}: {r['provenance']['machine']['cpu']}, commit "
                  f"{r['provenance']['commit'][:7]} (not this study's reference run)\n")
    if args.today_from and "today" not in rows:
        studies = sorted({json.loads(ln).get("study", "auxk") for ln in (HERE / "results.jsonl").read_text().splitlines()
                          if json.loads(ln)["config"] == "today"})
        raise SystemExit(f"--today-from {args.today_from!r} has no today row; studies with one: {', '.join(studies)}")
    missing = [n for n in ORDER[args.study] if n not in rows]
    if missing:
        raise SystemExit(f"no rows yet for {missing} in study {args.study!r}")
    print("| configuration | restarted L0 / L5 | dev FVU L0 / L5 | dead L0 / L5 | worst | median FVU |")
    print("|---|---|---|---|---|---|")
    figures = {}
    for name in ORDER[args.study]:
        r = rows[name]
        lay = r["layers"]
        worst = max(v["dead_frac"] for v in lay.values())
        med = statistics.median(v["fvu"] for v in lay.values())
        figures[name] = (worst, med)
        res = r.get("resampled") or {}
        fvu = " / ".join(f"{v['fvu']:.4f}" for v in lay.values())
        dead = " / ".join(f"{100 * v['dead_frac']:.2f}% ({round(v['dead_frac'] * 2304)})" for v in lay.values())
        restarted = " / ".join(str(res.get(k, 0)) for k in lay)
        print(f"| `{name}` | {restarted} | {fvu} | {dead} | {100 * worst:.2f}% | {med:.5f} |")
    base_worst, base_med = figures["today"]
    eligible = [n for n in ORDER[args.study] if figures[n][1] <= base_med + 0.005]
    best = min(figures[n][0] for n in eligible)
    pick = next(n for n in ORDER[args.study] if n in eligible and figures[n][0] <= best + 0.005)
    print(f"\neligible (median FVU <= {base_med + 0.005:.5f}): {eligible}")
    print(f"pick: {pick} (worst-layer dead {100 * figures[pick][0]:.2f}% against today's {100 * base_worst:.2f}%)")


if __name__ == "__main__":
    main()
