"""Benchmark of loading a model from interp's cache (not a timed test). Each figure is the median over ``--runs``
fresh processes, since a process that has already read the file reuses its memory, and prints `name: value` lines:

  read_numpy_seconds      the cache's weights file read into an ``np.empty`` array (numpy's allocator, which asks
                          the kernel for huge pages on large arrays)
  read_torch_seconds      the same read into ``paths.empty_bytes`` (torch's allocator), what ``interp.load`` uses
  read_numpy_over_torch   the first over the second: what the allocator alone costs
  load_seconds            ``interp.load(NAME)`` from the warm cache (checks the CRC, builds the bridge)
  load_over_read          load_seconds / read_torch_seconds: what a load adds to reading its bytes
  thp_defrag              /sys/kernel/mm/transparent_hugepage/defrag, the setting the first ratio depends on

The imports (torch, interp) are made before any clock starts, in every process alike.

    python benchmarks/bench_load.py [--model smollm2-135m] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import sys, time
from pathlib import Path
import numpy as np, torch
import interp
from interp.core import paths
how, name = sys.argv[1], sys.argv[2]
if how == "load":
    t = time.perf_counter(); interp.load(name); print(time.perf_counter() - t)
else:
    weights = Path(sys.argv[3])
    n = weights.stat().st_size
    t = time.perf_counter()
    data = np.empty(n, dtype=np.uint8) if how == "numpy" else paths.empty_bytes(n)
    with open(weights, "rb") as f:
        assert f.readinto(memoryview(data)) == n
    print(time.perf_counter() - t)
"""


def _cache_weights(name: str) -> Path:
    """The weights file ``interp.load(name)`` reads (its cache folder's manifest names it), loading once to build
    the cache when it is missing."""
    code = ("import json, interp\nfrom interp.core import loading, paths\ninterp.load(%r)\n"
            "f = loading.gemma_cache_folder() if %r == 'gemma3-270m' else "
            "loading._gguf_cache_folder(paths.embedded_gguf())\n"
            "print(f / json.loads((f / loading._MANIFEST).read_text())['file'])") % (name, name)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1])


def _time(how: str, name: str, weights: Path) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, how, name, str(weights)],
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    if args.runs < 1:
        raise SystemExit(f"--runs {args.runs}; allowed: >= 1")
    weights = _cache_weights(args.model)
    times = {how: [] for how in ("numpy", "torch", "load")}
    for _ in range(args.runs):  # interleaved, so a slow minute of the machine falls on every variant alike
        for how in times:
            times[how].append(_time(how, args.model, weights))
    med = {how: statistics.median(v) for how, v in times.items()}
    try:
        defrag = Path("/sys/kernel/mm/transparent_hugepage/defrag").read_text().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        defrag = "unknown"
    print(f"model: {args.model}")
    print(f"weights_bytes: {weights.stat().st_size}")
    print(f"runs: {args.runs}")
    print(f"read_numpy_seconds: {med['numpy']:.3f}")
    print(f"read_torch_seconds: {med['torch']:.3f}")
    print(f"read_numpy_over_torch: {med['numpy'] / med['torch']:.2f}")
    print(f"load_seconds: {med['load']:.3f}")
    print(f"load_over_read: {med['load'] / med['torch']:.2f}")
    print(f"thp_defrag: {defrag}")


if __name__ == "__main__":
    main()
