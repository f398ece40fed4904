"""Benchmark of the tuned lens on the embedded model (not a timed test). Trains the lens with the default settings
(unless --reuse), evaluates it on held-out Wikipedia text, measures prediction depth on the fact records, and
prints `name: value` lines:

  train_seconds           wall clock of training (capture + least squares + KL steps), target <= 600
  train_cpu_seconds       the process's CPU time for it (both threads): what a busy machine does not inflate
  capture_seconds / solve_seconds / kl_seconds      its three phases (wall)
  tokens / kl_tokens / steps / batch_size           what was trained on
  kl_ratio_max_upto_24    max over layers 0..24 of held-out KL(tuned) / KL(logit), target <= 0.5
  kl_ratio_argmax_upto_24 the layer where that maximum is
  kl_bits_{logit,tuned,bias}_L, kl_ratio_L, ppl_{logit,tuned,bias}_L   per layer L (0..30; 30 = the model)
  mean_kl_bits_{logit,tuned,bias}                   mean over layers 0..29
  depth_mean_{logit,tuned}, depth_median_{logit,tuned}   prediction depth on the fact prompts
  eval_seconds / depth_seconds, load_average_start / _end (1-minute load: >2 means the cores were shared)

The lens and its evaluation stay in the cache (``$INTERP_CACHE/tuned_lens/``), so notebook 01 and
``interp lens --tuned`` reuse them.

    python benchmarks/bench_tuned_lens.py [--tokens N] [--steps N] [--eval-tokens 512] [--facts 200] [--reuse]
                                          [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch


def main() -> None:
    from interp.analyses.tuned_lens import DEFAULTS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=DEFAULTS["tokens"])
    ap.add_argument("--kl-tokens", type=int, default=DEFAULTS["kl_tokens"])
    ap.add_argument("--steps", type=int, default=DEFAULTS["steps"])
    ap.add_argument("--eval-tokens", type=int, default=512)
    ap.add_argument("--facts", type=int, default=200, help="test-split fact records for prediction depth (0: skip)")
    # One thread by default: on a 2-core machine that other processes share, two OpenMP threads stall on each
    # other (the capture forward ran 7x slower with 2 threads than with 1 at a load average of ~4); on an idle
    # machine --threads 2 is faster.
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reuse", action="store_true", help="use a cached lens with these settings if there is one")
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args()

    import interp
    from interp.rome import load_records

    torch.set_num_threads(args.threads)
    print(f"load_average_start: {os.getloadavg()[0]:.2f}")
    model = interp.load(device="cpu")
    _ = model.fingerprint  # hashed once, outside the timings
    print(f"threads: {torch.get_num_threads()}")

    w0, c0 = time.perf_counter(), time.process_time()
    lens = interp.train_tuned_lens(model, tokens=args.tokens, kl_tokens=args.kl_tokens, steps=args.steps,
                                   retrain=not args.reuse, progress=args.progress)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    m = lens.meta
    reused = m.get("finished_at", 0) < time.time() - wall - 1
    print(f"lens_reused_from_cache: {reused}")
    print(f"train_seconds: {m['seconds']:.1f}")
    print(f"train_cpu_seconds: {m.get('cpu_seconds_this_run', cpu) if not reused else float('nan'):.1f}")
    for k in ("capture_seconds", "solve_seconds", "kl_seconds"):
        print(f"{k}: {m[k]:.1f}")
    s = m["settings"]
    print(f"tokens: {m['tokens']}\nkl_tokens: {m['kl_tokens']}\nsteps: {s['steps']}\nbatch_size: {s['batch_size']}")
    print(f"init: {s['init']}\nlens_path: {lens.path}")

    w0 = time.perf_counter()
    ev = interp.evaluate_lens(model, lens, tokens=args.eval_tokens, progress=args.progress)
    print(f"eval_seconds: {time.perf_counter() - w0:.1f}")
    print(f"eval_tokens: {ev.tokens}\neval_documents: {ev.documents}")
    worst, at = ev.ratio_max(min(24, model.n_layers - 1))
    print(f"kl_ratio_max_upto_24: {worst:.4f}\nkl_ratio_argmax_upto_24: {at}")
    worst_all, at_all = ev.ratio_max()
    print(f"kl_ratio_max_all_layers: {worst_all:.4f}\nkl_ratio_argmax_all_layers: {at_all}")
    for k in ("logit", "tuned", "bias"):
        print(f"mean_kl_bits_{k}: {float(ev.kl_bits[k][:-1].mean()):.4f}")
    ratio = ev.ratio()
    for layer in range(model.n_layers + 1):
        for k in ("logit", "tuned", "bias"):
            print(f"kl_bits_{k}_{layer}: {float(ev.kl_bits[k][layer]):.4f}")
        if layer < model.n_layers:
            print(f"kl_ratio_{layer}: {float(ratio[layer]):.4f}")
        for k in ("logit", "tuned", "bias"):
            print(f"ppl_{k}_{layer}: {float(ev.perplexity[k][layer]):.2f}")

    if args.facts:
        records = load_records(split="test")[: args.facts]
        w0 = time.perf_counter()
        depth = interp.prediction_depth(model, records, lens, progress=args.progress)
        print(f"depth_seconds: {time.perf_counter() - w0:.1f}\ndepth_prompts: {len(records)}")
        for k in ("logit", "tuned"):
            d = depth.depth(k).tolist()
            print(f"depth_mean_{k}: {statistics.fmean(d):.2f}\ndepth_median_{k}: {statistics.median(d)}")
        print(f"depth_tuned_earlier: {int((depth.depth('tuned') < depth.depth('logit')).sum())}")
        print(f"depth_tuned_later: {int((depth.depth('tuned') > depth.depth('logit')).sum())}")
    print(f"load_average_end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
