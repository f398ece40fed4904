"""The one progress bar: tqdm on stderr, or nothing when disabled (tests, library calls that asked for quiet).

Long work (tracing, corpus scans, statistics, evaluation, training) wraps its loop in :func:`bar`; the CLI turns
it on, library calls take a ``progress=`` flag.
"""

from __future__ import annotations

import sys
from typing import Iterable


def bar(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "", enabled: bool = True,
        initial: int = 0, unit: str = "it"):
    """A tqdm bar on stderr (``disable=not enabled``): iterate it, or call ``.update(n)`` and ``.close()`` /
    use it as a context manager. Left behind on screen only when it finished."""
    from tqdm import tqdm  # the plain bar: in Jupyter it writes to stderr too, without needing ipywidgets

    return tqdm(iterable, total=total, desc=desc, disable=not enabled, initial=initial, unit=unit,
                file=sys.stderr, leave=False, dynamic_ncols=True)


def emit(line: str, enabled: bool = True) -> None:
    """One line of progress text on stderr (for steps a bar does not fit)."""
    if enabled:
        print(line, file=sys.stderr, flush=True)
