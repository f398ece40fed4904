"""The saved state of a sequential-editing run (``sequential_edits(state_dir=...)``): after every step the edited
layers' matrices (safetensors) and the steps so far (JSON), under a new name, then the older save dropped, so an
interrupt at any moment leaves one complete save."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import torch

from ...core.results import jsonable
from ..base import read_edit_files, write_edit_files

STATE_FORMAT = "interp.sequential_edits.state.v1"


def matrix_digest(matrices: dict) -> str:
    h = hashlib.sha256()
    for layer in sorted(matrices):
        h.update(f"{layer}:".encode())
        h.update(matrices[layer].detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _state_files(state_dir: Path) -> list[tuple[int, Path]]:
    """Saved steps, newest first: ``[(step, stem)]`` for every ``step-NNNNN.json`` in ``state_dir``."""
    out = []
    for p in state_dir.glob("step-*.json"):
        try:
            out.append((int(p.stem.split("-", 1)[1]), p.with_suffix("")))
        except ValueError:
            continue
    return sorted(out, reverse=True)


def save_state(state_dir: Path, run: dict, step: int, matrices: dict, progress: dict) -> None:
    """Save the run after ``step``: ``matrices`` ({layer: tensor}) and ``progress`` (steps, checkpoints, ...) under
    a new name, then drop older saves, so an interrupt at any moment leaves one complete save."""
    older = _state_files(state_dir)
    write_edit_files(state_dir / f"step-{step:05d}", {f"layer.{l}": m for l, m in matrices.items()}, STATE_FORMAT,
                     {"run": run, "step": step, **jsonable(progress)})
    for s, stem in older:
        if s != step:
            for suffix in (".json", ".safetensors"):
                stem.with_name(stem.name + suffix).unlink(missing_ok=True)


def load_state(state_dir: Path, run: dict) -> tuple[dict, dict] | None:
    """``(progress, {layer: matrix})`` of the newest complete save in ``state_dir`` (None: nothing saved yet). A
    save of another run (model, records, editor, settings or unedited matrices differ) is refused, naming what
    differs."""
    problems = []
    for step, stem in _state_files(state_dir):
        try:
            meta, tensors = read_edit_files(stem, STATE_FORMAT, "sequential-editing state")
        except (ValueError, FileNotFoundError) as e:  # a save interrupted while written: an older one is complete
            problems.append(f"step {step}: {e}")
            continue
        differ = sorted(k for k in set(run) | set(meta["run"]) if run.get(k) != meta["run"].get(k))
        if differ:
            raise ValueError(f"state_dir {str(state_dir)!r} holds another run (it differs in {', '.join(differ)}); "
                             "allowed: the directory of this run, an empty one or a new one")
        return nan_for_null(meta), {int(k.split(".", 1)[1]): v for k, v in tensors.items()}
    if problems:  # saves exist and none is whole: starting over would hide it
        raise ValueError(f"state_dir {str(state_dir)!r} holds no complete save ({'; '.join(problems)}); allowed: "
                         "a directory with a complete save, or an empty one to start the run again")
    return None


def nan_for_null(x):
    """JSON writes NaN as null: read it back as NaN."""
    if isinstance(x, dict):
        return {k: nan_for_null(v) for k, v in x.items()}
    if isinstance(x, list):
        return [nan_for_null(v) for v in x]
    return math.nan if x is None else x
