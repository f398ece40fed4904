"""Benchmark of the patching suite on the embedded model (not a timed test). Prints `name: value` lines:

  exhaustive_head_patch_ratio  time of exhaustive head patching (all 270 heads, denoising, every position) of a
                               batch of IOI pairs / (270 x one plain forward of that batch); target <= 0.75
                               (patched forwards start at the patched layer and several patches share one)
  atp_forward_equivalents      attribution patching of every head on the same batch / one plain forward;
                               target <= 3.5 (2 forwards + 1 backward)
  atp_spearman_heads           Spearman correlation of the AtP head grid with the exhaustive one (target >= 0.8)
  atp_pearson_heads            Pearson correlation of the same
  atp_top10_recall             share of the exhaustive top-10 heads (by |effect|) in AtP's top 10 (target >= 0.8)
  ioi_accuracy                 share of the clean IOI prompts with logit diff > 0

All timings are measured in this run, with torch threads fixed (--threads); the plain forward is the median of
2 x --repeats runs (half before, half after the patching). Wall-clock numbers grow when other processes share the
cores; the `_cpu` lines give the same ratios in process CPU time, which does not.

    python benchmarks/bench_patching.py [--pairs 32] [--threads 1] [--repeats 3] [--batch-size 64]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=32, help="IOI pairs (default 32)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64, help="rows per patched forward (default 64)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import interp
    from interp.analyses.patching import ioi

    model = interp.load(device="cpu")
    pp = ioi(model, args.pairs, seed=args.seed)
    tokens = model.to_tokens(pp.clean)
    n_heads = model.n_layers * model.n_heads
    model.run(tokens)  # warm-up
    # The plain forward is timed before and after the patching runs: a neighbour's load at one moment then
    # skews the median less.
    fwd = [timed(lambda: model.run(tokens))[1:] for _ in range(args.repeats)]
    exh, ex_wall, ex_cpu = timed(lambda: interp.activation_patching(model, pp, over="heads",
                                                                    batch_size=args.batch_size))
    atp, atp_wall, atp_cpu = timed(lambda: interp.attribution_patching(model, pp, over="heads"))
    fwd += [timed(lambda: model.run(tokens))[1:] for _ in range(args.repeats)]
    fwd_wall, fwd_cpu = statistics.median(w for w, _ in fwd), statistics.median(c for _, c in fwd)
    cmp = atp.compare(exh, k=10)

    print(f"pairs: {len(pp)}")
    print(f"tokens_per_prompt_max: {tokens.shape[1]}")
    print(f"plain_forward_seconds: {fwd_wall:.4f}")
    print(f"exhaustive_seconds: {ex_wall:.2f}")
    print(f"exhaustive_head_patch_ratio: {ex_wall / (n_heads * fwd_wall):.3f}")
    print(f"exhaustive_head_patch_ratio_cpu: {ex_cpu / (n_heads * fwd_cpu):.3f}")
    print(f"atp_seconds: {atp_wall:.3f}")
    print(f"atp_forward_equivalents: {atp_wall / fwd_wall:.3f}")
    print(f"atp_forward_equivalents_cpu: {atp_cpu / fwd_cpu:.3f}")
    print(f"atp_spearman_heads: {cmp.spearman:.3f}")
    print(f"atp_pearson_heads: {cmp.pearson:.3f}")
    print(f"atp_top10_recall: {cmp.topk_recall:.2f}")
    print(f"ioi_accuracy: {float((exh.clean > 0).float().mean()):.3f}")
    print(f"exhaustive_top5: {exh.top(5)}")
    print(f"atp_top5: {atp.top(5)}")


if __name__ == "__main__":
    main()
