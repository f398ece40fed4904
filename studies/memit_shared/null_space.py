"""Two studies on the mixed dev batch (issue 37; dev only), one rule: the update kept out of the text's leading key
directions (README.md, "The text's own directions left alone"; ``memit_key_rule.py compare --null-space``; writes
``null_space_dev.json``), and v* stopped earlier (README.md, "Smaller targets"; ``compare --vstar``; with
``--study vstar`` writes ``vstar_dev.json``, or the file ``--out NAME`` names (after ``--study``); its candidates are
the runs with q 0, the null-space study's those with the model's own v*; the v* neighbour rows, README.md's
"Neighbour rows in v*", are such a study).

    .venv/bin/python studies/memit_shared/null_space.py studies/memit_shared/null_space_dev_a.json \
        studies/memit_shared/null_space_dev_b.json studies/memit_shared/null_space_dev_c.json
    .venv/bin/python studies/memit_shared/null_space.py --study vstar studies/memit_shared/null_space_dev_a.json \
        studies/memit_shared/null_space_dev_c.json studies/memit_shared/vstar_dev_runs.json
    .venv/bin/python studies/memit_shared/null_space.py --spectrum      # directions each q takes away, per layer

Today's default is (q 0, λ 2500, γ 4); the default before the bare-key row is (q 0, λ 2500, γ 0). Eligible: the
second set's part keeps ES >= 95; the own part's ES and PS each within 0.5 below today's; the own part's NS at least
the pre-row default's. The eligible run with the highest NS over the batch wins if it beats today's by more than 0.5
(ties within 0.1: the model's own v*, the smaller q, then the larger λ). Paired differences: per record, normal 95% interval.
"""

import json
import sys
from pathlib import Path

from layers import measured, scores

from interp.core.provenance import provenance

HERE = Path(__file__).parent
TODAY, BEFORE_ROW = ("", 0.0, 2500.0, 4.0), ("", 0.0, 2500.0, 0.0)
STUDIES = {"null_space": lambda key: key[0] == "", "vstar": lambda key: key[1] == 0.0}   # which runs are candidates


def label(vstar: dict) -> str:
    return ",".join(f"{k}={v:g}" for k, v in sorted(vstar.items()))


def load(paths: list, study: str = "null_space") -> dict:
    """(v* label, q, λ, γ) -> run; every run of the mixed batch (both parts) over one layer range that the study
    counts as a candidate, and the two references."""
    runs, spans = {}, set()
    for path in paths:
        doc = json.loads(Path(path).read_text())
        spans.add(tuple(doc["layers"]))
        for run in doc["runs"]:
            if "aggregates_main" not in run:
                raise SystemExit(f"{path}: a run without both parts (compare --n all --also ...)")
            key = (label(run.get("vstar", {})), float(run.get("null_space_mass", 0.0)),
                   float(run["mom2_update_weight"]), float(run["bare_key_weight"]))
            if STUDIES[study](key) or key in (TODAY, BEFORE_ROW):
                runs[key] = run
    if len(spans) != 1:
        raise SystemExit(f"runs over several layer ranges: {sorted(spans)}")
    for k in (TODAY, BEFORE_ROW):
        if k not in runs:
            raise SystemExit(f"no run at q {k[1]:g}, λ {k[2]:g}, γ {k[3]:g}: the reference runs are needed")
    return runs


def table(runs: dict) -> tuple[list, dict]:
    today, before = runs[TODAY], runs[BEFORE_ROW]
    rows = []
    for (vs, q, lam, gamma), run in sorted(runs.items(), key=lambda kv: (kv[0][3], kv[0][0], kv[0][1], -kv[0][2])):
        row = {"vstar": vs, "null_space_mass": q, "lambda": lam, "gamma": gamma,
               "update_dims": run.get("update_dims")} | measured(run, today, before, f"q {q:g} λ {lam:g} γ {gamma:g}")
        row["eligible"] = row["eligible"] and gamma == TODAY[2]
        rows.append(row)
    eligible = [r for r in rows if r["eligible"]]
    best = None
    if eligible:
        top = max(r["all"]["neighborhood"] for r in eligible)
        best = next(r for r in eligible if r["all"]["neighborhood"] >= top - 0.1)   # rows run own v*, small q first
    key = lambda r: {"vstar": r["vstar"], "null_space_mass": r["null_space_mass"], "lambda": r["lambda"],
                     "gamma": r["gamma"]}
    adopt = best is not None and best["all"]["neighborhood"] > scores(today["aggregates"])["neighborhood"] + 0.5
    pick = best if adopt else next(r for r in rows
                                   if (r["vstar"], r["null_space_mass"], r["lambda"], r["gamma"]) == TODAY)
    return rows, key(pick) | {"changed": adopt, "best_eligible": key(best) if best else None}


def spectrum(layers=range(5), masses=(0.5, 0.8, 0.9, 0.95, 0.99)) -> None:
    """How many leading directions of each layer's C each q takes away (the editors' Wikipedia statistics)."""
    import torch

    import interp
    from interp.editing.defaults import hparams_for
    from interp.editing.hparams import MemitHparams
    from interp.editing.keys import layer_stats
    from interp.editing.memit_solve import null_space_basis, second_moment

    torch.set_num_threads(1)
    model = interp.load(device="cpu")
    stats = layer_stats(model, list(layers), hparams_for(model, MemitHparams, "memit").mom2_n_tokens)
    for layer, st in stats.items():
        c = second_moment(st, layer, model.d_mlp)
        taken = {q: model.d_mlp - null_space_basis(c, q).shape[1] for q in masses}
        print(f"layer {layer} (d_mlp {model.d_mlp}): " + ", ".join(f"q {q:g}: {n}" for q, n in taken.items()))


def main():
    if sys.argv[1:] == ["--spectrum"]:
        return spectrum()
    args = sys.argv[1:]
    study, args = ("vstar", args[2:]) if args[:2] == ["--study", "vstar"] else ("null_space", args)
    name, paths = (args[1], args[2:]) if args[:1] == ["--out"] else (f"{study}_dev.json", args)
    if not paths:
        raise SystemExit(__doc__)
    rows, choice = table(load(paths, study))
    for r in rows:
        a, o, f = r["all"], r["own"], r["second_set"]
        d, b = r["neighborhood_vs_today"], r["own_neighborhood_vs_before_row"]
        dims = r["update_dims"] and "/".join(str(v) for v in r["update_dims"].values())
        print(f"{r['vstar'] or 'own v*'}, q {r['null_space_mass']:g} λ {r['lambda']:g} γ {r['gamma']:g} (dims {dims}): ES {a['efficacy']:.1f} "
              f"PS {a['paraphrase']:.1f} NS {a['neighborhood']:.1f} | own {o['efficacy']:.1f}/{o['paraphrase']:.1f}/"
              f"{o['neighborhood']:.1f} | second {f['efficacy']:.1f}/{f['paraphrase']:.1f}/{f['neighborhood']:.1f} | "
              f"NS vs today {d['mean']:+.2f} [{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}] | own NS vs before the row "
              f"{b['mean']:+.2f} [{b['ci'][0]:+.2f}, {b['ci'][1]:+.2f}] | subject-first fails "
              f"{r['failed_subject_first']}{' | eligible' if r['eligible'] else ''}")
    print(f"choice: {choice}")
    out = {"rule": __doc__.split("\n\n")[2].replace("\n", " "), "inputs": paths, "rows": rows, "choice": choice,
           "command": "studies/memit_shared/null_space.py " + " ".join(sys.argv[1:]), "provenance": provenance()}
    (HERE / name).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
