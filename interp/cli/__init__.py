"""``interp`` command line. Every subcommand takes ``--json`` and then prints exactly one JSON document.

Subcommands live next to the code they run: each analyzer module may define ``add_cli(subparsers)``; a handler
returns a JSON-able dict (``"_text"``, if present, is what is printed without ``--json``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys

# Analyzer modules that contribute subcommands, in the order they appear in --help.
ANALYZER_MODULES = ["interp.analyses.lens", "interp.analyses.attribution", "interp.analyses.attention",
                    "interp.analyses.neurons", "interp.analyses.induction", "interp.analyses.induction_train",
                    "interp.analyses.trace", "interp.editing.rome", "interp.analyses.dist"]


def analyzer_modules() -> list:
    """The analyzer modules that are present (tests check that all of ANALYZER_MODULES are)."""
    found = []
    for name in ANALYZER_MODULES:
        try:
            found.append(importlib.import_module(name))
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
    return found


def add_common(p: argparse.ArgumentParser, *, source: bool = False) -> None:
    """Options every subcommand shares: --json, --device, and (where it makes sense) a model SOURCE."""
    if source:
        p.add_argument("source", nargs="?", default=None,
                       help="model: a local HF folder, a .gguf file or a hub name (default: embedded SmolLM2)")
    else:
        p.add_argument("--model", dest="source", default=None,
                       help="model: a local HF folder, a .gguf file or a hub name (default: embedded SmolLM2)")
    p.add_argument("--device", default=None, help="auto (default: cuda, then mps, then cpu), cpu, cuda, cuda:N, mps")
    p.add_argument("--device-map", default=None,
                   help="spread the layers over devices: auto, balanced, sequential, or a JSON {module: device}")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text")


def load_model(args):
    from ..core.loading import load

    device_map = getattr(args, "device_map", None)
    if device_map and device_map.lstrip().startswith("{"):
        try:
            device_map = json.loads(device_map)
        except json.JSONDecodeError as e:
            raise ValueError(f"--device-map {device_map!r} is not valid JSON ({e}); allowed: auto, balanced, "
                             'sequential, or e.g. \'{"model.layers.0": 0, ...}\'') from None
    return load(getattr(args, "source", None), device=getattr(args, "device", None), device_map=device_map)


def _info(args) -> dict:
    model = load_model(args)
    frame = model.summary()
    params = {item: int(v) for (sec, item), v in frame["value"].items() if sec == "parameters"}
    shares = {item: float(s) for (sec, item), s in frame["share"].items() if sec == "parameters"}
    arch = {item: v for (sec, item), v in frame["value"].items() if sec == "architecture"}
    return {"parameters": params, "shares": shares, "architecture": arch, "fingerprint": model.fingerprint,
            "_text": frame.to_string()}


def _run(args) -> dict:
    import torch

    model = load_model(args)
    if args.top < 1:
        raise ValueError(f"--top {args.top}: allowed >= 1")
    logits = model.run(args.text)[0, -1]
    probs = torch.softmax(logits, -1)
    top = torch.topk(probs, min(args.top, model.d_vocab))
    rows = [{"rank": i + 1, "token": model.tokenizer.decode([int(t)]), "token_id": int(t), "prob": float(p),
             "logit": float(logits[t])} for i, (p, t) in enumerate(zip(top.values, top.indices))]
    text = "\n".join(f"{r['rank']:>2}. {r['token']!r:<16} p={r['prob']:.4f}  logit={r['logit']:.3f}" for r in rows)
    return {"text": args.text, "top": rows, "_text": f"next tokens after {args.text!r}:\n{text}"}


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

    for module in analyzer_modules():
        if hasattr(module, "add_cli"):
            module.add_cli(sub)
    return parser


def _jsonable(x):
    import numpy as np
    import torch

    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items() if k != "_text"}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, torch.Tensor):
        return _jsonable(x.tolist())
    if isinstance(x, np.generic):
        return _jsonable(x.item())
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    return str(x)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except (ValueError, FileNotFoundError) as e:
        if getattr(args, "json", False):
            print(json.dumps({"error": str(e), "type": type(e).__name__}))
        else:
            print(f"interp {args.command}: error: {e}", file=sys.stderr)
        return 2
    try:
        if getattr(args, "json", False):
            print(json.dumps(_jsonable(result if isinstance(result, dict) else {"result": result})))
        elif isinstance(result, dict):
            print(result.get("_text") or json.dumps(_jsonable(result), indent=2))
        elif result is not None:
            print(result)
        sys.stdout.flush()
    except BrokenPipeError:
        # `interp ... | head` closed the pipe early; that is not an error. Point stdout at devnull so the
        # interpreter's final flush does not raise again.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
