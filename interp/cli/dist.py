"""Command lines of the distributed corpus statistics (``interp.analyses.dist``).

    python -m interp.dist stats|neurons|heads ... [--nproc N]    # the torchrun worker (and its local launcher)
    interp stats --layer 4 [--nproc N]                           # key statistics, in this process or on N ranks

``--nproc N`` outside torchrun re-runs the same worker command under ``torchrun --standalone`` (:func:`launch_local`);
rank 0 prints one JSON line, or writes it to ``--report`` (how ``interp stats`` gets the result back).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

from ..analyses import dist
from ..core.inputs import check_int
from ..core.loading import load
from .common import add_common, load_model


# ============================================================================================== torchrun worker
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m interp.dist", description=dist.__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="job", required=True)

    def common(q):
        q.add_argument("--nproc", type=int, default=None,
                       help="start this many local ranks (torchrun --standalone); omit when launched by torchrun")
        q.add_argument("--backend", choices=["gloo", "nccl"], default=None, help="default: nccl with CUDA, else gloo")
        q.add_argument("--model", default=None,
                       help="model: a short name (e.g. gemma3-270m), a folder, a .gguf or a hub name (default: SmolLM2)")
        q.add_argument("--batch-size", type=int, default=8)
        q.add_argument("--max-len", type=int, default=128, help="tokens per document incl. BOS")
        q.add_argument("--out", default=None, help="output safetensors file (rank 0 writes it)")
        q.add_argument("--progress", action="store_true")
        q.add_argument("--report", default=None, help=argparse.SUPPRESS)  # rank 0's JSON to this file, not stdout

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
    q = sub.add_parser("features", help="sparse transcoders trained on every rank together (gradients all-reduced)")
    q.add_argument("--layers", default=None, help="comma-separated layers (default: every layer)")
    # None: TrainSettings' default (the one-process run's), so both ranks and one process train the same thing
    q.add_argument("--width", type=int, default=None)
    q.add_argument("--k", type=int, default=None)
    q.add_argument("--tokens", type=int, default=None)
    q.add_argument("--rows", type=int, default=None, help="rows of the global batch (a multiple of the ranks)")
    q.add_argument("--ctx", type=int, default=None)
    q.add_argument("--lr", type=float, default=None)
    q.add_argument("--seed", type=int, default=None)
    q.add_argument("--dead-tokens", type=int, default=None, help="idle tokens before a latent counts as dead")
    q.add_argument("--resample-every", type=int, default=None, help="tokens between restarts of dead latents")
    q.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    common(q)
    return p


def launch_local(nproc: int, argv: list[str]) -> int:
    """Run the worker command ``argv`` (``--nproc`` dropped) under ``torchrun --standalone --nproc-per-node
    nproc``; return its exit code."""
    from torch.distributed.run import get_args_parser, run

    if not isinstance(nproc, int) or nproc < 1:
        raise ValueError(f"--nproc {nproc!r}; allowed: a positive integer")
    rest = [a for i, a in enumerate(argv) if a != "--nproc" and not (i and argv[i - 1] == "--nproc")
            and not a.startswith("--nproc=")]
    args = get_args_parser().parse_args(["--standalone", "--nproc-per-node", str(nproc), "--module",
                                         "interp.dist", *rest])
    try:
        run(args)
    except Exception as e:  # noqa: BLE001 - torchrun raises ChildFailedError with every rank's traceback already printed
        print(f"interp.dist: a rank failed ({type(e).__name__})", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m interp.dist``: one rank's job (under torchrun), or the local launcher with ``--nproc``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.nproc is not None and "WORLD_SIZE" not in os.environ:
        return launch_local(args.nproc, argv)
    world = dist.init(args.backend)
    if not torch.cuda.is_available():
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world.local_size))
    device = f"cuda:{world.local_rank}" if torch.cuda.is_available() else "cpu"
    model = load(args.model, device=device)
    common = {"batch_size": args.batch_size, "max_len": args.max_len, "world": world, "out": args.out,
              "progress": args.progress}
    try:
        if args.job == "stats":
            res = dist.run_stats(model, args.layer, n_tokens=args.n_tokens or None, **common)
        elif args.job == "neurons":
            res = dist.run_neurons(model, args.layer, n_docs=args.n_docs, k=args.k, **common)
        elif args.job == "features":
            layers = [int(x) for x in args.layers.split(",")] if args.layers else None
            given = {k: getattr(args, k) for k in ("width", "k", "tokens", "rows", "ctx", "lr", "seed",
                                                   "dead_tokens", "resample_every")}
            res = dist.run_features(model, layers, world=world, out=args.out, progress=args.progress,
                                    cache=not args.no_cache, **{k: v for k, v in given.items() if v is not None})
        else:
            res = dist.run_heads(model, n_docs=args.n_docs, **common)
        if world.rank == 0:
            if args.report:
                Path(args.report).write_text(json.dumps(res))
            else:
                print(json.dumps(res))
    finally:
        if world.distributed:
            torch.distributed.destroy_process_group()
    return 0


# ============================================================================================== interp stats
def add_cli(subparsers) -> None:
    """``interp stats``: the key statistics of one layer, in this process or on ``--nproc`` local ranks."""
    p = subparsers.add_parser("stats", help="MLP key second moments C at one layer (cached; --nproc N ranks)")
    p.add_argument("--layer", type=int, required=True)
    p.add_argument("--n-tokens", type=int, default=100_000, help="counted tokens (0 = the whole corpus)")
    p.add_argument("--nproc", type=int, default=1, help="local ranks (torch.distributed, gloo/nccl)")
    p.add_argument("--out", default=None, help="write here instead of the cache")
    add_common(p)
    p.set_defaults(func=cli_stats)


def cli_stats(args) -> dict:
    if not isinstance(args.nproc, int) or isinstance(args.nproc, bool) or args.nproc < 1:
        raise ValueError(f"--nproc {args.nproc!r}; allowed: a positive integer")
    check_int("--n-tokens", args.n_tokens, 0)
    check_int("--layer", args.layer)
    if args.nproc == 1:
        res = dist.run_stats(load_model(args), args.layer, n_tokens=args.n_tokens or None, out=args.out,
                             progress=True)
    else:
        res = _run_ranks(args)
    res["_text"] = (f"C at layer {res['layer']}: {res['count']:,} tokens from {res['docs']} documents on "
                    f"{res['world_size']} rank(s) in {res['seconds']:.1f} s; condition number "
                    f"{res['condition_number']:.3g}; written to {res['path']}")
    return res


def _run_ranks(args) -> dict:
    """``args.nproc`` local ranks through :func:`launch_local`; rank 0 hands its report back in a file."""
    with tempfile.TemporaryDirectory(prefix="interp-stats-") as tmp:
        report = Path(tmp) / "report.json"
        argv = ["stats", "--layer", str(args.layer), "--n-tokens", str(args.n_tokens), "--progress",
                "--report", str(report)]
        argv += (["--model", args.source] if args.source else []) + (["--out", args.out] if args.out else [])
        if launch_local(args.nproc, argv) or not report.exists():
            raise ValueError(f"the {args.nproc}-rank run failed (the ranks' errors are above, on stderr)")
        return json.loads(report.read_text())
