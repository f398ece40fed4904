"""Swapping one fact's answer for another's through graph features, over many fact pairs (issue 34; minutes, not
part of `make test`).

    .venv/bin/python studies/graphs_swap/run.py --split dev  [--n 40] [--threads 2]    # chooses the rule
    .venv/bin/python studies/graphs_swap/run.py --split test --rule contrast --k 10 --scale 1 [--n 50]
    .venv/bin/python studies/graphs_swap/run.py --model gemma3-270m --split test --rule contrast --k 40 --scale 2

The paper's "Texas → California" experiment, asked of many facts instead of one: a clean prompt x whose answer is a
and a prompt y of the same template and length with another subject whose answer is b
(``interp.patching.fact_pairs`` over the known records of one split). Both graphs carry the two answers as logit
nodes. In the real model, on x, the k features chosen from x's graph are ablated and the k chosen from y's graph are
clamped at ``scale`` times their activation on y, each at its own position (the prompts have equal length, so
positions align). Success: b's logit above a's on x (``b_wins``); also b the top token.

Rules for choosing the features:
* ``contrast``: the features whose ablation the graph predicts lowers logit(a) − logit(b) most
  (``predicted_ablation(0, against=1)``, most negative first; only those predicted negative), and on y those whose
  ablation lowers logit(b) − logit(a) most;
* ``influence``: notebook 09's rule, the k features of largest influence on the first logit node.

Controls, on the same pairs, with the rule's own k and scale: ``off``/``on`` alone, and ``matched random``: each chosen
feature replaced by a seeded random other active feature at the same layer and position of the same graph.

On ``--split dev`` every rule × k × scale is run; the choice is fixed here before any run: the highest dev rate of
b_wins, ties (within one pair) to the smaller k, then the smaller scale, then ``contrast``. ``--split test`` runs
one rule given on the command line. Writes results_{split}.json next to this file (``results_{split}_NAME.json``
with ``--model NAME``, which reads that model's own records and cached transcoders).
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import interp
from interp.cli.features import add_dictionary_options, dictionaries_for
from interp.core.provenance import provenance
from interp.editing.eval.report import mean_ci
from interp.editing.facts import load_records

HERE = Path(__file__).parent
KS, SCALES, RULES = (5, 10, 20, 40), (1.0, 2.0), ("contrast", "influence")


def wilson(wins: int, n: int) -> list:
    """Wilson's 95% interval of wins / n, in percent (the editing reports' interval of a 0/1 score)."""
    ci = mean_ci("b_wins", [1.0] * wins + [0.0] * (n - wins), bounds=(0.0, 1.0))
    return [round(100 * ci["ci_low"], 1), round(100 * ci["ci_high"], 1)]


def known_pairs(model, split: str, n: int, seed: int):
    """fact_pairs over the split's records whose answer the model ranks first, kept where the partner prompt's top
    token is the partner's answer too."""
    def top(prompt):
        with torch.no_grad():
            return int(model.run(prompt)[0, -1].argmax())

    known = [r.to_dict() for r in load_records(split=split, model=model)
             if model.to_str_tokens(torch.tensor([top(r.prompt.format(r.subject))]))[0] == r.target_true]
    pairs = interp.patching.fact_pairs(model, known, seed=seed)
    keep = [i for i in range(len(pairs.clean)) if top(pairs.corrupted[i]) == int(pairs.wrong_ids[i])][:n]
    return [(pairs.clean[i], pairs.corrupted[i], pairs.answers[i], pairs.wrongs[i], pairs.meta[i]) for i in keep]


def chosen(g, rule: str, k: int):
    """The k features of graph g the rule picks: its first logit node's answer against its second."""
    if rule == "influence":
        return g.predicted_ablation(0).head(k)
    return g.supporting(0, against=1, k=k)


def matched_random(g, picked, gen):
    """For each picked feature, another active feature of g at the same layer and position (seeded)."""
    n = g.nodes
    feats = n[n["kind"] == "feature"]
    out = []
    for r in picked.itertuples():
        same = feats[(feats["layer"] == r.layer) & (feats["pos"] == r.pos) & (feats["feature"] != r.feature)]
        if len(same):
            out.append(same.iloc[int(torch.randint(len(same), (1,), generator=gen))])
    return feats.iloc[0:0] if not out else type(feats)(out)


def outcome(model, tc, toks, a: int, b: int, off, on, scale: float) -> dict:
    edits = ([(int(r.layer), int(r.feature), "ablate", 0.0, [int(r.pos)]) for r in off.itertuples()] +
             [(int(r.layer), int(r.feature), "clamp", scale * float(r.activation), [int(r.pos)])
              for r in on.itertuples()])
    with torch.no_grad(), interp.features.intervene(model, tc, edits):
        lg = model.forward(toks)[0, -1].float()
    return {"margin": float(lg[b] - lg[a]), "b_wins": bool(lg[b] > lg[a]), "b_top": int(lg.argmax()) == b}


def run_pair(model, tc, x, y, ans, wrong, conditions, seed) -> dict:
    a, b = model.to_single_token(ans), model.to_single_token(wrong)
    gx = interp.attribution_graph(model, tc, x, targets=[ans, wrong])
    gy = interp.attribution_graph(model, tc, y, targets=[wrong, ans])
    toks, none = model.to_tokens(x), gx.nodes.iloc[0:0]
    res = {"none": outcome(model, tc, toks, a, b, none, none, 1.0)}
    gen = torch.Generator().manual_seed(seed)
    for rule, k, scale, controls in conditions:
        off, on = chosen(gx, rule, k), chosen(gy, rule, k)
        name = f"{rule} k={k} scale={scale:g}"
        res[name] = outcome(model, tc, toks, a, b, off, on, scale) | {"n_off": len(off), "n_on": len(on)}
        if controls:
            res[name + " off only"] = outcome(model, tc, toks, a, b, off, none, scale)
            res[name + " on only"] = outcome(model, tc, toks, a, b, none, on, scale)
            res[name + " matched random"] = outcome(model, tc, toks, a, b, matched_random(gx, off, gen),
                                                    matched_random(gy, on, gen), scale)
    return res


def tally(per_pair: list) -> dict:
    names = per_pair[0]["results"].keys()
    n = len(per_pair)
    out = {}
    for c in names:
        wins = sum(p["results"][c]["b_wins"] for p in per_pair)
        out[c] = {"b_wins": wins, "b_wins_pct": round(100 * wins / n, 1), "b_wins_95": wilson(wins, n),
                  "b_top": sum(p["results"][c]["b_top"] for p in per_pair),
                  "median_margin": float(torch.tensor([p["results"][c]["margin"] for p in per_pair]).median())}
    return out


def choose(table: dict) -> str:
    keys = [f"{r} k={k} scale={s:g}" for r in RULES for k in KS for s in SCALES]
    best = max(table[c]["b_wins"] for c in keys)
    # ties within one pair: smaller k, then smaller scale, then contrast (the order below)
    tied = [(k, s, RULES.index(r), f"{r} k={k} scale={s:g}") for r in RULES for k in KS for s in SCALES
            if table[f"{r} k={k} scale={s:g}"]["b_wins"] >= best - 1]
    return min(tied)[3]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="a short name such as gemma3-270m (default: the embedded model)")
    ap.add_argument("--split", choices=("dev", "test"), required=True)
    ap.add_argument("--n", type=int, default=None, help="pairs (default: 40 on dev, 50 on test)")
    ap.add_argument("--rule", choices=RULES, default=None, help="test only: the rule dev chose")
    ap.add_argument("--k", type=int, default=None)
    ap.add_argument("--scale", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    add_dictionary_options(ap)
    args = ap.parse_args()
    if args.split == "test" and None in (args.rule, args.k, args.scale):
        raise SystemExit("--split test needs --rule, --k and --scale: the ones the dev run chose")
    torch.set_num_threads(args.threads)
    prov = provenance(" ".join(["python studies/graphs_swap/run.py", *sys.argv[1:]]))
    model = interp.load(args.model)
    tc = dictionaries_for(args, model)
    n = args.n or (40 if args.split == "dev" else 50)
    t0 = time.time()
    pairs = known_pairs(model, args.split, n, args.seed)
    if args.split == "dev":
        conditions = [(r, k, s, True) for r in RULES for k in KS for s in SCALES]
    else:
        conditions = [(args.rule, args.k, args.scale, True)]
    per_pair = []
    for i, (x, y, ans, wrong, meta) in enumerate(pairs):
        t = time.time()
        per_pair.append({"clean": x, "other": y, "answer": ans, "other_answer": wrong, "meta": meta,
                         "results": run_pair(model, tc, x, y, ans, wrong, conditions, args.seed + i)})
        print(f"{i + 1}/{len(pairs)} {x!r} → {wrong!r}: {time.time() - t:.0f} s", flush=True)
    table = tally(per_pair)
    doc = {"split": args.split, "n_pairs": len(per_pair), "table": table, "pairs": per_pair,
           "model": model.source, "dictionaries": tc.settings, "seconds": round(time.time() - t0), **prov}
    if args.split == "dev":
        doc["chosen"] = choose(table)
    name = f"results_{args.split}" + ("" if args.model is None else f"_{args.model}")
    (HERE / f"{name}.json").write_text(json.dumps(doc, indent=1))
    for c, v in table.items():
        print(f"{c:40s} b wins {v['b_wins']:3d}/{len(per_pair)} {v['b_wins_95']}  b top {v['b_top']:3d}  "
              f"median margin {v['median_margin']:+.2f}")
    if "chosen" in doc:
        print("chosen on dev:", doc["chosen"])


if __name__ == "__main__":
    main()
