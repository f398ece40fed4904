"""Where the single-ablation signs disagree: run.py's ablations by the ablated feature's layer band and position.

    .venv/bin/python studies/graphs_faithfulness/by_position.py [results.json ...]    # seconds; reads stored files only

A reading of stored results, as by_size.py: it chooses nothing and changes no figure of run.py. Each ablation's
(layer, position, feature) is in the file (``ablated``); a prompt's length comes from its graph's summary ("graph of
N tokens"), so "last" is the position the answer is predicted from. Intervals: 95% percentiles over prompts
resampled with a seeded generator (a prompt's ablations are not independent). It also lists the early-layer features
ablated most often, with how many prompts they were ablated in and the words those prompts end with.
"""

import argparse
import collections
import json
import re
from pathlib import Path

import torch

HERE = Path(__file__).parent
EARLY = 1  # layers 0..EARLY are "early": by_layer.py's first band


def _cell(layer: int, pos: int, n: int) -> tuple[str, str]:
    return ("layers 0-1" if layer <= EARLY else "layers 2+"), ("last" if pos == n - 1 else "earlier")


def _rows(doc: dict) -> list[tuple[int, tuple[str, str], bool, tuple[int, int], str]]:
    """(prompt index, cell, sign agreed, (layer, feature), the prompt's last word) per ablation."""
    out = []
    for i, p in enumerate(doc["prompts"]):
        n = int(re.search(r"graph of (\d+) tokens", p["summary"]).group(1))
        for (layer, pos, feat), a, b in zip(p["ablated"], p["predicted"], p["measured"]):
            out.append((i, _cell(layer, pos, n), (a > 0) == (b > 0), (layer, feat), p["prompt"].split()[-1]))
    return out


def table(doc: dict, seed: int = 0, draws: int = 1000) -> list[dict]:
    rows = _rows(doc)
    n_prompts = len(doc["prompts"])
    gen = torch.Generator().manual_seed(seed)
    picks = [torch.randint(n_prompts, (n_prompts,), generator=gen).tolist() for _ in range(draws)]
    by_prompt = collections.defaultdict(list)
    for i, cell, ok, _, _ in rows:
        by_prompt[i].append((cell, ok))
    out = []
    for cell in sorted({c for _, c, _, _, _ in rows}):
        hits = [ok for _, c, ok, _, _ in rows if c == cell]
        boot = []
        for pick in picks:
            h = [ok for i in pick for c, ok in by_prompt[i] if c == cell]
            if h:
                boot.append(sum(h) / len(h))
        ci = torch.quantile(torch.tensor(boot, dtype=torch.float64), torch.tensor([0.025, 0.975], dtype=torch.float64))
        out.append({"layers": cell[0], "position": cell[1], "n": len(hits), "sign_agreement": sum(hits) / len(hits),
                    "ci_95": ci.tolist()})
    return out


def recurring(doc: dict, top: int = 6) -> list[dict]:
    """The early-layer (layer, feature) pairs ablated in the most prompts, with the words those prompts end with."""
    seen = collections.defaultdict(lambda: {"prompts": set(), "agreed": 0, "n": 0, "last_words": collections.Counter()})
    for i, cell, ok, lf, word in _rows(doc):
        if cell[0] == "layers 0-1":
            s = seen[lf]
            s["prompts"].add(i)
            s["n"] += 1
            s["agreed"] += ok
            s["last_words"][word] += 1
    ranked = sorted(seen.items(), key=lambda kv: (-len(kv[1]["prompts"]), kv[0]))[:top]
    return [{"layer": lf[0], "feature": lf[1], "prompts": len(s["prompts"]), "sign_agreement": s["agreed"] / s["n"],
             "last_words": dict(s["last_words"].most_common(3))} for lf, s in ranked]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="*", default=["results.json"])
    args = ap.parse_args()
    for name in args.files:
        doc = json.loads((HERE / name).read_text())
        if any("ablated" not in p for p in doc["prompts"]):
            print(f"{name}: made before run.py stored each ablation's (layer, pos, feature); nothing to read\n")
            continue
        print(f"{name}: {sum(len(p['ablated']) for p in doc['prompts'])} ablations over {len(doc['prompts'])} prompts")
        print("| layers | ablated feature's position | ablations | sign agreement (95%) |\n|---|---|---|---|")
        for r in table(doc):
            print(f"| {r['layers']} | {r['position']} | {r['n']} | {r['sign_agreement']:.3f} "
                  f"({r['ci_95'][0]:.3f}–{r['ci_95'][1]:.3f}) |")
        print("\nearly-layer features ablated in the most prompts:")
        for r in recurring(doc):
            print(f"  layer {r['layer']} feature {r['feature']}: {r['prompts']} prompts, sign agreement "
                  f"{r['sign_agreement']:.2f}; prompts end with {r['last_words']}")
        print()


if __name__ == "__main__":
    main()
