"""Two gloo ranks against one process for the same covariance job (MLP key second moments).

    python benchmarks/bench_dist.py [--layer 4] [--n-tokens 20000] [--repeats 2]

Prints
  two_rank_speedup: X        wall time of ``python -m interp.dist stats --nproc 1`` / ``--nproc 2`` (median of
                             interleaved repeats; process start and model load included, as a user sees it)
  two_rank_scan_speedup: X   the same for the scan alone (rank 0's accumulate + reduce time)
  merge_exact: true|false    the 2-rank result equals the 1-process result: same token count, second moments
                             within float64 rounding (max difference <= 1e-12 x the largest entry), and the neuron top-k of a 2-rank scan
                             bit-identical to the one-process scan
The one-process run uses every core for torch's intra-op threads; each of the 2 ranks uses half of them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from interp.analyses.neurons import TopK
from interp.analyses.stats import KeyStats


def run(job: list[str], nproc: int, out: Path) -> tuple[float, dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "interp.dist", *job, "--out", str(out), "--nproc", str(nproc)],
                          capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(proc.stderr[-4000:])
    return wall, json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layer", type=int, default=4)
    ap.add_argument("--n-tokens", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    job = ["stats", "--layer", str(a.layer), "--n-tokens", str(a.n_tokens)]
    tmp = Path(tempfile.mkdtemp(prefix="bench_dist_"))
    walls = {1: [], 2: []}
    scans = {1: [], 2: []}
    for r in range(a.repeats):
        for nproc in ((1, 2) if r % 2 == 0 else (2, 1)):
            wall, info = run(job, nproc, tmp / f"c{nproc}.safetensors")
            walls[nproc].append(wall)
            scans[nproc].append(info["seconds"])
            print(f"# repeat {r} nproc {nproc}: wall {wall:.1f} s, job {info['seconds']:.1f} s, "
                  f"{info['count']} tokens", flush=True)
    one, two = KeyStats.load(tmp / "c1.safetensors"), KeyStats.load(tmp / "c2.safetensors")
    def close(a, b):  # float64 rounding of a sum is relative to the size of its terms, not of the (small) result
        return bool((a - b).abs().max() <= 1e-12 * b.abs().max())

    stats_exact = one.count == two.count and close(one.moment_sum, two.moment_sum) and close(one.sum, two.sum)
    njob = ["neurons", "--layer", str(a.layer), "--n-docs", "64", "--k", "5"]
    run(njob, 1, tmp / "n1.safetensors")
    run(njob, 2, tmp / "n2.safetensors")
    topk_exact = TopK.load(tmp / "n1.safetensors").equal(TopK.load(tmp / "n2.safetensors"))
    rel = float(((one.moment_sum - two.moment_sum).abs().max() / one.moment_sum.abs().max()))
    print(f"# tokens {one.count}; max relative difference of the second-moment sums {rel:.3g}; "
          f"top-k identical: {topk_exact}")
    print(f"two_rank_speedup: {statistics.median(walls[1]) / statistics.median(walls[2]):.3f}")
    print(f"two_rank_scan_speedup: {statistics.median(scans[1]) / statistics.median(scans[2]):.3f}")
    print(f"merge_exact: {'true' if stats_exact and topk_exact else 'false'}")


if __name__ == "__main__":
    main()
