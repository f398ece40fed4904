"""The accumulator protocol (interp.analyses.accumulate): one scan driver and one reduce for every corpus statistic."""

from __future__ import annotations

import json
import os

import pytest
import torch

from interp.analyses import accumulate
from interp.analyses.accumulate import Accumulator, World, read_state, reduce, scan, write_state
from interp.analyses.head_scan import HeadStats
from interp.analyses.stats import KeyStats
from interp.analyses.topk import TopK

DOCS = ["hello world, this is text", "a b", "The cat sat on the mat.", "more text here to read", "x y z w",
        "the quick brown fox jumps", "zebras", "one two three"]


def _fresh(kind, model):
    if kind == "keys":
        return KeyStats.empty(1, model.d_mlp)
    if kind == "topk":
        return TopK.empty(1, 3, range(model.d_mlp))
    return HeadStats.empty(model, [0, 1])


def _same(kind, a, b, exact=False):
    if kind == "topk":
        return a.equal(b)
    ta, tb = a.state_dict()["tensors"], b.state_dict()["tensors"]
    if exact:
        return all(torch.equal(ta[k], tb[k]) for k in ta)
    return all(torch.allclose(ta[k].double(), tb[k].double(), rtol=1e-12, atol=1e-12) for k in ta)


@pytest.mark.parametrize("kind", ["keys", "topk", "heads"])
def test_every_accumulator_follows_the_protocol(kind, tiny_llama, tmp_path):
    whole = scan(tiny_llama, DOCS, _fresh(kind, tiny_llama), batch_size=2)
    assert isinstance(whole, Accumulator) and whole.reduction in ("sum", "merge")
    # shards on batch boundaries merge to the one-pass scan
    a = scan(tiny_llama, DOCS[:4], _fresh(kind, tiny_llama), batch_size=2)
    b = scan(tiny_llama, DOCS[4:], _fresh(kind, tiny_llama), batch_size=2, doc_offset=4)
    assert _same(kind, a.merge(b), whole)
    # state_dict is safetensors-ready tensors plus JSON metadata; save/load round-trips bit for bit
    state = whole.state_dict()
    assert set(state) == {"tensors", "meta"} and all(isinstance(t, torch.Tensor) for t in state["tensors"].values())
    json.dumps(state["meta"])
    back = type(whole).load(whole.save(tmp_path / f"{kind}.safetensors"))
    assert _same(kind, back, whole, exact=True)
    assert (tmp_path / f"{kind}.json").exists()  # the sidecar with the checksum
    # one process: the reduction is the identity
    assert reduce(whole, World()) is whole


def test_saved_state_is_checked(tiny_llama, tmp_path):
    acc = scan(tiny_llama, DOCS, TopK.empty(0, 2, range(8)), batch_size=4)
    path = acc.save(tmp_path / "t.safetensors")
    data = path.read_bytes()
    path.write_bytes(data[:-4])
    with pytest.raises(ValueError, match="truncated"):
        TopK.load(path)
    with pytest.raises(FileNotFoundError):
        TopK.load(tmp_path / "missing.safetensors")


def test_scan_stops_after_the_last_hook_and_leaves_nothing_attached(tiny_llama):
    fired = []
    later = f"blocks.{tiny_llama.n_layers - 1}.hook_resid_post"
    with tiny_llama.hooks([(later, lambda t, hook: fired.append(1))]):
        scan(tiny_llama, DOCS, KeyStats.empty(0, tiny_llama.d_mlp), batch_size=3)
    assert fired == []
    assert tiny_llama.attached_hook_count() == 0


def test_scan_budget_callback_and_checkpoint(tiny_llama):
    seen, saved = [], []
    acc = scan(tiny_llama, DOCS, KeyStats.empty(0, tiny_llama.d_mlp), batch_size=2, n_tokens=30,
               callback=seen.append, checkpoint=saved.append, checkpoint_every=2)
    assert acc.count == 30 and seen[-1]["count"] == 30
    assert [i["batches"] for i in seen] == list(range(1, len(seen) + 1))
    assert [i["batches"] for i in saved] == [i["batches"] for i in seen if i["batches"] % 2 == 0]

    def stop(info):
        if info["batches"] == 3:
            raise KeyboardInterrupt

    saved.clear()
    with pytest.raises(KeyboardInterrupt):
        scan(tiny_llama, DOCS, KeyStats.empty(0, tiny_llama.d_mlp), batch_size=2, callback=stop,
             checkpoint=saved.append, checkpoint_every=2)
    # the interruption checkpoints the last whole batch once more
    assert [i["batches"] for i in saved] == [2, 3] and saved[-1]["docs_consumed"] == 6


def test_unknown_reduction_is_refused(tiny_llama):
    class Odd(HeadStats):
        reduction = "max"

    acc = Odd(torch.zeros(1, 4, tiny_llama.n_heads, dtype=torch.float64), 0, [0], [0] * tiny_llama.n_heads)
    assert reduce(acc, World()) is acc  # one process never reduces
    with pytest.raises(ValueError, match="reduction"):
        reduce(acc, _FakeWorld())


class _FakeWorld(World):
    @property
    def distributed(self) -> bool:
        return True


class _Killed(BaseException):
    """Stands for the process dying: nothing after it runs, nothing catches it."""


def _state(value: float) -> dict:
    return {"tensors": {"w": torch.full((64,), value)}, "meta": {"value": value}}


def _write_killed_at(path, state, monkeypatch, nth: int) -> None:
    """``write_state`` stopped just before its ``nth`` rename."""
    calls = []

    def replace(src, dst):
        calls.append(dst)
        if len(calls) == nth:
            raise _Killed
        return real(src, dst)

    real = accumulate.os.replace
    monkeypatch.setattr(accumulate.os, "replace", replace)
    try:
        with pytest.raises(_Killed):
            write_state(path, state)
    finally:
        monkeypatch.setattr(accumulate.os, "replace", real)


@pytest.mark.parametrize("nth", [1, 2, 3])
def test_a_write_stopped_at_any_rename_leaves_a_whole_state(tmp_path, monkeypatch, nth):
    path = tmp_path / "checkpoint.safetensors"
    write_state(path, _state(1.0))
    _write_killed_at(path, _state(2.0), monkeypatch, nth)
    got = read_state(path)
    # before the tensor file's rename (the 2nd) the old state stands; after it, the new one
    want = 1.0 if nth <= 2 else 2.0
    assert got["meta"] == {"value": want} and torch.equal(got["tensors"]["w"], torch.full((64,), want))
    # killed twice in the window: the file on disk still matches an entry the sidecar keeps
    _write_killed_at(path, _state(3.0), monkeypatch, 2)
    assert read_state(path)["meta"] == {"value": want}
    # the next whole write reads back alone, the sidecar as a completed write leaves it
    write_state(path, _state(4.0))
    assert read_state(path)["meta"] == {"value": 4.0}
    assert set(json.loads(path.with_suffix(".json").read_text())) == {"meta", "sha256", "bytes"}


def test_a_first_write_stopped_before_its_tensor_file_leaves_no_state(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.safetensors"
    _write_killed_at(path, _state(1.0), monkeypatch, 2)
    assert not path.exists()  # callers test exists() before resuming: no checkpoint, not a broken one
    with pytest.raises(FileNotFoundError):
        read_state(path)
    write_state(path, _state(1.0))
    assert read_state(path)["meta"] == {"value": 1.0}


def test_an_altered_file_matching_no_kept_entry_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.safetensors"
    write_state(path, _state(1.0))
    _write_killed_at(path, _state(2.0), monkeypatch, 2)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # same size, other bytes
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="truncated or altered"):
        read_state(path)


def test_a_killed_writers_temporary_files_are_removed_by_the_next_write(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "checkpoint.safetensors"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)  # exited, so no process has it (barring reuse within the test)
    orphans = [tmp_path / f".checkpoint.safetensors.{dead_pid}.tmp", tmp_path / f".checkpoint.json.{dead_pid}.tmp"]
    live = tmp_path / f".checkpoint.safetensors.{os.getppid()}.tmp"  # a live process's write in progress
    other = tmp_path / f".other.safetensors.{dead_pid}.tmp"         # another file's
    for p in [*orphans, live, other]:
        p.write_bytes(b"x")
    write_state(path, _state(1.0))
    assert not any(p.exists() for p in orphans)
    assert live.exists() and other.exists()
    assert read_state(path)["meta"] == {"value": 1.0}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [path.name, "checkpoint.json", live.name, other.name])
