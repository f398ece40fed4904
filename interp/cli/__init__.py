"""Layer 3: the ``interp`` command line. Nothing in the library imports it.

One module per command group, each with ``add_cli(subparsers)``, its handlers and text reports, and (where the
topic has one) the ``demo(model)`` that ``make demo`` runs. A handler checks its arguments before the model
loads, calls the analysis, and returns ``{**result.to_json(), "_text": report}``; with ``--json`` exactly one JSON
document is printed, otherwise the text report. Errors in the arguments or the input exit with status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading

import torch

from ..core.provenance import provenance
from ..core.results import jsonable
from . import (
    attention,
    attribution,
    dist,
    edit,
    features,
    graph,
    induction,
    lens,
    neurons,
    patch,
    reproduce,
    trace,
    tuned_lens,
)
from .common import add_common, load_model, section

__all__ = ["main", "build_parser", "commands", "add_common", "load_model", "section", "COMMAND_MODULES"]

# The command groups, in the order their subcommands appear in --help.
COMMAND_MODULES = [lens, tuned_lens, attribution, attention, neurons, features, graph, induction, reproduce, trace, edit,
                   dist, patch]


def _info(args) -> dict:
    model = load_model(args)
    frame = model.summary()
    params = {item: int(v) for (sec, item), v in frame["value"].items() if sec == "parameters"}
    shares = {item: float(s) for (sec, item), s in frame["share"].items() if sec == "parameters"}
    arch = {item: v for (sec, item), v in frame["value"].items() if sec == "architecture"}
    return {"parameters": params, "shares": shares, "architecture": arch, "fingerprint": model.fingerprint,
            "_text": frame.to_string()}


def _run(args) -> dict:
    if args.top < 1:  # before the model loads
        raise ValueError(f"--top {args.top}: allowed >= 1")
    model = load_model(args)
    logits = model.run(args.text)[0, -1]
    probs = torch.softmax(logits, -1)
    top = torch.topk(probs, min(args.top, model.d_vocab))
    rows = [{"rank": i + 1, "token": model.tokenizer.decode([int(t)]), "token_id": int(t), "prob": float(p),
             "logit": float(logits[t])} for i, (p, t) in enumerate(zip(top.values, top.indices))]
    text = "\n".join(f"{r['rank']:>2}. {r['token']!r:<16} p={r['prob']:.4f}  logit={r['logit']:.3f}" for r in rows)
    return {"text": args.text, "top": rows, "_text": f"next tokens after {args.text!r}:\n{text}"}


def commands(parser: argparse.ArgumentParser | None = None, prefix: str = ""):
    """Every command that runs something, as ``(name, its parser)``: a group such as ``features`` is walked into
    (``features train``, ``features show``, ...)."""
    parser = parser or build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                full = f"{prefix} {name}".strip()
                if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
                    yield from commands(sub, full)
                else:
                    yield full, sub


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="interp", description="Look inside a language model.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("info", help="parameter counts and architecture facts of a model")
    add_common(p, source=True)
    p.set_defaults(func=_info)

    p = sub.add_parser("run", help="top next tokens for a text")
    p.add_argument("text")
    p.add_argument("--top", type=int, default=5)
    add_common(p)
    p.set_defaults(func=_run)

    for module in COMMAND_MODULES:
        module.add_cli(sub)
    return parser


@contextlib.contextmanager
def term_as_interrupt():
    """SIGTERM stops a command as Ctrl-C does, so that a long run (dictionaries, the tuned lens, an edit
    evaluation) keeps what it did: a job started in the background ignores SIGINT, and `kill` or a scheduler
    sends TERM. The previous handler comes back on every exit."""
    if threading.current_thread() is not threading.main_thread():     # signal handlers live on the main thread
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")
    before = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with term_as_interrupt():
            result = args.func(args)
    except KeyboardInterrupt as e:
        print(f"interp {args.command}: interrupted{f' ({e})' if str(e) else ''}", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError) as e:
        if getattr(args, "json", False):
            print(json.dumps({"error": str(e), "type": type(e).__name__}))
        else:
            print(f"interp {args.command}: error: {e}", file=sys.stderr)
        return 2
    try:
        if getattr(args, "json", False):
            doc = result if isinstance(result, dict) else {"result": result}
            doc = {**doc, "provenance": provenance("interp " + " ".join(sys.argv[1:] if argv is None else argv))}
            print(json.dumps(jsonable(doc)))
        elif isinstance(result, dict):
            print(result.get("_text") or json.dumps(jsonable(result), indent=2))
        elif result is not None:
            print(result)
        sys.stdout.flush()
    except BrokenPipeError:
        # `interp ... | head` closed the pipe early; that is not an error. Point stdout at devnull so the
        # interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
