"""Neuron-scan benchmarks, imported by ``benchmarks/bench_analyzers.py`` (and runnable on their own).

- ``neuron_scan_throughput_ratio``: tokens/s of the top-k neuron scan / tokens/s of plain forward passes over the
  same documents. The scan stops the forward pass after its layer, so the default layer is the *last* one: the
  case where stopping early saves least (only the final norm and the unembedding), i.e. the honest worst case.
  With ``baseline="stopped"`` the yardstick is forward passes cut at the same hook, which isolates the top-k cost.
  Each batch of documents is timed both ways in alternating order (interleaved), per repeat the ratio of the
  summed times is taken, and the median over repeats is returned. Both sides include tokenization.
- ``neuron_scan_peak_memory``: peak resident memory of a scan of ``n_docs`` documents, measured in a fresh
  subprocess (``/proc/self/status`` VmHWM, reset after the model is loaded via ``/proc/self/clear_refs``).

Run: ``INTERP_CACHE=/tmp/icache python benchmarks/_neuron_bench.py [n_docs]``
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time


def neuron_scan_throughput_ratio(model=None, n_docs: int = 16, *, layer: int | None = None, repeats: int = 3,
                                 batch_size: int = 8, k: int = 10, baseline: str = "forward") -> float:
    """tokens/s of the scan / tokens/s of the baseline over the same documents (median over ``repeats``).

    baseline "forward": plain full forward passes (the issue's yardstick). "stopped": forward passes cut at the
    same hook as the scan with no work done there — isolates the cost of the top-k bookkeeping itself."""
    import torch

    import interp
    from interp.core.corpus import token_batches, wiki_documents
    from interp.core.hooks import capture
    from interp.analyses.neurons import neurons

    if baseline not in ("forward", "stopped"):
        raise ValueError(f"baseline {baseline!r}; allowed: 'forward', 'stopped'")
    model = model if model is not None else interp.load()
    layer = model.n_layers - 1 if layer is None else layer
    view = neurons(model, layer)
    docs = wiki_documents(n_docs)
    chunks = [docs[i:i + batch_size] for i in range(0, len(docs), batch_size)]

    def scan(i, chunk):
        view.scan_state(chunk, k=k, batch_size=batch_size, doc_offset=i * batch_size, progress=False)

    def forward(i, chunk):
        for toks, _, _ in token_batches(model, chunk, batch_size=batch_size):
            if baseline == "stopped":
                capture(model, toks, [view.hook], stop=True)  # the same early stop as the scan, no bookkeeping
            else:
                with torch.no_grad():
                    model.forward(toks)

    scan(0, chunks[0])  # warm-up (allocator, kernels)
    forward(0, chunks[0])
    ratios = []
    for _ in range(repeats):
        t_scan = t_base = 0.0
        for i, chunk in enumerate(chunks):
            order = (scan, forward) if i % 2 == 0 else (forward, scan)
            for fn in order:
                t0 = time.perf_counter()
                fn(i, chunk)
                dt = time.perf_counter() - t0
                if fn is scan:
                    t_scan += dt
                else:
                    t_base += dt
        ratios.append(t_base / t_scan)  # same tokens on both sides: (tok / t_scan) / (tok / t_base)
    return statistics.median(ratios)


_MEMORY_CHILD = r"""
import json, os, sys, torch
torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
import interp
from interp.core.corpus import wiki_documents
from interp.analyses.neurons import neurons
n_docs, layer, max_len, batch_size = (int(a) for a in sys.argv[1:5])
rss_start = status("VmRSS")
model = interp.load(device="cpu")
model_bytes = sum(p.numel() * p.element_size() for p in model.named_params().values())
docs = wiki_documents(n_docs)
rss_loaded = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak (VmHWM) to the current RSS: measure the scan, not the loading
res = neurons(model, layer).scan(docs, k=10, max_len=max_len, batch_size=batch_size, progress=False)
print(json.dumps({"n_docs": n_docs, "layer": layer, "tokens": res.state.n_tokens, "model_bytes": model_bytes,
                  "rss_start": rss_start, "rss_loaded": rss_loaded, "peak_scan": status("VmHWM")}))
"""


def neuron_scan_peak_memory(n_docs: int = 2000, layer: int = 0, max_len: int = 128, batch_size: int = 8) -> dict:
    """Peak RSS of a scan in a fresh process: returns bytes for model, RSS before/after loading, scan peak, and
    ``peak_over_start`` = scan peak - RSS before loading (compare with model_bytes + 1 GiB)."""
    env = dict(os.environ)
    env.setdefault("INTERP_CACHE", os.path.expanduser("~/.cache/interp"))
    out = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, str(n_docs), str(layer), str(max_len),
                          str(batch_size)], capture_output=True, text=True, env=env, check=True)
    info = json.loads(out.stdout.strip().splitlines()[-1])
    info["peak_over_start"] = info["peak_scan"] - info["rss_start"]
    info["peak_over_loaded"] = info["peak_scan"] - info["rss_loaded"]
    return info


if __name__ == "__main__":
    import interp

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    model = interp.load()
    print(f"neuron_scan_throughput_ratio: {neuron_scan_throughput_ratio(model, n_docs=n):.3f}")
    print(f"neuron_scan_overhead_ratio: {neuron_scan_throughput_ratio(model, n_docs=n, baseline='stopped'):.3f}"
          "  (vs forwards cut at the same layer: the top-k bookkeeping alone)")
    mem = neuron_scan_peak_memory()
    mib = 1024 ** 2
    print(f"neuron_scan_peak_memory_mb: {mem['peak_over_start'] / mib:.0f} (model {mem['model_bytes'] / mib:.0f} MB, "
          f"{mem['n_docs']} docs, {mem['tokens']} tokens; scan peak over loaded RSS "
          f"{mem['peak_over_loaded'] / mib:.0f} MB)")
