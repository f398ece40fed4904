"""Sizes and build cost of the interactive views, on the embedded model (SmolLM2: 30 layers x 9 heads).

    INTERP_CACHE=/tmp/icache python benchmarks/bench_views.py [--repeats 7]

attention_view_bytes: the whole-model attention view (every layer and head) of a 64-token text, as the HTML page
``res.save_html`` writes. Target <= 2 MB (2,000,000 bytes).
lens_view_bytes: the logit-lens view of the same 64 tokens at every position, with one target. Target <= 300 KB
(300,000 bytes).
view_build_ratio: building that attention view (``res.view().page()``: statistics, 8-bit codes, the page) / one
plain forward of the 64 tokens (``model.forward`` under no_grad), timed interleaved, median of the per-repeat
ratios. Target <= 1.0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_analyzers import interleaved, tokens_64  # the same text and timing as the analyzers'


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--verbose", action="store_true", help="also print the median seconds of each contender")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import interp

    model = interp.load(device="cpu")
    toks = tokens_64(model)
    att = interp.attention(model, toks)
    lens = interp.logit_lens(model, toks, targets=[" Paris"])
    attention_bytes = len(att.view().page().encode("utf-8"))
    lens_bytes = len(lens.view().page().encode("utf-8"))

    def forward():
        with torch.no_grad():
            model.forward(toks)

    runs = interleaved({"forward": forward, "build": lambda: att.view().page()}, args.repeats)
    ratio = statistics.median(r["build"] / r["forward"] for r in runs)
    print(f"attention_view_bytes: {attention_bytes}")
    print(f"lens_view_bytes: {lens_bytes}")
    print(f"view_build_ratio: {ratio:.3f}")
    if args.verbose:
        med = {k: statistics.median(r[k] for r in runs) for k in ("forward", "build")}
        print(f"# median seconds: forward {med['forward']:.4f}, build {med['build']:.4f}")


if __name__ == "__main__":
    main()
