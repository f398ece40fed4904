"""Transcoder training throughput against its FLOP floor, as ratios against a plain forward timed in the same run.

    OMP_NUM_THREADS=1 python benchmarks/bench_features.py [--layers 30] [--width W] [--k K] [--steps 6]
        [--rows R] [--adam fused] [--threads 1]

Width, k, rows and the Adam kernel default to ``TrainSettings``'. ``--threads 2`` times the step as the 2-core
machine runs it: the one-thread figure does not carry over by a fixed factor (at rows 1 it scaled to 1.7 h on two
threads; the run took about 2.0–2.4 h, studies/features_sweep/README.md).

train_flop_efficiency: (the floor's FLOPs per batch / the rate a plain no-grad forward of the same batch reaches)
/ the measured seconds of one training step. The floor is ``train.train_flops_per_token``: the forward to the
last trained layer, plus per transcoder the encoder's forward and weight gradient (4·d·W), the skip's (4·d²) and
the k decoder rows (6·k·d). Steps and forwards interleaved, median. Target: >= 0.6.
full_run_hours: the default run (every layer, 2M tokens) at the measured step time and thread count (target <= 3 h
on the 2-core machine, which runs it with 2 threads).
peak_rss_gb: the process's peak resident memory while training every layer (target <= 8 GB).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=30, help="train layers 0..N-1 (default 30, every layer)")
    ap.add_argument("--width", type=int, default=None, help="default: TrainSettings' width")
    ap.add_argument("--k", type=int, default=None, help="default: TrainSettings' k")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rows", type=int, default=None, help="rows per batch (default: TrainSettings' rows)")
    ap.add_argument("--adam", choices=["foreach", "fused"], default=None,
                    help="TrainSettings.adam, torch's Adam kernel (default: the trainer's)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as the targets are stated)")
    args = ap.parse_args()
    if args.threads < 1:
        ap.error(f"--threads {args.threads}: allowed: a positive integer")
    torch.set_num_threads(args.threads)
    import interp
    from interp.analyses.features.data import batches
    from interp.analyses.features.dictionary import Site
    from interp.analyses.features.cost import forward_flops_per_token, train_flops_per_token
    from interp.analyses.features.train import TrainSettings, _Run

    model = interp.load(device="cpu")
    given = {k: v for k, v in vars(args).items() if k in ("width", "k", "rows", "adam") and v is not None}
    s = TrainSettings(fit_batches=0, **given)  # every timed batch is a training step
    sites = {L: Site.transcoder(model, L) for L in range(args.layers)}
    run = _Run(model, sites, s)
    data = [b for _, b in zip(range(2 * args.steps + 2), batches(model, rows=s.rows, ctx=s.ctx))]
    run.step_on(data[0])  # warm-up: initialises the dictionaries, allocates Adam's moments
    with torch.no_grad():
        model.forward(data[1])
    step_s, fwd_s, counted = [], [], []
    for i in range(args.steps):
        b = data[2 + i]
        t = time.perf_counter()
        with torch.no_grad():
            model.forward(b)
        fwd_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        info = run.step_on(b)
        step_s.append(time.perf_counter() - t)
        counted.append(info["tokens"])
    fwd, step = statistics.median(fwd_s), statistics.median(step_s)
    n_all = b.numel()
    rate = forward_flops_per_token(model, model.n_layers, s.ctx) * n_all / fwd   # FLOP/s of a plain forward
    floor = train_flops_per_token(model, sites, s) * n_all / rate
    tokens_per_step = statistics.median(counted)
    full = {L: Site.transcoder(model, L) for L in range(model.n_layers)}
    full_step = step * train_flops_per_token(model, full, s) / train_flops_per_token(model, sites, s)
    print(f"threads: {args.threads}")
    print(f"width: {s.width}")
    print(f"k: {s.k}")
    print(f"rows: {s.rows}")
    print(f"forward_gflops: {rate / 1e9:.1f}")
    print(f"step_seconds: {step:.3f}")
    print(f"floor_seconds: {floor:.3f}")
    print(f"train_flop_efficiency: {floor / step:.3f}")
    print(f"train_tokens_per_second: {tokens_per_step / step:.0f}")
    print(f"full_run_hours: {s.tokens / tokens_per_step * full_step / 3600:.2f}")
    print(f"peak_rss_gb: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20:.2f}")


if __name__ == "__main__":
    main()
