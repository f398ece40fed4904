"""Sign agreement of `freeze_parts.py`'s ablations by the ablated feature's layer (a reading of stored files; seconds).

    .venv/bin/python studies/graphs_faithfulness/by_layer.py freeze_parts_gemma3-270m.json --bands 0-1,2-5,6-11,12-17
    .venv/bin/python studies/graphs_faithfulness/by_layer.py freeze_parts.json --bands 0-1,2-9,10-19,20-29

For each band of layers and each condition in the file: the ablations whose feature lies in the band, and the share
whose measured logit change has the sign the graph predicted; then the same at the prompt's last position and
before it, and each condition's median per-prompt Spearman; only the ablations that every condition measured
finitely count (as in `freeze_parts.py`'s figures). Files are read from this folder unless a path is given.
"""

import argparse
import json
import statistics
from pathlib import Path

from interp.analyses.patching.activation import spearman

HERE = Path(__file__).parent


def agree(rows, c) -> float:
    return sum((r["predicted"] > 0) == (r[c] > 0) for r in rows) / len(rows) if rows else float("nan")


def bands_of(spec: str) -> list[tuple[int, int]]:
    out = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.append((int(lo), int(hi or lo)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--bands", required=True, help="comma-separated layer ranges, e.g. 0-1,2-5,6-11,12-17")
    args = ap.parse_args()
    path = Path(args.file) if Path(args.file).exists() else HERE / args.file
    doc = json.loads(path.read_text())
    conds = [c for c in doc["prompts"][0]["rows"][0] if c not in ("layer", "pos", "feature", "predicted")]
    rows = []
    for p in doc["prompts"]:
        last = max(r["pos"] for r in p["rows"]) if p["rows"] else 0
        n_pos = p.get("n_tokens")
        rows += [{**r, "last": r["pos"] == (n_pos - 1 if n_pos else last)} for r in p["rows"]]
    # as freeze_parts' figures: only the ablations every condition measured finitely (an overflow is stored null)
    dropped = [r for r in rows if any(r[c] is None for c in conds)]
    rows = [r for r in rows if all(r[c] is not None for c in conds)]
    if dropped:
        print(f"left out: {len(dropped)} ablations with a non-finite change, at layers "
              f"{sorted(r['layer'] for r in dropped)}")
    print("| layers | ablations | " + " | ".join(conds) + " |")
    print("|---|---|" + "---|" * len(conds))
    for lo, hi in bands_of(args.bands):
        band = [r for r in rows if lo <= r["layer"] <= hi]
        print(f"| {lo}–{hi} | {len(band)} | " + " | ".join(f"{agree(band, c):.2f}" for c in conds) + " |")
    for lo, hi in bands_of(args.bands):
        band = [r for r in rows if lo <= r["layer"] <= hi]
        at, before = [r for r in band if r["last"]], [r for r in band if not r["last"]]
        print(f"layers {lo}–{hi}, real: last position {agree(at, 'real'):.2f} ({len(at)}), "
              f"earlier {agree(before, 'real'):.2f} ({len(before)})" if "real" in conds else "")
    for c in conds:
        kept = [[r for r in p["rows"] if all(r[k] is not None for k in conds)] for p in doc["prompts"]]
        rho = [spearman([r["predicted"] for r in k], [r[c] for r in k]) for k in kept if len(k) > 2]
        rho = [x for x in rho if x == x]
        print(f"{c}: median per-prompt Spearman {statistics.median(rho):.3f} over {len(rho)} prompts")


if __name__ == "__main__":
    main()
