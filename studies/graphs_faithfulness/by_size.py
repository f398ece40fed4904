"""Where the single-ablation signs disagree: run.py's ablations split into quarters by the size of the prediction.

    .venv/bin/python studies/graphs_faithfulness/by_size.py [results.json ...]     # seconds; reads stored files only

A reading of stored results, not a new measure: it chooses nothing and changes no figure of run.py. For each file,
the ablations (every prompt's top features) are sorted by |predicted| and cut into four equal parts; each part's
sign agreement gets a 95% percentile interval from resampling prompts (seeded, as run.py's intervals: the
ablations of one prompt are not independent), the parts' cut points held fixed.
"""

import argparse
import json
from pathlib import Path

import torch

HERE = Path(__file__).parent


def _agreement(prompts, lo: float, hi: float) -> float:
    hits = [(a > 0) == (b > 0) for p in prompts for a, b in zip(p["predicted"], p["measured"]) if lo <= abs(a) <= hi]
    return sum(hits) / len(hits) if hits else float("nan")


def quarters(doc: dict, seed: int = 0, draws: int = 1000) -> list[dict]:
    prompts = doc["prompts"]
    size = sorted(abs(a) for p in prompts for a in p["predicted"])
    n, out = len(size), []
    gen = torch.Generator().manual_seed(seed)
    picks = [torch.randint(len(prompts), (len(prompts),), generator=gen).tolist() for _ in range(draws)]
    for q in range(4):
        part = size[q * n // 4:(q + 1) * n // 4]
        lo, hi = part[0], part[-1]
        boot = torch.tensor([_agreement([prompts[i] for i in pick], lo, hi) for pick in picks], dtype=torch.float64)
        ci = torch.quantile(boot[~boot.isnan()], torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
        out.append({"quarter": q + 1, "n": len(part), "abs_predicted_from": lo, "abs_predicted_to": hi,
                    "sign_agreement": _agreement(prompts, lo, hi), "ci_95": ci})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="*", default=[str(HERE / "results.json")])
    for path in ap.parse_args().files:
        doc = json.loads(Path(path).read_text())
        print(f"{path} ({doc.get('model', 'embedded:SmolLM2-135M-Instruct')}, {doc['n_prompts']} prompts, "
              f"sign agreement {doc['sign_agreement']:.3f}):")
        print("  quarter  |predicted|          n   sign agreement  95% over prompts")
        for r in quarters(doc):
            print(f"  {r['quarter']}        {r['abs_predicted_from']:.3f} – {r['abs_predicted_to']:<7.3f}  {r['n']:>4}   "
                  f"{r['sign_agreement']:.3f}           {r['ci_95'][0]:.3f}–{r['ci_95'][1]:.3f}")


if __name__ == "__main__":
    main()
