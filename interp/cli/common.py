"""What every command shares: the common options, ``--html`` (the result's interactive view), loading the model
they name, the demo section header."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..core.loading import load


def add_common(p: argparse.ArgumentParser, *, source: bool = False) -> None:
    """Options every subcommand shares: --json, --device, --device-map and (where it makes sense) a model SOURCE."""
    what = ("model: a short name (smollm2-135m, gemma3-270m), a local HF folder, a .gguf file or a hub name "
            "(default: embedded SmolLM2)")
    if source:
        p.add_argument("source", nargs="?", default=None, help=what)
        # every command also takes --model, so scripts can name the model the same way everywhere
        p.add_argument("--model", dest="model_option", default=None, help="the same as SOURCE")
    else:
        p.add_argument("--model", dest="source", default=None, help=what)
    p.add_argument("--device", default=None, help="auto (default: cuda, then mps, then cpu), cpu, cuda, cuda:N, mps")
    p.add_argument("--device-map", default=None,
                   help="spread the layers over devices: auto, balanced, sequential, or a JSON {module: device}")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text")


def add_html(p: argparse.ArgumentParser, what: str = "the interactive view") -> None:
    """``--html FILE``: every analysis command can write its result's view (self-contained, opens offline)."""
    p.add_argument("--html", default=None, metavar="FILE",
                   help=f"write {what} as one self-contained HTML file (needs no network to open)")


def html_path(args) -> Path | None:
    """``--html FILE`` checked before the model loads (an analysis can take minutes): its folder must exist."""
    given = getattr(args, "html", None)
    if given is None:
        return None
    path = Path(given)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"--html {given}: folder {str(path.parent)!r} does not exist (create it first)")
    if path.is_dir():
        raise ValueError(f"--html {given}: that is a folder; give a file name such as view.html")
    return path


def save_view(result, path: Path | None, data: dict, **options) -> dict:
    """Write ``result``'s view to ``path`` (if given; ``options`` narrow it) and name the file in ``data``."""
    if path is not None:
        result.save_html(path, **options)
        data["html"] = str(path)
        if data.get("_text"):
            data["_text"] += f"\ninteractive view saved to {path}"
    return data


def load_model(args):
    """The model the command's --model/SOURCE, --device and --device-map name."""
    device_map = getattr(args, "device_map", None)
    if device_map and device_map.lstrip().startswith("{"):
        try:
            device_map = json.loads(device_map)
        except json.JSONDecodeError as e:
            raise ValueError(f"--device-map {device_map!r} is not valid JSON ({e}); allowed: auto, balanced, "
                             'sequential, or e.g. \'{"model.layers.0": 0, ...}\'') from None
    source, option = getattr(args, "source", None), getattr(args, "model_option", None)
    if source is not None and option is not None and source != option:
        raise ValueError(f"two models named: SOURCE {source!r} and --model {option!r}; give one")
    return load(source or option, device=getattr(args, "device", None), device_map=device_map)


def section(title: str) -> None:
    """A demo section header (``make demo`` prints one per topic)."""
    print(f"\n{'=' * 100}\n{title}\n{'=' * 100}", flush=True)
