"""What every command shares: the common options, loading the model they name, the demo section header."""

from __future__ import annotations

import argparse
import json

from ..core.loading import load


def add_common(p: argparse.ArgumentParser, *, source: bool = False) -> None:
    """Options every subcommand shares: --json, --device, --device-map and (where it makes sense) a model SOURCE."""
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
    """The model the command's --model/SOURCE, --device and --device-map name."""
    device_map = getattr(args, "device_map", None)
    if device_map and device_map.lstrip().startswith("{"):
        try:
            device_map = json.loads(device_map)
        except json.JSONDecodeError as e:
            raise ValueError(f"--device-map {device_map!r} is not valid JSON ({e}); allowed: auto, balanced, "
                             'sequential, or e.g. \'{"model.layers.0": 0, ...}\'') from None
    return load(getattr(args, "source", None), device=getattr(args, "device", None), device_map=device_map)


def section(title: str) -> None:
    """A demo section header (``make demo`` prints one per topic)."""
    print(f"\n{'=' * 100}\n{title}\n{'=' * 100}", flush=True)
