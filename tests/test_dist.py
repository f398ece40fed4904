"""interp.dist: corpus statistics sharded over torch.distributed ranks equal the one-process scans.

The 2-rank runs are real: ``python -m interp.dist ... --nproc 2`` starts two gloo ranks on this CPU through
torchrun's standalone rendezvous, each loading the embedded model and scanning its shard."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pytest
import torch

from interp.analyses.dist import World, plan_token_budget, shard, token_counts
from interp.analyses.head_scan import HeadStats, head_scan
from interp.analyses.neurons import TopK, neurons
from interp.analyses.stats import KeyStats, mlp_key_second_moment
from interp.core.corpus import wiki_documents


def _launch(*args: str, tmp_path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "interp.dist", *args, "--nproc", "2"], capture_output=True, check=False,
                          text=True, env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert len(lines) == 1, proc.stdout  # only rank 0 reports
    return json.loads(lines[0])


@contextlib.contextmanager
def one_thread():
    """The ranks run with OMP_NUM_THREADS=1 (:func:`_launch`); the one-process reference does too, so both sum in
    the same order however busy the machine is (a threaded BLAS splits its work by the threads it gets)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# ------------------------------------------------------------------------------------------------- sharding
@pytest.mark.parametrize("n,size,align", [(0, 2, 8), (5, 2, 8), (17, 2, 8), (64, 3, 8), (100, 4, 1), (33, 2, 4)])
def test_shards_cover_items_once_on_batch_boundaries(n, size, align):
    parts = [shard(n, World(r, size), align) for r in range(size)]
    covered = [i for off, cnt in parts for i in range(off, off + cnt)]
    assert covered == list(range(n))
    assert all(off % align == 0 for off, cnt in parts if cnt)


def test_token_plan_splits_the_budget_exactly():
    counts = [5, 7, 3, 9, 4, 6, 8, 2, 5, 5]
    for n_tokens in (1, 12, 30, 49, 54, 1000, None):
        plans = [plan_token_budget(counts, n_tokens, World(r, 3), 2) for r in range(3)]
        used = plans[0][3]
        total = sum(counts[:used])
        budgets = [b if b is not None else sum(counts[o:o + n]) for o, n, b, _ in plans]
        assert sum(budgets) == (total if n_tokens is None else min(n_tokens, sum(counts)))
        # every rank but the last with tokens counts its whole share: the cut is where the one-process scan cuts
        for (o, n, b, _), budget in zip(plans, budgets):
            assert 0 <= budget <= sum(counts[o:o + n])


def test_token_counts_match_what_the_statistics_count(embedded):
    docs = wiki_documents(6)
    counts = token_counts(embedded, docs, max_len=32, batch_size=4)
    direct = [min(len(embedded.to_tokens(d.text)[0]), 32) - 1 for d in docs]
    assert counts == direct


# ------------------------------------------------------------------------------------------------- 2 gloo ranks
def test_two_rank_second_moments_equal_one_process(embedded, tmp_path):
    out = tmp_path / "c.safetensors"
    # 700 tokens: the budget ends inside a document that falls to rank 1 (a cut mid-document on the last rank)
    info = _launch("stats", "--layer", "2", "--n-tokens", "700", "--batch-size", "4", "--max-len", "48",
                   "--out", str(out), tmp_path=tmp_path)
    assert info["world_size"] == 2 and info["count"] == 700
    merged = KeyStats.load(out)
    with one_thread():
        one = mlp_key_second_moment(embedded, 2, n_tokens=700, batch_size=4, max_len=48, cache=False,
                                    progress=False)
    assert merged.count == one.count == 700
    assert len(merged.meta["shards"]) == 2 and all(n > 0 for _, n in merged.meta["shards"])
    torch.testing.assert_close(merged.moment_sum, one.moment_sum, rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(merged.sum, one.sum, rtol=1e-12, atol=1e-9)
    # the file is keyed like the one-process cache: its metadata names the whole-corpus request
    assert (merged.meta["n_tokens"], merged.meta["offset"], merged.meta["n_docs"]) == (700, 0, None)


def test_two_rank_neuron_topk_equals_one_process_exactly(embedded, tmp_path):
    out = tmp_path / "topk.safetensors"
    info = _launch("neurons", "--layer", "1", "--n-docs", "20", "--k", "4", "--batch-size", "4", "--max-len", "32",
                   "--out", str(out), tmp_path=tmp_path)
    assert info["docs"] == 20
    merged = TopK.load(out)
    with one_thread():
        one = neurons(embedded, 1).scan_state(wiki_documents(20), k=4, batch_size=4, max_len=32, progress=False)
    assert merged.equal(one.to("cpu"))


def test_two_rank_head_statistics_equal_one_process(embedded, tmp_path):
    out = tmp_path / "heads.safetensors"
    _launch("heads", "--n-docs", "12", "--batch-size", "4", "--max-len", "32", "--out", str(out), tmp_path=tmp_path)
    merged = HeadStats.load(out)
    with one_thread():
        one = head_scan(embedded, wiki_documents(12), batch_size=4, max_len=32)
    assert (merged.count, merged.docs) == (one.count, 12)
    torch.testing.assert_close(merged.sums, one.sums, rtol=1e-12, atol=1e-9)


# ------------------------------------------------------------------------------------------------- accumulators
def test_head_scan_of_one_text_equals_attention_stats(tiny_llama):
    from interp.analyses.attention import attention

    text = "The cat sat on the mat. The cat sat."
    a = attention(tiny_llama, text).stats()
    h = head_scan(tiny_llama, [text]).to_frame()
    assert (a.index == h.index).all()
    torch.testing.assert_close(torch.tensor(h.drop(columns="kv_group").values),
                               torch.tensor(a.drop(columns="kv_group").values), rtol=1e-5, atol=1e-5)


def test_head_scan_shards_merge_to_the_whole(tiny_llama, tmp_path):
    docs = ["hello world, this is text", "a b", "The cat sat on the mat.", "more text here to read", "x y z w"]
    whole = head_scan(tiny_llama, docs, batch_size=2)
    parts = head_scan(tiny_llama, docs[:2], batch_size=2).merge(head_scan(tiny_llama, docs[2:], batch_size=2))
    assert (parts.count, parts.docs) == (whole.count, whole.docs)
    torch.testing.assert_close(parts.sums, whole.sums, rtol=1e-12, atol=1e-12)
    whole.save(tmp_path / "h.safetensors")
    again = HeadStats.load(tmp_path / "h.safetensors")
    assert torch.equal(again.sums, whole.sums) and again.count == whole.count
    with pytest.raises(ValueError, match="layers"):
        whole.merge(head_scan(tiny_llama, docs, layers=[0]))


def test_cli_stats_in_process_matches_the_library(embedded, tmp_path, capsys, monkeypatch):
    from interp import cli

    monkeypatch.setattr("interp.cli.dist.load_model", lambda args: embedded)
    out = tmp_path / "c.safetensors"
    assert cli.main(["stats", "--layer", "1", "--n-tokens", "300", "--out", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["count"] == 300 and info["tokens_per_rank"] == [300]
    one = mlp_key_second_moment(embedded, 1, n_tokens=300, cache=False, progress=False)
    assert torch.equal(KeyStats.load(out).moment_sum, one.moment_sum)
    assert cli.main(["stats", "--layer", "1", "--nproc", "0", "--json"]) == 2
    assert "--nproc 0" in json.loads(capsys.readouterr().out)["error"]


def test_cli_stats_on_two_ranks_hands_the_report_back(embedded, tmp_path, capsys, monkeypatch):
    """``interp stats --nproc 2`` runs the ranks through ``launch_local`` (no second CLI process whose stdout is
    parsed): rank 0 writes its report to a file, and stdout carries exactly the one JSON document."""
    from interp import cli

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "c2.safetensors"
    assert cli.main(["stats", "--layer", "1", "--n-tokens", "300", "--nproc", "2", "--out", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["world_size"] == 2 and info["count"] == 300 and sum(info["tokens_per_rank"]) == 300
    one = mlp_key_second_moment(embedded, 1, n_tokens=300, cache=False, progress=False)
    torch.testing.assert_close(KeyStats.load(out).moment_sum, one.moment_sum, rtol=1e-12, atol=1e-9)
