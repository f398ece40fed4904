"""The rule of a study in this folder (README.md), applied to its rows of results.jsonl: the table and the pick.

    .venv/bin/python studies/features_gemma_dead/rule.py [--study restarts]

Pick: the lowest worst-layer dead fraction, provided the median dev FVU over the layers is at most 0.005 above
today's; ties within 0.5 percentage points go to today's, then to the smaller change (the order of ORDER).

    .venv/bin/python studies/features_gemma_dead/rule.py --study seeds

The seed study's rule (README.md, "Seed noise"): two seeds each of today's settings and of the frozen bias with
restarts, all on the AMD EPYC; at each layer the pair's drop "holds on two seeds" when every pair run is at least 0.5
points under every today run (min over today's seeds minus max over the pair's >= 0.5), else "seed noise covers it".
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
    ap.add_argument("--study", default="restarts", choices=sorted(ORDER) + ["seeds"])
    ap.add_argument("--today-from", default=None,
                    help="take today's row from another study's runs, e.g. bias, whose today is the rerun on the "
                         "AMD EPYC (another machine, perhaps: said in the output)")
    args = ap.parse_args()
    if args.study == "seeds":
        return seeds()
    rows = {}
    for r in _stored():
        study = r.get("study", "auxk")
        if study == args.study and not (args.today_from and r["config"] == "today"):
            rows[r["config"]] = r
        elif args.today_from and study == args.today_from and r["config"] == "today":
            rows["today"] = r
            print(f"today's row from study {study!r}: {r['provenance']['machine']['cpu']}, commit "
                  f"{r['provenance']['commit'][:7]} (not this study's reference run)\n")
    if args.today_from and "today" not in rows:
        studies = sorted({r.get("study", "auxk") for r in _stored() if r["config"] == "today"})
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
        fvu, dead = _cells(lay)
        restarted = " / ".join(str(res.get(k, 0)) for k in lay)
        print(f"| `{name}` | {restarted} | {fvu} | {dead} | {100 * worst:.2f}% | {med:.5f} |")
    base_worst, base_med = figures["today"]
    eligible = [n for n in ORDER[args.study] if figures[n][1] <= base_med + 0.005]
    best = min(figures[n][0] for n in eligible)
    pick = next(n for n in ORDER[args.study] if n in eligible and figures[n][0] <= best + 0.005)
    print(f"\neligible (median FVU <= {base_med + 0.005:.5f}): {eligible}")
    print(f"pick: {pick} (worst-layer dead {100 * figures[pick][0]:.2f}% against today's {100 * base_worst:.2f}%)")


def _stored() -> list[dict]:
    return [json.loads(line) for line in (HERE / "results.jsonl").read_text().splitlines()]


def _cells(lay: dict) -> tuple[str, str]:
    """A row's FVU and dead-latent cells, layers in stored order: "0.0079 / 0.0464", "6.16% (142) / 6.86% (158)"."""
    return (" / ".join(f"{v['fvu']:.4f}" for v in lay.values()),
            " / ".join(f"{100 * v['dead_frac']:.2f}% ({round(v['dead_frac'] * 2304)})" for v in lay.values()))


SEEDS = {"today": [("bias", "today"), ("seeds", "today_seed1")],
         "frozen_b_enc_resample_200k": [("bias_restarts", "frozen_b_enc_resample_200k"),
                                        ("seeds", "frozen_b_enc_resample_200k_seed1")]}


def seeds():
    """The seed study's table and, per layer, its outcome (the module's docstring)."""
    rows = {(r.get("study", "auxk"), r["config"]): r for r in _stored()}
    missing = [c for runs in SEEDS.values() for s, c in runs if (s, c) not in rows]
    if missing:
        raise SystemExit(f"no rows yet for {missing}")
    dead = {}
    print("| configuration | seed | machine | dev FVU L0 / L5 | dead L0 / L5 |\n|---|---|---|---|---|")
    for name, runs in SEEDS.items():
        for study, config in runs:
            r = rows[(study, config)]
            lay = r["layers"]
            seed = r["overrides"].get("seed", 0)
            for k, v in lay.items():
                dead.setdefault((name, k), []).append(100 * v["dead_frac"])
            print(f"| `{name}` | {seed} | {r['provenance']['machine']['cpu']} | {' | '.join(_cells(lay))} |")
    print()
    for k in sorted({k for _, k in dead}, key=int):
        t, p = dead[("today", k)], dead[("frozen_b_enc_resample_200k", k)]
        gap = min(t) - max(p)
        print(f"layer {k}: today's seeds {', '.join(f'{x:.2f}' for x in t)} (spread {max(t) - min(t):.2f}); "
              f"the pair's {', '.join(f'{x:.2f}' for x in p)} (spread {max(p) - min(p):.2f}); "
              f"min(today) - max(pair) = {gap:+.2f} points: "
              + ("holds on two seeds" if gap >= 0.5 else "seed noise covers it"))


if __name__ == "__main__":
    main()
