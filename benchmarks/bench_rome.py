"""ROME benchmark on the embedded model (CPU). Prints ``name: value`` lines:

- ``edit_seconds``: wall seconds of one ROME edit with cached key statistics (C is loaded/computed once before
  timing; the context templates are sampled by the first, untimed warm-up edit and cached per model and seed,
  as in any session that makes more than one edit), median over several facts of the test split (each edit is
  reverted). ``edit_cpu_seconds`` is the process CPU time of the same edits (robust to a busy machine).
- ``covariance_throughput_ratio`` and ``trace_seconds``: from ``bench_rome_parts.py`` (statistics collection
  vs plain forwards at the edit layer; one full causal trace of the Eiffel Tower prompt).

    python benchmarks/bench_rome.py [--facts 5] [--threads 2] [--skip-parts]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_rome_parts import covariance_throughput_ratio, trace_seconds  # noqa: E402

import interp  # noqa: E402
from interp import rome  # noqa: E402
from interp.editing.keys import key_stats  # noqa: E402


def edit_seconds(model, records, layer: int, stats) -> tuple[float, float, list[int]]:
    """(median wall s, median CPU s, steps per edit) of one edit per record, each reverted."""
    walls, cpus, steps = [], [], []
    for r in records:
        w0, c0 = time.perf_counter(), time.process_time()
        e = rome.edit(model, r.prompt, r.subject, r.target_new, layer, stats=stats)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
        steps.append(len(e.losses))
        e.revert()
    return statistics.median(walls), statistics.median(cpus), steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--facts", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-parts", action="store_true", help="only edit_seconds")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = interp.load(device="cpu")
    layer = rome.default_layer(model)
    stats = key_stats(model, layer, rome.RomeHparams.mom2_n_tokens, progress=False)  # disk cache
    records = rome.load_records(split="test")[: args.facts]
    warm = rome.edit(model, records[0].prompt, records[0].subject, records[0].target_new, layer, stats=stats)
    warm.revert()
    wall, cpu, steps = edit_seconds(model, records, layer, stats)
    print(f"edit_layer: {layer}")
    print(f"edit_facts: {len(records)}")
    print(f"edit_steps: {statistics.median(steps)}")
    print(f"edit_seconds: {wall:.2f}")
    print(f"edit_cpu_seconds: {cpu:.2f}", flush=True)
    if not args.skip_parts:
        print(f"covariance_throughput_ratio: {covariance_throughput_ratio(model, layer=layer):.3f}", flush=True)
        print(f"trace_seconds: {trace_seconds(model):.1f}", flush=True)


if __name__ == "__main__":
    main()
