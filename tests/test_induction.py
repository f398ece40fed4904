"""Induction heads: known-answer scores, the embedded model, causal check, ICL, training, CLI."""

import json
from collections import Counter

import pytest
import torch
from matplotlib.figure import Figure

from interp.analyses.induction import causal, handmade_induction_model
from interp.analyses.induction import heads as ind
from interp.analyses.induction import icl as icl_mod
from interp.analyses.induction import train as train_mod
from interp.core.model import Model
from interp.core.results import Result


@pytest.fixture(scope="module")
def handmade():
    return Model.from_module(handmade_induction_model())


@pytest.fixture(scope="module")
def embedded_scan(embedded):
    # Small batch: the same code as the CLI default (batch 16), a quarter of the cost.
    return ind.induction_heads(embedded, seq_len=50, batch=4, seed=0)


def check_result_object(result):
    frame = result.to_frame()
    assert len(frame) > 0
    assert isinstance(result.plot(), Figure)
    # A result with an interactive view of its own shows it as the cell's value; others show their table.
    own_view = type(result).view is not Result.view
    assert ("<iframe" if own_view else "<table") in result._repr_html_()
    assert result.summary() in repr(result)
    doc = result.to_json()
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc and doc["summary"] == result.summary()
    with pytest.raises(TypeError):
        result.plot("out.png")  # out is keyword-only on every result


# ----------------------------------------------------------------------------- known answer

def test_handmade_model_scores_one_on_its_heads_and_zero_elsewhere(handmade):
    scan = ind.induction_heads(handmade, seq_len=15, batch=8, seed=0)
    s = scan.scores
    assert s["induction_score"][1, 0] > 0.99
    assert s["prefix_matching_score"][1, 0] > 0.99
    assert s["copying_score"][1, 0] > 0.99
    assert s["previous_token_score"][0, 0] > 0.99
    others = torch.ones(2, 2, dtype=torch.bool)
    others[1, 0] = False
    assert s["induction_score"][others].max() < 0.01
    assert s["prefix_matching_score"][others].max() < 0.01
    # BOS-resting heads: only the query at position 1 (whose previous token is BOS) scores
    assert s["previous_token_score"][torch.tensor([[False, True], [True, True]])].max() < 0.05
    assert s["duplicate_token_score"].max() < 0.01
    assert scan.top_heads(1) == [(1, 0)]
    # it predicts the repeated half almost perfectly, the random first half not at all
    assert scan.loss_repeated_half < 0.2
    assert scan.loss_first_half > 3.0
    check_result_object(scan)


def test_transformer_lens_mul_score_caps_near_one_half_on_a_perfect_head(handmade):
    # The documented reason the scores differ: TransformerLens divides by the whole attention mass.
    from transformer_lens.head_detector import (
        compute_head_attention_similarity_score,
        get_induction_head_detection_pattern,
    )

    seq_len = 15
    toks = ind.repeated_tokens(handmade, seq_len, 1, seed=0)
    pattern = ind.attention_patterns(handmade, toks)[1][0, 0]
    detection = get_induction_head_detection_pattern(toks)
    tl = compute_head_attention_similarity_score(pattern, detection, exclude_bos=False,
                                                 exclude_current_token=False, error_measure="mul")
    assert tl == pytest.approx(seq_len / (2 * seq_len + 1), abs=0.01)
    assert float(ind.induction_score([pattern[None, None]], seq_len)) > 0.99


def test_random_tokens_are_seeded_distinct_and_ordinary(handmade, embedded):
    a = ind.repeated_tokens(embedded, 50, 4, seed=3)
    assert a.shape == (4, 101) and torch.equal(a, ind.repeated_tokens(embedded, 50, 4, seed=3))
    assert not torch.equal(a, ind.repeated_tokens(embedded, 50, 4, seed=4))
    assert torch.all(a[:, 0] == embedded.bos_token_id)
    assert torch.equal(a[:, 1:51], a[:, 51:])
    specials = set(embedded.tokenizer.all_special_ids) | set(range(17))
    assert not specials & set(a[:, 1:].flatten().tolist())
    assert all(len(set(row.tolist())) == 50 for row in a[:, 1:51])
    assert "17..49151" in ind.token_range_description(embedded)
    # the toy model: its whole vocabulary except BOS
    assert ind.token_range_description(handmade) == "ids 1..15 (15 tokens)"


# ----------------------------------------------------------------------------- bad input

def test_bad_input_raises_value_error_naming_the_value_and_range(handmade, embedded):
    with pytest.raises(ValueError, match=r"seq_len=1 out of range: allowed 2\.\.15"):
        ind.induction_heads(handmade, seq_len=1)
    with pytest.raises(ValueError, match=r"seq_len=16 out of range: allowed 2\.\.15"):
        ind.repeated_tokens(handmade, 16, 2)
    with pytest.raises(ValueError, match=r"seq_len=5000 out of range: allowed 2\.\.4095"):
        ind.induction_heads(embedded, seq_len=5000)
    with pytest.raises(ValueError, match=r"batch=0 out of range"):
        ind.repeated_tokens(handmade, 5, 0)
    with pytest.raises(ValueError, match=r"layer 2 out of range.*0\.\.1"):
        causal.ablation_check(handmade, heads=[(2, 0)], seq_len=5, batch=2)
    with pytest.raises(ValueError, match=r"head 7 out of range.*0\.\.1"):
        causal.ablation_check(handmade, heads=[(0, 7)], seq_len=5, batch=2)
    with pytest.raises(ValueError, match=r"k=4 out of range: allowed 1\.\.3"):
        causal.ablation_check(handmade, k=4, seq_len=5, batch=2)
    with pytest.raises(ValueError, match="mode='half'"):
        causal.ablation_check(handmade, heads=[(0, 0)], mode="half")
    with pytest.raises(ValueError, match=r"early=50, late=20"):
        icl_mod.icl_score(embedded, early=50, late=20)
    with pytest.raises(ValueError, match=r"window=4 out of range"):
        icl_mod.icl_score(embedded, window=4)
    with pytest.raises(ValueError, match=r"context='book' not known; allowed: 'document', 'concat'"):
        icl_mod.icl_score(embedded, context="book")
    with pytest.raises(ValueError, match=r"early=50, late=8190: allowed .* <= 8189"):
        icl_mod.icl_score(embedded, early=50, late=8190, context="concat")
    with pytest.raises(ValueError, match=r"n_docs=0; allowed"):
        icl_mod.icl_score(embedded, n_docs=0, context="concat")
    with pytest.raises(ValueError, match="has no tokenizer"):
        icl_mod.icl_score(handmade, early=3, late=8)
    with pytest.raises(ValueError, match=r"layer 1 has 1 heads outside the excluded set, 2 needed"):
        causal.random_heads(handmade, 2, [(1, 0)], 0, like=[(1, 0), (1, 1)])
    with pytest.raises(ValueError, match="match_layers=1"):
        causal.ablation_check(handmade, heads=[(1, 0)], match_layers=1)
    scan = ind.induction_heads(handmade, seq_len=5, batch=2, copying=False)
    with pytest.raises(ValueError, match="score 'nope' not known"):
        scan.top(3, by="nope")
    with pytest.raises(ValueError, match=r"segment lengths seg_min=10, seg_max=40: allowed .* <= 31"):
        train_mod.TrainConfig(seg_max=40)
    with pytest.raises(ValueError, match=r"layers=3 out of range: allowed 1 or 2"):
        train_mod.reproduce(layers=3)


# ----------------------------------------------------------------------------- embedded model

def test_embedded_model_has_strong_induction_heads(embedded_scan):
    top = embedded_scan.top(5)
    assert top["induction_score"].iloc[0] > 0.7
    assert (top["prefix_matching_score"] > 0.5).all()
    # the repeated half is far easier than the random first half
    assert embedded_scan.loss_repeated_half < embedded_scan.loss_first_half - 5
    assert embedded_scan.scores["copying_score"].shape == (30, 9)
    check_result_object(embedded_scan)


def test_ablating_top_heads_beats_random_heads_on_embedded(embedded, embedded_scan):
    check = causal.ablation_check(embedded, k=5, n_random=3, seq_len=50, batch=4, seed=0, scan=embedded_scan)
    assert check.top_heads == embedded_scan.top_heads(5) and check.match_layers
    assert not set(check.top_heads) & {h for hs in check.random_heads for h in hs}
    top_layers = Counter(layer for layer, _ in check.top_heads)
    assert all(Counter(layer for layer, _ in hs) == top_layers for hs in check.random_heads)
    assert check.top_rise > 1.0
    assert check.top_rise > check.random_rise_max and check.n_random_at_least_top == 0
    assert check.empirical_p == pytest.approx(1 / 4)
    assert check.sds_above > 3
    assert embedded.attached_hook_count() == 0
    check_result_object(check)


def test_icl_score_on_wikipedia_summaries(embedded):
    icl = icl_mod.icl_score(embedded, early=10, late=100, n_docs=8)
    assert icl.n_docs == 8 and icl.loss_by_pos.shape == (102,)  # up to the end of the late window
    assert icl.context == "document" and icl.row_losses.shape == (8, 102)
    assert icl.score < 0  # later tokens are predicted better
    lo, hi = icl.ci
    assert lo <= icl.score <= hi and icl.row_scores.mean() == pytest.approx(icl.score, abs=1e-5)
    check_result_object(icl)


# ----------------------------------------------------------------------------- layer matching, ICL options

def test_random_heads_are_layer_matched_seeded_and_exclude_the_top_set(tiny_llama):
    top = [(0, 1), (1, 0), (1, 3)]
    check = causal.ablation_check(tiny_llama, heads=top, n_random=10, seq_len=8, batch=2, seed=0)
    assert len(check.random_heads) == 10
    for hs in check.random_heads:
        assert Counter(layer for layer, _ in hs) == Counter({0: 1, 1: 2})
        assert not set(hs) & set(top) and len(set(hs)) == 3
    assert len({tuple(hs) for hs in check.random_heads}) > 1  # the draws differ
    again = causal.ablation_check(tiny_llama, heads=top, n_random=10, seq_len=8, batch=2, seed=0)
    assert again.random_heads == check.random_heads and again.random_losses == check.random_losses
    # the uniform draw (match_layers=False) breaks the per-layer counts in some draw: the default matters
    loose = causal.ablation_check(tiny_llama, heads=top, n_random=10, seq_len=8, batch=2, seed=0,
                                  match_layers=False)
    assert any(Counter(layer for layer, _ in hs) != Counter({0: 1, 1: 2}) for hs in loose.random_heads)
    # the known answer: the handmade model's layer 1 has one head besides the induction head
    assert causal.random_heads(Model.from_module(handmade_induction_model()), 1, [(1, 0)], 5,
                               like=[(1, 0)]) == [(1, 1)]
    assert check.n_random_at_least_top == sum(r >= check.top_rise for r in check.random_rises)
    check_result_object(check)


def test_concatenated_contexts_reach_late_positions_and_are_seeded(tiny_llama):
    end = 62  # late 60 + window 5 // 2
    rows = icl_mod.concat_rows(tiny_llama, end, 3, seed=0)
    sep = tiny_llama.encode(icl_mod.SEPARATOR, prepend_bos=False)
    first = tiny_llama.encode(icl_mod.wiki_documents(seed=0)[0].text, prepend_bos=False)
    assert [len(r) for r in rows] == [end + 1] * 3 and all(r[0] == tiny_llama.bos_token_id for r in rows)
    n = min(len(first), end)
    assert rows[0][1:1 + n] == first[:n]  # the first context starts at the first shuffled document
    if len(first) < end:
        assert rows[0][1 + len(first):1 + len(first) + len(sep)] == sep
    icl = icl_mod.icl_score(tiny_llama, early=10, late=60, n_docs=3, context="concat", seed=0)
    assert icl.row_losses.shape == (3, end) and icl.loss_by_pos.shape == (end,) and icl.n_docs == 3
    assert torch.equal(icl.row_losses, icl_mod.icl_score(tiny_llama, early=10, late=60, n_docs=3,
                                                          context="concat", seed=0).row_losses)
    other = icl_mod.icl_score(tiny_llama, early=10, late=60, n_docs=3, context="concat", seed=1)
    assert not torch.equal(icl.row_losses, other.row_losses)
    assert "62-token contexts" not in icl.summary() and "63-token contexts" in icl.summary()
    # the old behaviour stays the default
    assert icl_mod.icl_score(tiny_llama, early=5, late=20, n_docs=2).context == "document"
    check_result_object(icl)


def test_icl_with_heads_ablated_changes_the_losses_and_pairs_rows(tiny_llama):
    kw = {"early": 5, "late": 30, "n_docs": 4, "context": "concat", "seed": 0, "batch_size": 2}
    base = icl_mod.icl_score(tiny_llama, **kw)
    zeroed = icl_mod.icl_score(tiny_llama, heads=[(0, 0), (1, 2)], mode="zero", **kw)
    assert zeroed.heads == [(0, 0), (1, 2)] and "zero-ablating L0H0 L1H2" in zeroed.summary()
    assert not torch.allclose(base.row_losses, zeroed.row_losses)
    d, lo, hi = zeroed.change_from(base)
    assert d == pytest.approx(zeroed.score - base.score, abs=1e-5) and lo <= d <= hi
    with pytest.raises(ValueError, match="baseline measured on other rows"):
        zeroed.change_from(icl_mod.icl_score(tiny_llama, **{**kw, "seed": 1}))
    result = icl_mod.icl_ablation(tiny_llama, [(1, 0)], n_random=2, **kw)
    assert torch.equal(result.baseline.row_losses, base.row_losses)
    assert all(r.heads != [(1, 0)] and all(layer == 1 for layer, _ in r.heads) for r in result.random)
    frame = result.to_frame()
    assert list(frame.index) == ["none", "top-1", "layer-matched random 0", "layer-matched random 1"]
    assert frame.loc["top-1", "change"] == pytest.approx(result.top.score - base.score, abs=1e-5)
    check_result_object(result)


# ----------------------------------------------------------------------------- training

def test_repeat_batch_marks_exactly_the_predictable_targets():
    cfg = train_mod.TrainConfig()
    toks, mask = train_mod.repeat_batch(cfg, 64, torch.Generator().manual_seed(0))
    assert toks.shape == (64, 64) and mask.shape == (64, 63) and torch.all(toks[:, 0] == 0)
    lengths = mask.sum(1) + 1
    assert lengths.min() >= cfg.seg_min and lengths.max() <= cfg.seg_max
    for row, m in zip(toks, mask):
        targets = m.nonzero()[:, 0] + 1  # positions of the predictable tokens
        d, length = int(targets[0]) - 1, len(targets) + 1  # start and length of the copy
        # the copy equals an earlier segment of the same length ending before it starts
        starts = [s for s in range(1, d - length + 1) if torch.equal(row[s:s + length], row[d:d + length])]
        assert starts
    again, _ = train_mod.repeat_batch(cfg, 64, torch.Generator().manual_seed(0))
    assert torch.equal(toks, again)


def test_short_training_run_shows_phase_change_and_control_does_not(tmp_path):
    # two workers: the run and its control side by side (their numbers equal one process's: the test below)
    result = train_mod.reproduce(tmp_path, layers=2, seeds=1, steps=1400, log_every=100, eval_batch=128, workers=2)
    main, control = result.main.summary_dict(), result.control.summary_dict()
    assert main["final_induction_score"] > 0.4
    assert main["final_previous_token_score"] > 0.4
    assert main["phase_change"] and 600 <= main["transition_step"] <= 1350
    assert main["final_repeat_loss"] < 2.5
    assert control["max_induction_score"] < 0.1 and not control["phase_change"]
    k = main["k_composition"]
    assert k["ablate_prev_token_head"]["induction_score"] < 0.5 * k["induction_score"]
    for name in ("toy_2L_seed0.safetensors", "toy_2L_seed0_log.csv", "toy_1L_control.safetensors",
                 "toy_1L_control_log.csv", "phase_change.png", "summary.json"):
        assert (tmp_path / name).exists()
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["transition_step"] == main["transition_step"]
    check_result_object(result)
    check_result_object(result.main)


def test_runs_trained_in_worker_processes_equal_runs_trained_here():
    """workers=2: each run trains in a spawned process and comes back as the same weights, log and K-composition
    check, bit for bit, in the same order (seeds, then the control); the CPU time counts the workers'."""
    kw = dict(layers=2, seeds=2, steps=40, log_every=20, eval_batch=32)
    here, away = train_mod.reproduce(**kw), train_mod.reproduce(workers=2, **kw)
    pairs = list(zip([*here.runs, here.control], [*away.runs, away.control]))
    assert [(b.cfg.n_layers, b.cfg.seed) for _, b in pairs] == [(2, 0), (2, 1), (1, 0)]
    for a, b in pairs:
        assert a.cfg == b.cfg and a.k_composition == b.k_composition
        assert a.to_frame().drop(columns="seconds").equals(b.to_frame().drop(columns="seconds"))
        sa, sb = a.model.state_dict(), b.model.state_dict()
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert away.cpu_seconds >= sum(r.cpu_seconds for _, r in pairs)
    with pytest.raises(ValueError, match="workers"):
        train_mod.reproduce(workers=0)


def test_training_is_deterministic():
    cfg = train_mod.TrainConfig(steps=60, log_every=30, eval_batch=32)
    a, b = train_mod.train(cfg), train_mod.train(cfg)
    assert a.to_frame().drop(columns="seconds").equals(b.to_frame().drop(columns="seconds"))  # NaN-aware
    assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))


def test_transition_step_is_the_steepest_drop_after_the_start():
    import numpy as np

    steps = np.arange(0, 2001, 100)
    loss = np.where(steps < 1000, 4.15, 1.5)
    loss[0] = 4.6  # the drop from the random init is ignored
    assert train_mod.transition_step(steps, loss) in (950, 1050)


# ----------------------------------------------------------------------------- CLI

def test_cli_induction_json(embedded, monkeypatch, capsys):
    from interp import cli

    monkeypatch.setattr("interp.cli.induction.load_model", lambda args: embedded)
    rc = cli.main(["induction", "--json", "--top", "4", "--seq-len", "20", "--batch", "2", "--n-random", "2",
                   "--k", "3", "--icl-docs", "2"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    heads = out["heads"]
    assert len(heads) == 4
    assert {"layer", "head", "induction_score", "prefix_matching_score", "previous_token_score"} <= set(heads[0])
    assert [h["induction_score"] for h in heads] == sorted((h["induction_score"] for h in heads), reverse=True)
    assert {"top_k_rise", "random_k_rises", "ratio"} <= set(out["ablation"])
    assert out["icl"]["n_docs"] == 2


def test_cli_reproduce_json(tmp_path, capsys):
    from interp import cli

    rc = cli.main(["reproduce-induction", "--out", str(tmp_path), "--steps", "100", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("transition_step", "induction_score_before", "induction_score_after",
                "previous_token_score_after", "seconds"):
        assert key in out and key in out["control"]
    assert (tmp_path / "toy_2L_seed0.safetensors").exists()
    with pytest.raises(SystemExit):  # argparse: --layers takes 1 or 2
        cli.main(["reproduce-induction", "--out", str(tmp_path), "--layers", "3", "--json"])


@pytest.mark.parametrize("argv, word", [
    (["induction", "--top", "-3"], "--top=-3"), (["induction", "--seq-len", "1"], "--seq-len=1"),
    (["induction", "--n-random", "0"], "--n-random=0"), (["reproduce-induction", "--out", "x", "--seeds", "0"],
                                                         "--seeds=0"),
    (["reproduce-induction", "--out", "x", "--steps", "0"], "--steps=0"),
    (["reproduce-induction", "--out", "x", "--workers", "0"], "--workers=0")])
def test_cli_rejects_bad_flags_before_any_work(monkeypatch, capsys, argv, word):
    from interp import cli

    def fail(*args, **kwargs):
        raise AssertionError("work started before the arguments were checked")

    monkeypatch.setattr("interp.cli.induction.load_model", fail)
    monkeypatch.setattr("interp.cli.reproduce.reproduce", fail)
    assert cli.main([*argv, "--json"]) == 2
    assert word in json.loads(capsys.readouterr().out)["error"]


def test_training_progress_goes_to_stderr(capsys):
    cfg = train_mod.TrainConfig(steps=20, log_every=10, eval_batch=16)
    run = train_mod.train(cfg, progress=True, verbose=True)
    captured = capsys.readouterr()
    assert captured.out == "" and "repeat" in captured.err and len(run.log) == 3
    quiet = train_mod.train(cfg)
    assert quiet.to_frame().drop(columns="seconds").equals(run.to_frame().drop(columns="seconds"))
    assert capsys.readouterr().err == ""
