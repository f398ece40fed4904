"""Benchmarks of ROME's two locating/statistics parts; ``bench_rome.py`` imports the two functions.

    python benchmarks/bench_rome_parts.py            # prints trace_seconds, covariance_throughput_ratio, ...

- ``trace_seconds``: one full causal trace of the Eiffel Tower prompt (resid, mlp and attn; 10 noise samples;
  window 10) on the embedded model — wall seconds (median of ``repeats``), noise σ computed beforehand.
- ``covariance_throughput_ratio``: tokens/s of ``mlp_key_second_moment`` (no cache, no progress bar) over
  tokens/s of plain forwards (``model.forward`` under no_grad, full logits) over the same documents in the same
  batches (tokenization included on both sides), interleaved repeats, ratio of the median times. Both count the
  same real tokens, so the ratio is t_plain / t_stats. At the edit layer the statistics forward stops after
  that layer; the ``_last_layer`` line is the worst case (nothing skipped, only the float64 accumulation added).
"""

from __future__ import annotations

import os

# On a shared CPU box OpenMP's busy-waiting threads make every op ~6x slower when another process holds a
# core (measured: 20 s vs 3.3 s for the same 5,000-token statistics run); passive waiting avoids that. Only
# takes effect when this file is imported before torch; override by setting the variable yourself.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interp.core.corpus import token_batches, wiki_documents
from interp.analyses.stats import mlp_key_second_moment
from interp.analyses.trace import causal_trace, embedding_std

EIFFEL = ("The Eiffel Tower is located in the city of", "The Eiffel Tower")
# Peak of trace_facts' average MLP indirect effect at the last subject token over the dev facts (78 of them,
# every third dev record, 10 samples, window 10): layer 4 (+0.165), as interp.rome's default edit layer.
EDIT_LAYER_EMBEDDED = 4


def default_layer(model) -> int:
    return EDIT_LAYER_EMBEDDED if model.n_layers == 30 and model.d_mlp == 1536 else model.n_layers // 3


def trace_seconds(model, *, samples: int = 10, repeats: int = 1) -> float:
    embedding_std(model)  # the noise σ is computed once per model; not part of a trace's cost
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        causal_trace(model, *EIFFEL, samples=samples)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _plain_forwards(model, docs, batch_size, max_len) -> None:
    with torch.no_grad():
        for toks, _, _ in token_batches(model, docs, max_len=max_len, batch_size=batch_size):
            model.forward(toks)


def covariance_throughput_ratio(model, *, layer: int | None = None, n_docs: int = 48, batch_size: int = 8,
                                max_len: int = 128, repeats: int = 3) -> float:
    layer = default_layer(model) if layer is None else model.check_layer(layer)
    docs = wiki_documents(n=n_docs)
    kw = {"n_tokens": None, "n_docs": n_docs, "batch_size": batch_size, "max_len": max_len, "cache": False,
          "progress": False}
    mlp_key_second_moment(model, layer, **{**kw, "n_docs": batch_size})  # warm-up
    t_plain, t_stats = [], []
    for _ in range(repeats):  # interleaved, so load changes hit both sides alike
        t0 = time.perf_counter()
        _plain_forwards(model, docs, batch_size, max_len)
        t_plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        mlp_key_second_moment(model, layer, **kw)
        t_stats.append(time.perf_counter() - t0)
    return statistics.median(t_plain) / statistics.median(t_stats)


def main() -> None:
    import interp

    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    model = interp.load(device="cpu")
    layer = default_layer(model)
    print(f"covariance_throughput_ratio: {covariance_throughput_ratio(model, layer=layer):.3f}", flush=True)
    print(f"covariance_throughput_ratio_last_layer: "
          f"{covariance_throughput_ratio(model, layer=model.n_layers - 1):.3f}", flush=True)
    print(f"trace_seconds: {trace_seconds(model):.1f}", flush=True)


if __name__ == "__main__":
    main()
