"""Where a stored result came from: the command, the code's commit, the package and machine, the date.

Every ``--json`` the CLI prints carries it under ``"provenance"``, and study scripts put it in the files they
write, so a stored number can be traced to the code that printed it (``tests/test_provenance.py`` checks the
studies' files). The commit is read from the git checkout the package was imported from; an installed copy with
no checkout gets ``None`` and its version only.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]  # the checkout's root when the package runs from one


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def provenance(command: str | None = None) -> dict:
    """``{"command", "commit", "dirty", "version", "date", "machine"}``. ``command``: what made the result (default:
    this process's own command line); ``dirty``: tracked files differed from the commit when it ran."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        package = version("interp")
    except PackageNotFoundError:  # imported from a checkout that was never installed
        package = None
    # only a checkout whose root holds this package: an installed copy inside some other repository (a venv in
    # a checkout) must not report that repository's commit
    top = _git("rev-parse", "--show-toplevel")
    commit = _git("rev-parse", "HEAD") if top and Path(top).resolve() == ROOT else None
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    cpu = platform.processor() or "?"
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    import torch

    return {"command": command or " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "commit": commit, "dirty": bool(status) if commit else None, "version": package,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": {"cpu": cpu, "cores": os.cpu_count(),
                        "threads": torch.get_num_threads(), "torch": torch.__version__,
                        "python": platform.python_version()}}
