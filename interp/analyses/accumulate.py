"""Corpus accumulators: one protocol, one scan driver, one distributed reduce.

A corpus statistic (ROME's key second moments ``stats.KeyStats``, the neuron top-k ``neurons.TopK``, the per-head
attention averages ``head_scan.HeadStats``) is an :class:`Accumulator`, like baukit's runningstats ``Stat``:

- ``add(batch, acts)``      fold in one batch (``acts``: what the scan captured at ``hook_names``),
- ``merge(other)``          a new accumulator of both (disjoint corpus shards -> the one-pass result),
- ``state_dict()``          ``{"tensors": {name: CPU tensor}, "meta": {JSON}}``, ``from_state_dict(state)``,
- ``save(path)`` / ``load(path)``  that state as safetensors plus a ``.json`` sidecar with its SHA-256 (never pickle),
- ``reduction`` / ``summed`` how ranks combine: ``"sum"`` all-reduces the ``summed`` tensors (exact float64 sums
  and integer counts), ``"merge"`` gathers every rank's state and merges them in rank order (the exact top-k).

:func:`scan` is the one loop that streams documents through a model for any accumulator: batches built by
``core.corpus.token_batches`` (BOS + each document cut to ``max_len``, right-padded), one ``capture(..., stop=True)``
per batch so nothing above the last needed hook runs, then ``acc.add``. :func:`reduce` is the one distributed
reduction, driven by the accumulator's ``reduction``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
import torch.distributed as tdist

from ..core.corpus import token_batches
from ..core.hooks import capture
from ..core.paths import file_sha256
from ..core.progress import bar


# ============================================================================================== protocol
@dataclass
class Batch:
    """One padded batch of a scan: ``tokens`` [b, pos], ``mask`` [b, pos] (real tokens, BOS included),
    ``counted`` [b, pos] (real non-BOS tokens inside the scan's token budget), ``doc_ids`` [b] (global ids)."""

    tokens: torch.Tensor
    mask: torch.Tensor
    counted: torch.Tensor
    doc_ids: torch.Tensor


class Accumulator:
    """Base of the corpus accumulators (see the module docstring). Subclasses set ``hook_names`` (instance or
    class attribute), ``reduction`` and ``summed``, and implement ``add``, ``merge``, ``state_dict`` and
    ``from_state_dict``; ``save``/``load`` and the reduction come from here."""

    reduction: ClassVar[str] = "merge"  # "sum": all-reduce ``summed``; "merge": gather and merge in rank order
    summed: ClassVar[tuple[str, ...]] = ()
    hook_names: Sequence[str] = ()

    def keep(self, name: str, t: torch.Tensor, batch: Batch):
        """What the scan keeps of activation ``t`` at hook ``name`` (runs inside the hook: reduce here to hold
        less than the full activation)."""
        return t.detach()

    def add(self, batch: Batch, acts: dict) -> None:  # pragma: no cover - every accumulator implements it
        raise NotImplementedError

    def merge(self, other):  # pragma: no cover
        raise NotImplementedError

    def state_dict(self) -> dict:  # pragma: no cover
        raise NotImplementedError

    @classmethod
    def from_state_dict(cls, state: dict):  # pragma: no cover
        raise NotImplementedError

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``path`` (safetensors, metadata in its header) and ``path`` with ``.json`` (metadata + SHA-256)."""
        return write_state(Path(path), self.state_dict())

    @classmethod
    def load(cls, path: str | os.PathLike):
        """Read what :meth:`save` wrote; FileNotFoundError if absent, ValueError if truncated or altered."""
        return cls.from_state_dict(read_state(Path(path)))


# ============================================================================================== scan driver
def scan(model, docs: Sequence, acc: Accumulator, *, batch_size: int = 8, max_len: int = 128, doc_offset: int = 0,
         start_doc: int = 0, n_tokens: int | None = None, progress: bool = False, desc: str = "scan",
         checkpoint: Callable[[dict], None] | None = None, checkpoint_every: int = 25,
         callback: Callable[[dict], None] | None = None) -> Accumulator:
    """Stream ``docs[start_doc:]`` through ``model`` into ``acc`` (in place; returned).

    Document ``i`` of ``docs`` has the global id ``doc_offset + i``. ``n_tokens``: count at most this many more
    real non-BOS tokens (``Batch.counted``; the last batch is cut row-major) and stop; None counts all.
    After every batch ``callback(info)`` gets ``{"batches", "docs_consumed", "count"}`` (``docs_consumed``
    relative to ``docs``, ``count`` the tokens counted by this call). ``checkpoint(info)`` runs every
    ``checkpoint_every`` batches and, when anything (a KeyboardInterrupt, a failing forward, the callback)
    interrupts the scan between two batches, once more for the last whole batch before re-raising."""
    names = list(acc.hook_names)
    budget = math.inf if n_tokens is None else n_tokens
    info = {"batches": 0, "docs_consumed": start_doc, "count": 0}
    consistent = True  # False while acc holds half a batch: a checkpoint then would be torn
    total, unit = (n_tokens, "tok") if n_tokens is not None else (len(docs) - start_doc, "doc")
    shown = bar(total=total, desc=desc, enabled=progress, unit=unit)
    try:
        for toks, mask, idx in token_batches(model, docs[start_doc:], max_len=max_len, batch_size=batch_size):
            if info["count"] >= budget:
                break
            counted = _counted_positions(mask, budget - info["count"])
            ids = torch.tensor(idx, dtype=torch.int64) + (doc_offset + start_doc)
            batch = Batch(toks, mask, counted, ids)
            store, _ = capture(model, toks, names, keep=lambda name, t, b=batch: acc.keep(name, t, b), stop=True,
                               description=desc)
            consistent = False
            acc.add(batch, store)
            del store  # a batch's activations must not outlive it (peak memory: one batch, not two)
            n = int(counted.sum())
            info = {"batches": info["batches"] + 1, "docs_consumed": start_doc + idx[-1] + 1,
                    "count": info["count"] + n}
            consistent = True
            shown.update(n if unit == "tok" else len(idx))
            if checkpoint is not None and info["batches"] % checkpoint_every == 0:
                checkpoint(info)
            if callback is not None:
                callback(info)
    except BaseException:
        if checkpoint is not None and consistent and info["batches"] > 0:
            checkpoint(info)
        raise
    finally:
        shown.close()
    return acc


def _counted_positions(mask: torch.Tensor, budget) -> torch.Tensor:
    """Real, non-BOS positions of a batch (row-major), at most ``budget`` of them."""
    mask = mask.clone()
    mask[:, 0] = False  # BOS (token_batches puts it first in every row)
    if math.isfinite(budget) and int(mask.sum()) > budget:
        order = mask.flatten().cumsum(0).reshape(mask.shape)
        mask &= order <= budget
    return mask


# ============================================================================================== ranks
@dataclass(frozen=True)
class World:
    """This process's place among the ranks (one process: rank 0 of 1)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1

    @property
    def distributed(self) -> bool:
        return self.size > 1 and tdist.is_available() and tdist.is_initialized()


def _collective_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if tdist.get_backend() == "nccl" else torch.device("cpu")


def all_reduce_sum(t: torch.Tensor, world: World) -> torch.Tensor:
    """Sum of ``t`` over ranks (returned, on t's device); identity on one process."""
    if not world.distributed:
        return t
    buf = t.detach().to(_collective_device()).clone()
    tdist.all_reduce(buf, op=tdist.ReduceOp.SUM)
    return buf.to(t.device)


def gather_states(tensors: dict[str, torch.Tensor], world: World) -> list[dict[str, torch.Tensor]]:
    """Every rank's ``tensors`` (name -> tensor; shapes may differ between ranks), in rank order, on CPU."""
    if not world.distributed:
        return [tensors]
    dev = _collective_device()
    out: list[dict] = [{} for _ in range(world.size)]
    for name in sorted(tensors):
        t = tensors[name].detach().to(dev).contiguous()
        meta = torch.tensor([t.ndim, *t.shape, *([0] * (8 - t.ndim))], dtype=torch.int64, device=dev)
        metas = [torch.empty_like(meta) for _ in range(world.size)]
        tdist.all_gather(metas, meta)
        shapes = [tuple(int(x) for x in m[1: 1 + int(m[0])]) for m in metas]
        width = max(math.prod(s) for s in shapes)
        flat = torch.zeros(width, dtype=t.dtype, device=dev)
        flat[: t.numel()] = t.reshape(-1)
        bufs = [torch.empty_like(flat) for _ in range(world.size)]
        tdist.all_gather(bufs, flat)
        for r, (buf, shp) in enumerate(zip(bufs, shapes)):
            out[r][name] = buf[: math.prod(shp)].reshape(shp).cpu()
    return out


def reduce(acc: Accumulator, world: World) -> Accumulator:
    """The accumulator of every rank's shard, on every rank (``acc`` itself on one process).

    ``reduction == "sum"``: the ``summed`` tensors are all-reduced, the rest (and the metadata) kept from this
    rank. ``"merge"``: every rank's state is gathered and merged in rank order, so the result is the same on
    every rank and, for an order-defined state like the top-k, exactly the one-process scan's."""
    if not world.distributed:
        return acc
    state = acc.state_dict()
    tensors, meta = dict(state["tensors"]), state["meta"]
    if acc.reduction == "sum":
        for name in acc.summed:
            tensors[name] = all_reduce_sum(tensors[name], world)
        return type(acc).from_state_dict({"tensors": tensors, "meta": meta})
    if acc.reduction != "merge":
        raise ValueError(f"{type(acc).__name__}.reduction={acc.reduction!r}; allowed: 'sum', 'merge'")
    parts = [type(acc).from_state_dict({"tensors": t, "meta": meta}) for t in gather_states(tensors, world)]
    merged = parts[0]
    for part in parts[1:]:
        merged = merged.merge(part)
    return merged


# ============================================================================================== on disk
def write_state(path: Path, state: dict) -> Path:
    """safetensors (tensors + metadata header) plus a JSON sidecar with the tensor file's size and SHA-256, so that
    a reader stopped at any instant sees a whole state, the old one or the new one.

    Two files cannot be renamed at once, so the sidecar is written twice around the tensor file's rename: first
    naming the new file and keeping the entries it replaces under ``"previous"`` (the tensor file still on disk
    matches one of them), then the tensor file, then the sidecar with the new entry alone. Each write goes to a
    temporary name and is renamed."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_orphans(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tensors = {k: v.detach().cpu().contiguous() for k, v in state["tensors"].items()}
    save_file(tensors, str(tmp), metadata={"meta": json.dumps(state["meta"], sort_keys=True)})
    entry = {"meta": state["meta"], "sha256": file_sha256(tmp), "bytes": tmp.stat().st_size}
    side = path.with_suffix(".json")
    # every entry the file on disk may match: a run killed between the first two steps leaves one more each time
    kept = [e for e in _sidecar_entries(side) if e.get("sha256") != entry["sha256"]][:_KEEP_PREVIOUS]
    _write_json(side, {**entry, "previous": kept})
    os.replace(tmp, path)
    _write_json(side, entry)
    return path


_KEEP_PREVIOUS = 3


def _remove_orphans(path: Path) -> None:
    """Temporary files of ``path`` and its sidecar left by writers that were killed (a checkpoint's is ~1 GB); a
    live process's are left alone, since its rename is still to come."""
    for name in (path.name, path.with_suffix(".json").name):
        for tmp in path.parent.glob(f".{name}.*.tmp"):
            pid = tmp.name[len(name) + 2:-4]
            if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
                continue
            try:
                tmp.unlink()
            except FileNotFoundError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _write_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _sidecar_entries(side: Path) -> list[dict]:
    """The sidecar's entry followed by the earlier ones it still keeps (none when it is missing or unreadable)."""
    try:
        info = json.loads(side.read_text())
    except (OSError, ValueError):
        return []
    previous = info.get("previous") or []
    return [{k: info.get(k) for k in ("meta", "sha256", "bytes")}, *previous]


def read_state(path: Path) -> dict:
    """What :func:`write_state` wrote, checked against the sidecar's size and SHA-256."""
    from safetensors import safe_open

    side = path.with_suffix(".json")
    if not path.exists():
        raise FileNotFoundError(f"no accumulator file {path}")
    if not side.exists():
        raise ValueError(f"{side} (metadata and checksum of {path.name}) is missing")
    entries = _sidecar_entries(side)
    if not entries:
        raise ValueError(f"{side} (metadata and checksum of {path.name}) is unreadable")
    size = path.stat().st_size
    digest = file_sha256(path) if any(e.get("bytes") == size for e in entries) else None
    info = next((e for e in entries if e.get("bytes") == size and e.get("sha256") == digest), None)
    if info is None:
        raise ValueError(f"{path} is truncated or altered ({size} bytes, expected {entries[0].get('bytes')}; "
                         "checksum mismatch)")
    with safe_open(str(path), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open is not a dict)
        header = json.loads((f.metadata() or {}).get("meta", "{}"))
    if header != info["meta"]:
        raise ValueError(f"{path}: header metadata and {side.name} disagree")
    return {"tensors": tensors, "meta": info["meta"]}


def remove_state(path: Path) -> None:
    """Delete a saved state and its sidecar (either may be missing)."""
    for p in (path, path.with_suffix(".json")):
        try:
            p.unlink()
        except FileNotFoundError:
            pass
