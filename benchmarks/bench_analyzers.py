"""Analyzer costs, as ratios against baselines timed in the same run (interleaved repeats, median).

    INTERP_CACHE=/tmp/icache python benchmarks/bench_analyzers.py [--repeats 7] [--threads N] [--model gemma3-270m]

logit_lens_ratio: ``logit_lens(model, text, targets=[" Paris"], positions=[-1])`` — all n_layers+1 residuals at
the last position of a 64-token text — / one plain forward of that text (``model.forward`` under no_grad).
Target <= 1.2.
logit_lens_full_ratio: the same lens at all 64 positions / its floor = one plain forward plus n_layers bare
unembedding matmuls ``resid[64, d_model] @ W_U`` of the same 64 residual vectors. Target <= 1.2.
neuron_scan_throughput_ratio: from ``benchmarks/_neuron_bench.py`` when present (see there). Target >= 0.8.

Each repeat times every contender once, in an order rotated per repeat; the ratio is taken per repeat and the
median over repeats is printed, so a slow spell on a shared machine hits both sides of a ratio alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

TEXT = ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is named "
        "after the engineer Gustave Eiffel, whose company designed and built the tower from 1887 to 1889 as the "
        "centerpiece of the 1889 World's Fair, and it is now one of the most visited monuments in the world.")


def tokens_64(model) -> torch.Tensor:
    toks = model.to_tokens(TEXT)[:, :64]
    if toks.shape[1] != 64:
        raise RuntimeError(f"benchmark text is only {toks.shape[1]} tokens long; need 64")
    return toks


def interleaved(fns: dict, repeats: int) -> list[dict[str, float]]:
    """Per repeat, the time of each function; the order rotates per repeat."""
    names = list(fns)
    for fn in fns.values():  # warm-up: allocator, kernels, lazy imports
        fn()
    out = []
    for r in range(repeats):
        times = {}
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            fns[name]()
            times[name] = time.perf_counter() - t0
        out.append(times)
    return out


def lens_ratios(model, repeats: int) -> tuple[float, float, dict]:
    from interp.analyses.lens import logit_lens

    toks = tokens_64(model)
    W_U = model.module.W_U
    resid = model.resid(toks, model.n_layers - 1, "post").to(W_U.device, W_U.dtype)  # [64, d_model]

    def forward():
        with torch.no_grad():
            model.forward(toks)

    def lens_last():
        logit_lens(model, toks, targets=[" Paris"], positions=[-1])

    def lens_full():
        logit_lens(model, toks, targets=[" Paris"])

    def floor():
        forward()
        with torch.no_grad():
            for _ in range(model.n_layers):
                resid @ W_U

    runs = interleaved({"forward": forward, "lens_last": lens_last, "lens_full": lens_full, "floor": floor},
                       repeats)
    last = statistics.median(r["lens_last"] / r["forward"] for r in runs)
    full = statistics.median(r["lens_full"] / r["floor"] for r in runs)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    med["per_repeat_last"] = [round(r["lens_last"] / r["forward"], 3) for r in runs]
    med["per_repeat_full"] = [round(r["lens_full"] / r["floor"], 3) for r in runs]
    return last, full, med


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--verbose", action="store_true", help="also print the median seconds of each contender")
    ap.add_argument("--model", default=None, help="a short name (smollm2-135m, gemma3-270m) or any load() source")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import interp
    from interp.core.loading import cache_folder_for

    cached = args.model is None or args.model in ("smollm2-135m", "gemma3-270m")
    warm = cached and (cache_folder_for(args.model) / "manifest.json").is_file()
    model = interp.load(args.model, device="cpu")
    print(f"# {model.source}: load {model.load_seconds:.1f} s ({'warm: from the cache' if warm else 'cold'})")
    last, full, med = lens_ratios(model, args.repeats)
    print(f"logit_lens_ratio: {last:.3f}")
    print(f"logit_lens_full_ratio: {full:.3f}")
    if args.verbose:
        print("# median seconds: " + ", ".join(f"{k} {med[k]:.4f}" for k in ("forward", "lens_last", "lens_full",
                                                                             "floor")))
        print(f"# per-repeat ratios: last {med['per_repeat_last']}, full {med['per_repeat_full']}")
    try:
        from _neuron_bench import neuron_scan_throughput_ratio
    except ImportError:
        return
    print(f"neuron_scan_throughput_ratio: {neuron_scan_throughput_ratio(model):.3f}")


if __name__ == "__main__":
    main()
