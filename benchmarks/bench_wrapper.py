"""Wrapper overhead and cache benefit, as ratios against baselines timed in the same run.

    python benchmarks/bench_wrapper.py [--repeats 7]

forward_ratio: interp.Model.run (bridge + hooks machinery, logits back on CPU) / a plain transformers forward
of a separate, un-bridged copy of the same model; batch 8 x 128 tokens; repeats interleaved; median.
warm_load_speedup: interp.load() with an empty cache (dequantize the GGUF, write the safetensors cache) /
interp.load() reading that cache; both in this process after the imports, median of the warm loads.
Targets: forward_ratio <= 1.03, warm_load_speedup >= 20.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch


def forward_ratio(repeats: int) -> float:
    import interp
    from interp.core import loading

    model = interp.load(device="cpu")
    raw = loading.embedded_transformers()
    toks = torch.randint(1000, 40000, (8, 128), generator=torch.Generator().manual_seed(0))

    def run_raw():
        with torch.no_grad():
            raw(toks).logits.to("cpu")

    def run_wrapped():
        model.run(toks)

    run_raw(), run_wrapped()  # warm-up
    ratios = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run_raw()
        t1 = time.perf_counter()
        run_wrapped()
        t2 = time.perf_counter()
        ratios.append((t2 - t1) / (t1 - t0))
    return statistics.median(ratios)


def warm_load_speedup(repeats: int) -> tuple[float, float, float]:
    import interp

    old = os.environ.get("INTERP_CACHE")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["INTERP_CACHE"] = tmp
        try:
            t0 = time.perf_counter()
            interp.load(device="cpu")
            cold = time.perf_counter() - t0
            warm = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                interp.load(device="cpu")
                warm.append(time.perf_counter() - t0)
        finally:
            if old is None:
                os.environ.pop("INTERP_CACHE", None)
            else:
                os.environ["INTERP_CACHE"] = old
    w = statistics.median(warm)
    return cold / w, cold, w


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    import interp

    interp.load(device="cpu")  # build the default cache and import everything before timing
    print(f"forward_ratio: {forward_ratio(args.repeats):.3f}", flush=True)
    speedup, cold, warm = warm_load_speedup(max(3, args.repeats // 2))
    print(f"warm_load_speedup: {speedup:.1f}")
    print(f"# cold load {cold:.2f} s, warm load {warm:.3f} s (median)")


if __name__ == "__main__":
    main()
