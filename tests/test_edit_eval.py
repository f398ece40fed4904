"""Evaluation of edits: each metric against an independent computation, FT-L, evaluate() end to end, CLI."""

import json
import math
import types

import pytest
import torch

import interp
from interp.editing import evaluate as ev
from interp import rome
from interp.cli.edit import cli_eval_edits
from interp.core import generation
from interp.analyses.stats import mlp_key_second_moment

LAYER = 4


def digest(model) -> str:
    return model.weights_digest()


def full_logprobs(model, tokens: list[int]) -> torch.Tensor:
    return torch.log_softmax(model.run(torch.tensor([tokens]))[0].double(), -1)


# ----------------------------------------------------------------------------------------------- metrics
def test_target_nll_matches_full_logits(embedded):
    prompts = ["The Golden Gate Bridge is in", "Paris is the capital of", "I like"]
    targets = [" San Francisco", " France", " cheese and bread"]
    got = ev.target_nll(embedded, prompts, targets)
    for p, t, g in zip(prompts, targets, got):
        pt, tt = embedded.to_tokens(p)[0].tolist(), embedded.target_tokens(t)
        logp = full_logprobs(embedded, pt + tt)
        want = -sum(float(logp[len(pt) - 1 + i, tok]) for i, tok in enumerate(tt)) / len(tt)
        assert abs(float(g) - want) < 1e-4


def test_fact_scores_follow_the_paper_definitions():
    f64 = dict(dtype=torch.float64)
    probs = {"rewrite": torch.tensor([[0.6, 0.2]], **f64),
             "paraphrase": torch.tensor([[0.5, 0.1], [0.1, 0.3]], **f64),
             "neighborhood": torch.tensor([[0.1, 0.7], [0.4, 0.2], [0.0, 0.5], [0.2, 0.3], [0.3, 0.1]], **f64)}
    s = ev.fact_scores(probs)
    assert s["efficacy_score"] == 1.0 and abs(s["efficacy_magnitude"] - 0.4) < 1e-9
    assert s["paraphrase_score"] == 0.5 and abs(s["paraphrase_magnitude"] - (0.4 - 0.2) / 2) < 1e-9
    assert s["neighborhood_score"] == 3 / 5
    assert abs(s["neighborhood_magnitude"] - (0.6 - 0.2 + 0.5 + 0.1 - 0.2) / 5) < 1e-9


def test_ngram_entropy_hand_example():
    # words a b a b: bigrams ab, ba, ab -> H2 = H(2/3, 1/3); trigrams aba, bab -> H3 = 1 bit
    h2 = -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3))
    assert abs(ev.ngram_entropy("a b a b") - (2 / 3 * h2 + 4 / 3 * 1.0) / 2) < 1e-12
    assert ev.ngram_entropy("x x x x x x") == 0.0
    assert ev.ngram_entropy("the cat sat on a mat today") > ev.ngram_entropy("the cat the cat the cat the")


def test_text_nll_matches_full_logits(embedded):
    texts = ["The river flows into the sea.", "Mozart was a composer."]
    got = ev.text_nll(embedded, texts, max_len=64)
    total, count = 0.0, 0
    for t in texts:
        toks = embedded.to_tokens(t)[0].tolist()
        logp = full_logprobs(embedded, toks)
        total += -sum(float(logp[i, toks[i + 1]]) for i in range(len(toks) - 1))
        count += len(toks) - 1
    assert abs(got - total / count) < 1e-5


def test_sampling_with_and_without_the_cache_agree(embedded):
    prompts = ["The Eiffel Tower is", "My favourite food is pasta because"]
    rows = [embedded.to_tokens(p)[0].tolist() for p in prompts]
    cached = rome.sample_text(embedded, prompts, 6, greedy=True)
    plain = generation.sample_ids(embedded, rows, 6, lambda logits: logits.argmax(-1), fast=False)
    assert cached == [embedded.tokenizer.decode(r) for r in plain]
    a = rome.sample_text(embedded, prompts, 6, seed=5)
    assert a == rome.sample_text(embedded, prompts, 6, seed=5) and a != rome.sample_text(embedded, prompts, 6, seed=6)


# ----------------------------------------------------------------------------------------------- FT-L
def test_ft_edit_is_bounded_lowers_the_loss_and_reverts(tiny_llama):
    d0 = digest(tiny_llama)
    before = tiny_llama.mlp_out_matrix(0).detach().clone()
    e = ev.ft_edit(tiny_llama, "{} is in", "Tower", " Rome", 0, steps=6, lr=1e-2, norm_constraint=2e-3)
    try:
        diff = tiny_llama.mlp_out_matrix(0).detach() - before
        assert float(diff.abs().max()) <= 2e-3 * (1 + 1e-5) and float(diff.abs().max()) > 0
        after = float(ev.target_nll(tiny_llama, ["Tower is in"], [" Rome"])[0])
        assert after < e.losses[0]
    finally:
        e.revert()
    assert digest(tiny_llama) == d0

    def stop(event):
        if event["stage"] == "update":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ev.ft_edit(tiny_llama, "{} is in", "Tower", " Rome", 0, steps=2, progress=stop)
    assert digest(tiny_llama) == d0
    with pytest.raises(ValueError, match="unknown FT-L"):
        ev.ft_edit(tiny_llama, "{} is in", "Tower", " Rome", 0, lr_typo=1)


# ----------------------------------------------------------------------------------------------- evaluate
@pytest.fixture(scope="module")
def dev_eval(embedded):
    stats = mlp_key_second_moment(embedded, LAYER, n_tokens=4000, cache=False, progress=False)
    records = rome.load_records(split="dev")[:2]
    d0 = digest(embedded)
    res = ev.evaluate(embedded, records, "rome", layer=LAYER, stats=stats, hparams={"mom2_ridge": 1e-3},
                      baseline="ft", gen_tokens=6, drift_docs=2, progress=False)
    return res, records, d0


def test_evaluate_leaves_the_model_unchanged(embedded, dev_eval):
    res, _, d0 = dev_eval
    assert digest(embedded) == d0


def test_evaluate_before_scores_match_an_independent_computation(embedded, dev_eval):
    res, records, _ = dev_eval
    f = res.to_frame()
    for r in records:
        nll = {}
        for t in (r.target_new, r.target_true):
            pt, tt = embedded.to_tokens(r.text)[0].tolist(), embedded.target_tokens(t)
            logp = full_logprobs(embedded, pt + tt)
            nll[t] = -sum(float(logp[len(pt) - 1 + i, k]) for i, k in enumerate(tt)) / len(tt)
        assert f.loc[r.case_id, "efficacy_score_pre"] == float(nll[r.target_new] < nll[r.target_true])
        assert abs(f.loc[r.case_id, "efficacy_magnitude_pre"] -
                   (math.exp(-nll[r.target_new]) - math.exp(-nll[r.target_true]))) < 1e-5


def test_evaluate_rome_edits_and_beats_its_baseline_on_these_records(dev_eval):
    res, records, _ = dev_eval
    f = res.to_frame()
    assert len(f) == len(records) and f["error"].isna().all()
    assert (f["efficacy_score_post"] == 1.0).all() and (f["efficacy_magnitude_post"] > f["efficacy_magnitude_pre"]).all()
    # the new answer can only show up in the logit lens after the edited layer
    assert (f["lens_new_row_post"].dropna() >= LAYER + 1).all()
    assert res.baseline is not None and res.baseline.editor == "ft" and len(res.baseline.to_frame()) == len(f)


def test_evaluate_aggregates_and_json(dev_eval):
    res, _, _ = dev_eval
    agg = res.aggregates()
    f = res.to_frame()
    m = agg.loc["paraphrase_score_post"]
    assert abs(m["mean"] - 100 * f["paraphrase_score_post"].mean()) < 1e-9 and m["ci_low"] <= m["mean"] <= m["ci_high"]
    s = [100 * f[f"{n}_score_post"].mean() for n in ("efficacy", "paraphrase", "neighborhood")]
    hm = 0.0 if min(s) == 0 else 3 / sum(1 / x for x in s)
    assert abs(agg.loc["harmonic_mean_post", "mean"] - hm) < 1e-9
    drop = 100 * (f["gen_entropy_pre"].mean() - f["gen_entropy_post"].mean()) / f["gen_entropy_pre"].mean()
    assert abs(agg.loc["generation_entropy_drop", "mean"] - drop) < 1e-9
    out = res.to_json()
    for key in ("efficacy_score", "paraphrase_score", "neighborhood_score", "generation_entropy_drop",
                "loss_drift", "n_records"):
        assert key in out and key in out["baseline"]
    assert out["n_records"] == 2 and 0 <= out["efficacy_score"] <= 100
    json.dumps(out, default=float)
    assert res.plot().axes and res.plot_lens().axes
    assert "rome" in res.summary() and "efficacy" in res._repr_html_()


def test_evaluate_bad_input(embedded):
    with pytest.raises(ValueError, match="no records"):
        ev.evaluate(embedded, [], "rome", layer=LAYER)
    with pytest.raises(ValueError, match="editor"):
        ev.evaluate(embedded, rome.load_records(split="dev")[:1], "memit", layer=LAYER, stats="identity")
    with pytest.raises(ValueError, match="missing keys"):
        ev.evaluate(embedded, [{"prompt": "{} is"}], "rome", layer=LAYER)


# ----------------------------------------------------------------------------------------------- CLI, completions
def _tiny_records(path):
    recs = [dict(case_id=i, relation="r", split="test", prompt="{} is in", subject=s, target_true=" Oslo",
                 target_new=" Rome", paraphrase_prompts=[f"{s} lies in", f"{s} sits in"],
                 neighborhood_prompts=[f"Hall {j} is in" for j in range(5)],
                 generation_prompts=[f"{s} is", f"{s} was"]) for i, s in enumerate(["Tower", "Bridge"])]
    path.write_text("\n".join(json.dumps(r) for r in recs))


def test_cli_eval_edits_handler(tiny_llama, tmp_path):
    _tiny_records(tmp_path / "r.jsonl")
    args = types.SimpleNamespace(split="test", n=1, editor="rome", baseline="ft", records=str(tmp_path / "r.jsonl"),
                                 layer=0, seed=0, gen_tokens=4, no_generation=False, no_drift=False,
                                 out=str(tmp_path / "p.png"), csv=str(tmp_path / "r.csv"), mom2_tokens=2000,
                                 json=True)
    d0 = digest(tiny_llama)
    out = cli_eval_edits(args, model=tiny_llama)
    assert digest(tiny_llama) == d0
    assert out["n_records"] == 1 and out["editor"] == "rome" and out["baseline"]["editor"] == "ft"
    for key in ("efficacy_score", "paraphrase_score", "neighborhood_score", "generation_entropy_drop", "loss_drift"):
        assert isinstance(out[key], float)
    assert (tmp_path / "p.png").stat().st_size > 0 and len((tmp_path / "r.csv").read_text().splitlines()) == 3
    args.split = "dev"
    with pytest.raises(ValueError, match="no 'dev' records"):
        cli_eval_edits(args, model=tiny_llama)


def test_compare_completions_restores_the_state(tiny_llama):
    stats = mlp_key_second_moment(tiny_llama, 0, n_tokens=2000, cache=False, progress=False)
    d0 = digest(tiny_llama)
    e = rome.edit(tiny_llama, "{} is in", "Tower", " Rome", 0, stats=stats, v_steps=3)
    edited = digest(tiny_llama)
    table = ev.compare_completions(tiny_llama, e, ["Tower is in", "Bridge is"], n_tokens=3)
    assert digest(tiny_llama) == edited and e.applied
    e.revert()
    assert digest(tiny_llama) == d0
    toks = tiny_llama.to_tokens("Bridge is")
    for _ in range(3):
        toks = torch.cat([toks, tiny_llama.run(toks)[:, -1].argmax(-1, keepdim=True)], 1)
    assert table.loc[1, "before"] == tiny_llama.tokenizer.decode(toks[0, -3:].tolist())


# ----------------------------------------------------------------------------------------------- FT-L as a weight edit
def test_model_edited_with_a_reverted_ft_edit_is_bit_exact(tiny_llama):
    d0 = digest(tiny_llama)
    e = ev.ft_edit(tiny_llama, "{} is in", "Tower", " Rome", 0, steps=4, lr=1e-2, norm_constraint=2e-3)
    edited = digest(tiny_llama)
    assert edited != d0
    e.revert()
    assert digest(tiny_llama) == d0 and not e.applied
    with tiny_llama.edited(e):
        assert digest(tiny_llama) == edited and e.applied_model is tiny_llama
    assert digest(tiny_llama) == d0 and not e.applied
    with pytest.raises(RuntimeError):
        with tiny_llama.edited(e):
            raise RuntimeError("boom")
    assert digest(tiny_llama) == d0
    # and on a fresh load of the same weights (the fingerprint matches)
    fresh = interp.load_tiny("llama", seed=0)
    with fresh.edited(e):
        assert digest(fresh) == edited
    stranger = interp.load_tiny("llama", seed=1)
    with pytest.raises(ValueError, match="fingerprint"):
        e.apply(stranger)


def test_compare_completions_and_lens_with_an_ft_edit(tiny_llama):
    d0 = digest(tiny_llama)
    e = ev.ft_edit(tiny_llama, "{} is in", "Tower", " Rome", 0, steps=4, lr=5e-2, norm_constraint=5e-2)
    edited = digest(tiny_llama)
    e.revert()
    table = ev.compare_completions(tiny_llama, e, ["Tower is in", "Bridge is"], n_tokens=3)
    assert digest(tiny_llama) == d0 and not e.applied  # ends as it started: reverted
    def greedy(text, n=3):
        toks = tiny_llama.to_tokens(text)
        for _ in range(n):
            toks = torch.cat([toks, tiny_llama.run(toks)[:, -1].argmax(-1, keepdim=True)], 1)
        return tiny_llama.tokenizer.decode(toks[0, -n:].tolist())

    with tiny_llama.edited(e):
        assert table.loc[0, "after"] == greedy("Tower is in")
    assert table.loc[0, "before"] == greedy("Tower is in")
    e.apply(tiny_llama)
    ev.compare_completions(tiny_llama, e, ["Tower is in"], n_tokens=2)
    assert digest(tiny_llama) == edited and e.applied  # ends as it started: applied
    lens = ev.lens_before_after(tiny_llama, e, target_true=" Oslo")
    assert digest(tiny_llama) == edited and len(lens.to_frame()) == tiny_llama.n_layers + 1
    assert lens.plot().axes and "after the edit" in lens.summary()
    e.revert()
    assert digest(tiny_llama) == d0


@pytest.mark.parametrize("argv, match", [
    (["edit", "--tokens", "-3"], "--tokens"), (["edit", "--mom2-tokens", "0"], "--mom2-tokens"),
    (["edit", "--hparam", "bogus=1"], "unknown ROME hyperparameter"),
    (["eval-edits", "--n", "0"], "--n"), (["eval-edits", "--gen-tokens", "0"], "--gen-tokens"),
    (["eval-edits", "--editor", "ft", "--hparam", "kl_factor=1"], "unknown FT-L hyperparameter"),
])
def test_edit_commands_check_flags_before_loading_the_model(argv, match, monkeypatch):
    from interp.cli import build_parser
    import interp.cli.edit as cli_edit_module

    def no_load(args):
        raise AssertionError("the model was loaded before the flags were checked")

    monkeypatch.setattr(cli_edit_module, "load_model", no_load)
    args = build_parser().parse_args(argv)
    with pytest.raises(ValueError, match=match):
        args.func(args)
