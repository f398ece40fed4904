"""``interp reproduce-induction``: train the toy models from scratch and show the induction phase change."""

from __future__ import annotations

from pathlib import Path

from ..analyses.induction import TrainConfig, reproduce
from ..core.inputs import check_int
from .common import add_html, html_path, save_view


def add_cli(subparsers) -> None:
    p = subparsers.add_parser("reproduce-induction",
                              help="train a 2-layer attention-only model from scratch and show the induction "
                                   "phase change (plus a 1-layer control)")
    p.add_argument("--out", required=True, help="folder for checkpoints (safetensors), CSV logs, plot, summary")
    p.add_argument("--layers", type=int, choices=[1, 2], default=2,
                   help="2: the 2-layer run plus the 1-layer control; 1: the 1-layer model alone")
    p.add_argument("--seeds", type=int, default=1, help="repeat the 2-layer run over seeds 0..N-1")
    p.add_argument("--steps", type=int, default=None, help=f"training steps (default {TrainConfig.steps})")
    p.add_argument("--threads", type=int, default=1, help="torch threads (results depend on it; default 1)")
    p.add_argument("--workers", type=int, default=1,
                   help="train this many runs at once in separate processes (same results; default 1)")
    add_html(p, "the training runs' table")
    # No model to load, so not add_common: only --json applies.
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    p.set_defaults(func=cli_reproduce)


def cli_reproduce(args) -> dict:
    check_int("--seeds", args.seeds, 1)
    check_int("--steps", args.steps, 1, allow_none=True)
    check_int("--threads", args.threads, 1)
    check_int("--workers", args.workers, 1)
    html = html_path(args)
    result = reproduce(args.out, layers=args.layers, seeds=args.seeds, steps=args.steps, threads=args.threads,
                       workers=args.workers, progress=True)
    files = ", ".join(Path(p).name for v in result.files.values()
                      for p in (v.values() if isinstance(v, dict) else [v]))
    text = f"{result.summary()}\nfiles under {args.out}: {files}"
    return save_view(result, html, {**result.to_json(), "_text": text})
