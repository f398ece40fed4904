"""Evaluation of edits: each metric against an independent computation, FT-L, evaluate() end to end, CLI."""

import json
import math
import types

import pytest
import torch

import interp
from interp.editing import compare as cmp
from interp.editing import drift
from interp.editing import ft
from interp.editing.eval import measure as em
from interp.editing.eval import report
from interp.editing.eval import run as er
from interp.editing.facts import as_fact
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
    got = em.target_nll(embedded, prompts, targets)
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
    s = em.fact_scores(probs)
    assert s["efficacy_score"] == 1.0 and abs(s["efficacy_magnitude"] - 0.4) < 1e-9
    assert s["paraphrase_score"] == 0.5 and abs(s["paraphrase_magnitude"] - (0.4 - 0.2) / 2) < 1e-9
    assert s["neighborhood_score"] == 3 / 5
    assert abs(s["neighborhood_magnitude"] - (0.6 - 0.2 + 0.5 + 0.1 - 0.2) / 5) < 1e-9


def test_ngram_entropy_hand_example():
    # words a b a b: bigrams ab, ba, ab -> H2 = H(2/3, 1/3); trigrams aba, bab -> H3 = 1 bit
    h2 = -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3))
    assert abs(em.ngram_entropy("a b a b") - (2 / 3 * h2 + 4 / 3 * 1.0) / 2) < 1e-12
    assert em.ngram_entropy("x x x x x x") == 0.0
    assert em.ngram_entropy("the cat sat on a mat today") > em.ngram_entropy("the cat the cat the cat the")


def test_text_nll_matches_full_logits(embedded):
    texts = ["The river flows into the sea.", "Mozart was a composer."]
    got = drift.text_nll(embedded, texts, max_len=64)
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
    cached = generation.sample_text(embedded, prompts, 6, greedy=True)
    plain = generation.sample_ids(embedded, rows, 6, lambda logits: logits.argmax(-1), fast=False)
    assert cached == [embedded.tokenizer.decode(r) for r in plain]
    a = generation.sample_text(embedded, prompts, 6, seed=5)
    assert a == generation.sample_text(embedded, prompts, 6, seed=5) and a != generation.sample_text(embedded, prompts, 6, seed=6)


# ----------------------------------------------------------------------------------------------- FT-L
def test_ft_edit_is_bounded_lowers_the_loss_and_reverts(tiny_llama):
    d0 = digest(tiny_llama)
    before = tiny_llama.mlp_out_matrix(0).detach().clone()
    e = ft.ft_edit(tiny_llama, "{} is in", "Tower", " Rome", 0, steps=6, lr=1e-2, norm_constraint=2e-3)
    try:
        diff = tiny_llama.mlp_out_matrix(0).detach() - before
        assert float(diff.abs().max()) <= 2e-3 * (1 + 1e-5) and float(diff.abs().max()) > 0
        after = float(em.target_nll(tiny_llama, ["Tower is in"], [" Rome"])[0])
        assert after < e.losses[0]
    finally:
        e.revert()
    assert digest(tiny_llama) == d0

    def stop(event):
        if event["stage"] == "update":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ft.ft_edit(tiny_llama, "{} is in", "Tower", " Rome", 0, steps=2, progress=stop)
    assert digest(tiny_llama) == d0
    with pytest.raises(ValueError, match="unknown FT-L"):
        ft.ft_edit(tiny_llama, "{} is in", "Tower", " Rome", 0, lr_typo=1)


@pytest.mark.parametrize("name, layer", [("tiny_llama", 0), ("embedded", LAYER)])
def test_ft_edits_made_together_are_each_edit_made_alone(request, name, layer):
    """Independent FT-L edits optimised in one batch (each its own D, Adam and stop) against ft_edit one at a
    time: the same number of steps, the same losses and updates up to float rounding; nothing is written. (A
    mistake — a row seeing another fact's D, a stop shared by all — moves the losses by far more: the first step
    alone lowers a loss by half.)"""
    model = request.getfixturevalue(name)
    reqs = [("{} is in", "Tower", " Rome"), ("The capital of {} is", "the country of France", " Berlin"),
            ("{} plays the", "Michael Jordan", " bass guitar")]  # other lengths; a two-token target
    hp = {"steps": 8, "lr": 2e-2, "norm_constraint": 2e-2, "loss_stop": 0.0}
    d0 = digest(model)
    # a loss_stop that one fact reaches by its 5th step and another never does
    probe = [e.losses for e in ft.ft_edits(model, reqs, layer, **hp)]
    fast, slow = min(probe, key=lambda l: l[4]), max(probe, key=min)
    assert fast[4] < min(slow), probe
    hp["loss_stop"] = (fast[4] + min(slow)) / 2
    together = ft.ft_edits(model, reqs, layer, **hp)
    assert digest(model) == d0 and not any(e.applied for e in together)
    steps = []
    for req, e in zip(reqs, together):
        alone = ft.ft_edit(model, *req, layer, **hp)
        alone.revert()
        steps.append(len(alone.losses))
        assert len(e.losses) == len(alone.losses), req
        # float rounding of the batched products, which Adam's normalised steps enlarge where a gradient entry
        # is near 0 (its sign decides a step of lr): ~1e-4 relative in the losses, ~1e-3 in D
        assert torch.allclose(torch.tensor(e.losses), torch.tensor(alone.losses), rtol=2e-3, atol=1e-4), req
        rel = float((e.update - alone.update).norm() / alone.update.norm())
        assert rel < 5e-3, (req, rel)
        assert e.timings["batch_share_s"] > 0 and e.request == alone.request
    assert len(set(steps)) > 1, steps  # the stops differed, so each fact did stop on its own loss
    e = together[0].apply(model)
    assert torch.equal(model.mlp_out_matrix(layer).detach().cpu(), e._edited)
    e.revert()
    assert digest(model) == d0
    with pytest.raises(ValueError, match="no FT-L requests"):
        ft.ft_edits(model, [], layer)
    with pytest.raises(ValueError, match="target"):
        ft.ft_edits(model, [reqs[0], ("{} is in", "Tower", "")], layer)


# ----------------------------------------------------------------------------------------------- evaluate
@pytest.fixture(scope="module")
def dev_eval(embedded):
    stats = mlp_key_second_moment(embedded, LAYER, n_tokens=4000, cache=False, progress=False)
    records = rome.load_records(split="dev")[:2]
    d0 = digest(embedded)
    res = er.evaluate(embedded, records, "rome", layer=LAYER, stats=stats, hparams={"mom2_ridge": 1e-3},
                      baseline="ft", gen_tokens=6, drift_docs=2, progress=False)
    return res, records, d0


class TestOneDevEvaluation:
    """Read one evaluation (dev_eval, about a minute): a class, so that make test sends them to one worker."""

    def test_evaluate_leaves_the_model_unchanged(self, embedded, dev_eval):
        res, _, d0 = dev_eval
        assert digest(embedded) == d0

    def test_evaluate_before_scores_match_an_independent_computation(self, embedded, dev_eval):
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

    def test_evaluate_rome_edits_and_beats_its_baseline_on_these_records(self, dev_eval):
        res, records, _ = dev_eval
        f = res.to_frame()
        assert len(f) == len(records) and f["error"].isna().all()
        assert (f["efficacy_score_post"] == 1.0).all() and (f["efficacy_magnitude_post"] > f["efficacy_magnitude_pre"]).all()
        # the new answer can only show up in the logit lens after the edited layer
        assert (f["lens_new_row_post"].dropna() >= LAYER + 1).all()
        assert res.baseline is not None and res.baseline.editor == "ft" and len(res.baseline.to_frame()) == len(f)

    def test_evaluate_aggregates_and_json(self, dev_eval):
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


def test_score_cis_stay_within_their_bounds():
    """Wilson's interval for 0/1 outcomes (checked against its closed form at p = 1: lower = n / (n + z^2)); the
    normal interval, cut at 100, for per-record shares; unbounded metrics keep the plain normal interval."""
    from interp.editing.eval.report import mean_ci

    z2 = 1.96 ** 2
    all_hit = mean_ci("efficacy_score", [100.0] * 20, bounds=(0, 100))
    assert all_hit["mean"] == 100 and all_hit["ci_high"] == 100
    assert abs(all_hit["ci_low"] - 100 * 20 / (20 + z2)) < 1e-9  # not the zero-width [100, 100]
    for n in (1, 7, 100, 464):  # the interval holds its mean at the bounds (at n = 100 rounding gave 99.99999...)
        hit, miss = (mean_ci("efficacy_score", [v] * n, bounds=(0, 100)) for v in (100.0, 0.0))
        assert hit["ci_high"] == 100 >= hit["ci_low"] and miss["ci_low"] == 0 <= miss["ci_high"], n
    vals = [0.0] * 3 + [100.0] * 17
    p, n = 0.85, 20
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = 1.96 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    w = mean_ci("efficacy_score", vals, bounds=(0, 100))
    assert abs(w["ci_low"] - 100 * (centre - half)) < 1e-9 and abs(w["ci_high"] - 100 * (centre + half)) < 1e-9
    shares = [100.0] * 17 + [50.0] * 3
    plain, cut = mean_ci("paraphrase_score", shares), mean_ci("paraphrase_score", shares, bounds=(0, 100))
    assert plain["ci_high"] > 100 and cut["ci_high"] == 100 and cut["ci_low"] == plain["ci_low"]
    assert cut["mean"] == plain["mean"] == 92.5
    with pytest.raises(ValueError, match=r"efficacy_score: values must lie within \(0, 100\)"):
        mean_ci("efficacy_score", [1.0, 101.0], bounds=(0, 100))


def test_evaluate_bad_input(embedded):
    with pytest.raises(ValueError, match="no records"):
        er.evaluate(embedded, [], "rome", layer=LAYER)
    with pytest.raises(ValueError, match="editor 'bogus' not known; allowed: 'rome', 'ft', 'memit'"):
        er.evaluate(embedded, rome.load_records(split="dev")[:1], "bogus", layer=LAYER, stats="identity")
    with pytest.raises(ValueError, match="batch_size=0; allowed"):
        er.evaluate(embedded, rome.load_records(split="dev")[:1], "rome", layer=LAYER, batch_size=0)
    with pytest.raises(ValueError, match="missing keys"):
        er.evaluate(embedded, [{"prompt": "{} is"}], "rome", layer=LAYER)


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
    table = cmp.compare_completions(tiny_llama, e, ["Tower is in", "Bridge is"], n_tokens=3)
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
    e = ft.ft_edit(tiny_llama, "{} is in", "Tower", " Rome", 0, steps=4, lr=1e-2, norm_constraint=2e-3)
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
    e = ft.ft_edit(tiny_llama, "{} is in", "Tower", " Rome", 0, steps=4, lr=5e-2, norm_constraint=5e-2)
    edited = digest(tiny_llama)
    e.revert()
    table = cmp.compare_completions(tiny_llama, e, ["Tower is in", "Bridge is"], n_tokens=3)
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
    cmp.compare_completions(tiny_llama, e, ["Tower is in"], n_tokens=2)
    assert digest(tiny_llama) == edited and e.applied  # ends as it started: applied
    lens = cmp.lens_before_after(tiny_llama, e, target_true=" Oslo")
    assert digest(tiny_llama) == edited and len(lens.to_frame()) == tiny_llama.n_layers + 1
    assert lens.plot().axes and "after the edit" in lens.summary()
    e.revert()
    assert digest(tiny_llama) == d0


@pytest.mark.parametrize("argv, match", [
    (["edit", "--tokens", "-3"], "--tokens"), (["edit", "--mom2-tokens", "0"], "--mom2-tokens"),
    (["edit", "--hparam", "bogus=1"], "unknown ROME hyperparameter"),
    (["eval-edits", "--n", "0"], "--n"), (["eval-edits", "--gen-tokens", "0"], "--gen-tokens"),
    (["eval-edits", "--editor", "ft", "--hparam", "kl_factor=1"], "unknown FT-L hyperparameter"),
    (["eval-edits", "--batch-size", "0"], "--batch-size"),
    (["eval-edits", "--editor", "memit", "--hparam", "bogus=1"], "unknown MEMIT hyperparameter"),
    (["edit", "--editor", "ft", "--hparam", "lr=-1"], r"lr=-1; allowed: a finite number > 0"),
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


# ----------------------------------------------------------------------------------------------- the slow reference
# The measurements as they were before they were batched (one forward per 32 rows, one sampler call per record,
# the drift texts tokenised per call, a float64 log-softmax over the vocabulary): kept here, unchanged, so the
# batched measurements are compared with them and not with themselves.
def ref_target_nll(model, prompts, targets, *, batch_size=32):
    out = []
    for start in range(0, len(prompts), batch_size):
        rows, sel_r, sel_p, ids = [], [], [], []
        for j, (p, t) in enumerate(zip(prompts[start:start + batch_size], targets[start:start + batch_size])):
            pt, tt = model.to_tokens(p)[0].tolist(), model.target_tokens(t)
            rows.append(pt + tt[:-1])
            sel_r += [j] * len(tt)
            sel_p += list(range(len(pt) - 1, len(pt) - 1 + len(tt)))
            ids.append(tt)
        toks, _ = interp.core.inputs.pad_rows(model, rows)
        with torch.no_grad():
            logp = torch.log_softmax(generation.selected_logits(model, toks, torch.tensor(sel_r), torch.tensor(sel_p))
                                     .to(torch.float64).cpu(), -1)
        flat = torch.tensor([i for t in ids for i in t])
        nll = -logp.gather(1, flat[:, None])[:, 0]
        k = 0
        for t in ids:
            out.append(nll[k: k + len(t)].mean())
            k += len(t)
    return torch.stack(out)


def ref_fact_probs(model, fact, groups):
    prompts = [p for g in groups.values() for p in g]
    nll = ref_target_nll(model, prompts * 2, [fact.target_new] * len(prompts) + [fact.target_true] * len(prompts))
    p = torch.exp(-nll).reshape(2, -1).T
    out, k = {}, 0
    for name, g in groups.items():
        out[name] = p[k: k + len(g)]
        k += len(g)
    return out


def ref_fact_scores(probs):
    out = {}
    for name, group, side in (("efficacy", "rewrite", 0), ("paraphrase", "paraphrase", 0),
                              ("neighborhood", "neighborhood", 1), ("paraphrase_other", "paraphrase_other", 0),
                              ("neighborhood_unedited", "neighborhood_unedited", 1)):
        if group in probs:
            pr = probs[group]
            out[f"{name}_score"] = float((pr[:, side] > pr[:, 1 - side]).double().mean())
            out[f"{name}_magnitude"] = float((pr[:, side] - pr[:, 1 - side]).mean())
    return out


def ref_text_nll(model, texts, *, max_len=64, batch_size=8):
    from interp.core.corpus import token_batches

    total, count = 0.0, 0
    for toks, mask, _ in token_batches(model, list(texts), max_len=max_len, batch_size=batch_size):
        with torch.no_grad():
            logp = torch.log_softmax(model.forward(toks).to(torch.float64).cpu(), -1)
        nll = -logp[:, :-1].gather(2, toks[:, 1:, None])[..., 0]
        m = mask[:, 1:]
        total += float(nll[m].sum())
        count += int(m.sum())
    return total / count


def ref_measure(model, fact, seed, gen_tokens, batch=()):
    groups = {"rewrite": [fact.text], "paraphrase": list(fact.paraphrase_prompts),
              "neighborhood": list(fact.neighborhood_prompts)}
    if fact.extra.get("paraphrase_prompts_other"):
        groups["paraphrase_other"] = list(fact.extra["paraphrase_prompts_other"])
    # the neighbours whose subject is not edited in the record's batch (its rewrite prompt is not among theirs)
    groups["neighborhood_unedited"] = [p for p in fact.neighborhood_prompts if p not in {f.text for f in batch}]
    out = ref_fact_scores(ref_fact_probs(model, fact, groups))
    texts = generation.sample_text(model, list(fact.generation_prompts), gen_tokens, seed=seed, top_k=5)
    out["gen_entropy"] = sum(em.ngram_entropy(p + t) for p, t in zip(fact.generation_prompts, texts)) / len(texts)
    out["gen_text"] = texts[0]
    out.update({k: v for k, v in em.lens_rows(model, fact).items() if not k.startswith("_")})
    # the strict form, from the full logits of model.run: is the wanted target's first token the argmax?
    for name, group, target in (("efficacy", "rewrite", fact.target_new), ("paraphrase", "paraphrase", fact.target_new),
                                ("neighborhood", "neighborhood", fact.target_true),
                                ("paraphrase_other", "paraphrase_other", fact.target_new),
                                ("neighborhood_unedited", "neighborhood_unedited", fact.target_true)):
        if group in groups:
            want = model.target_tokens(target)[0]
            hits = [int(model.run(model.to_tokens(p))[0, -1].argmax()) == want for p in groups[group]]
            out[f"{name}_acc"] = sum(hits) / len(hits)
    return out


def small_ft(layer):
    def fn(model, fact):
        return ft.ft_edit(model, fact.prompt, fact.subject, fact.target_new, layer, **SMALL_FT)
    return fn


def _check_row(row, want, when):
    for key, value in want.items():
        got = row[f"{key}_{when}"]
        if key == "gen_text":
            assert got == value, (key, when)
        elif value is None or (isinstance(value, float) and math.isnan(value)):
            assert got is None or got != got, (key, when)
        else:  # float32 rounding of other batch shapes: 2e-5 on a lens probability of 0.77 on one Intel Xeon
            assert abs(float(got) - float(value)) < 1e-5 + 5e-5 * abs(float(value)), (key, when, got, value)


@pytest.fixture(scope="module")
def ref_records():
    recs = [r.to_dict() for r in rome.load_records(split="dev")[2:4]]
    recs[0]["paraphrase_prompts_other"] = ["In which city is " + recs[0]["subject"] + "? It is in",
                                           recs[0]["subject"] + ", a place in the city of"]
    # the second record's rewrite prompt as one of the first's neighbours: edited in the same batch, it leaves
    # neighborhood_unedited (batch_size 2) and stays in it when each record is edited alone
    recs[0]["neighborhood_prompts"] = list(recs[0]["neighborhood_prompts"]) + [recs[1]["prompt"].format(recs[1]["subject"])]
    return [as_fact(r) for r in recs]


SMALL_FT = {"steps": 3, "lr": 5e-2, "norm_constraint": 5e-2}
SMALL_FT_2 = {"steps": 2, "lr": 2e-2, "norm_constraint": 3e-2}


@pytest.mark.parametrize("name, batch_size, layer, kept", [("embedded", 1, LAYER, False), ("tiny_llama", 2, 0, False),
                                                           ("embedded", 1, LAYER, True), ("tiny_llama", 2, 0, True)])
def test_batched_measurements_match_the_slow_reference(request, ref_records, name, batch_size, layer, kept):
    """Every per-record value (both score forms, magnitudes, entropy and its first sample, lens, drift) before
    and after: batch_size 1 against one edit at a time, 2 against both edits applied one after the other.
    A callable editor is measured while its edits are applied; named editors (``kept``: two FT-L settings, editor
    and baseline) are edited, kept and reverted, then measured together with each row under its own edit's
    matrices — against the same reference."""
    embedded = request.getfixturevalue(name)
    d0 = digest(embedded)
    opts = dict(layer=layer, gen_tokens=5, drift_docs=2, progress=False, batch_size=batch_size)
    if kept:
        res = er.evaluate(embedded, ref_records, "ft", hparams=SMALL_FT, baseline="ft", baseline_hparams=SMALL_FT_2,
                          **opts)
        runs = [(res, SMALL_FT), (res.baseline, SMALL_FT_2)]
    else:
        res = er.evaluate(embedded, ref_records, small_ft(layer), **opts)
        runs = [(res, SMALL_FT)]
    assert digest(embedded) == d0
    texts = drift.drift_texts(2)
    loss_pre = ref_text_nll(embedded, texts)
    batches = [ref_records[i:i + batch_size] for i in range(0, len(ref_records), batch_size)]
    befores = [ref_measure(embedded, fact, i, 5, batches[i // batch_size]) for i, fact in enumerate(ref_records)]
    for result, hp in runs:
        f = result.to_frame()
        assert abs(f["loss_pre"].iloc[0] - loss_pre) < 1e-6
        # independent edits (batch_size 1) of a named FT-L are made together (ft.ft_edits; checked against
        # ft_edit alone above), so the reference applies the same edits
        together = (ft.ft_edits(embedded, [(r.prompt, r.subject, r.target_new) for r in ref_records], layer, **hp)
                    if kept and batch_size == 1 else None)
        k = 0
        for batch in batches:
            edits = [together[k + j].apply(embedded) if together else
                     ft.ft_edit(embedded, fact.prompt, fact.subject, fact.target_new, layer, **hp)
                     for j, fact in enumerate(batch)]
            try:
                afters = [ref_measure(embedded, fact, k + j, 5, batch) for j, fact in enumerate(batch)]
                loss_post = ref_text_nll(embedded, texts)
            finally:
                for e in reversed(edits):
                    e.revert()
            for j, fact in enumerate(batch):
                row = f.loc[fact.case_id]
                _check_row(row, befores[k + j], "pre")
                _check_row(row, afters[j], "post")
                assert abs(row["loss_drift"] - 100 * (loss_post - loss_pre) / loss_pre) < 1e-4
            k += len(batch)
        assert math.isnan(f.loc[ref_records[1].case_id, "paraphrase_other_score_post"])
        first = f.loc[ref_records[0].case_id]  # alone, every neighbour is unedited; in a batch of 2, one is not
        same = [first[f"neighborhood_unedited_{k}"] == first[f"neighborhood_{k}"]
                for k in ("score_pre", "magnitude_pre", "score_post", "magnitude_post")]
        assert all(same) if batch_size == 1 else not same[1] and not same[3]
        assert f["efficacy_acc_post"].notna().all() and "paraphrase_other_acc" in result.to_json()
    assert digest(embedded) == d0
    if kept:  # the two settings made different edits, so the shared batch did keep them apart
        assert not res.to_frame()["efficacy_magnitude_post"].equals(res.baseline.to_frame()["efficacy_magnitude_post"])


# ----------------------------------------------------------------------------------------------- failures, batches, CLI
def test_diagnose_applies_each_rule_in_order():
    import pandas as pd

    nan = float("nan")
    f = pd.DataFrame({  # rows: ok, errored, clamp, not converged, key mismatch, small key (key_dot), did not
        "efficacy_score_post": [1.0, nan, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # transfer, unknown
        "error": [None, "ValueError: x", None, None, None, None, None, None],
        "opt_p_final": [0.9, nan, 0.2, 0.3, 0.95, 0.95, 0.95, nan],
        "delta_norm": [1.0, nan, 4.0, 1.0, 1.0, 1.0, 1.0, nan],
        "clamp": [4.0, nan, 4.0, 4.0, 4.0, 4.0, 4.0, nan],
        "key_norm": [10.0, nan, 10.0, 10.0, 10.0, 10.0, 10.0, nan],
        "key_dot": [8.0, nan, 8.0, 8.0, 8.0, 1.0, 8.0, nan],
        "key_match": [1.0, nan, 0.1, 0.1, 0.1, nan, 0.9, nan]})
    assert report.diagnose(f) == [None, None, "clamp bound", "v* not converged", "key mismatch", "small key",
                                "edit did not transfer", "unknown"]
    assert report.diagnose(f.drop(columns="key_match"))[4] == "edit did not transfer"  # FT-L, MEMIT: no key_match


def test_failed_edits_are_diagnosed_and_reported(tiny_llama, tmp_path):
    _tiny_records(tmp_path / "r.jsonl")
    recs = rome.load_records(tmp_path / "r.jsonl")
    weak = {"steps": 2, "lr": 1e-4, "norm_constraint": 1e-5}  # far too small to move the answer
    d0 = digest(tiny_llama)
    res = er.evaluate(tiny_llama, recs, "ft", layer=0, hparams=weak, gen_tokens=3, drift_docs=2, lens=False,
                      progress=False, batch_size=2)
    assert digest(tiny_llama) == d0
    f = res.to_frame()
    failed = f[f["efficacy_score_post"] == 0]
    assert len(failed) > 0 and (failed["failure"] == "clamp bound").all()
    assert f.loc[f["efficacy_score_post"] > 0, "failure"].isna().all()
    out = res.to_json()
    assert [x["case_id"] for x in out["failures"]] == list(failed.index)
    assert out["failure_counts"] == {"clamp bound": len(failed)} and "clamp bound" in res.summary()
    for key in ("efficacy_acc", "paraphrase_acc", "neighborhood_acc", "harmonic_mean_acc"):
        assert key in out and f"{key}_before" in out
    assert "paraphrase_other_score" not in out  # no record has the second paraphrase set
    assert res.settings["batch_size"] == 2 and "efficacy acc (top-1)" in res.table().index


def test_a_shard_run_apart_gives_the_one_run_numbers(tiny_llama, tmp_path):
    """evaluate(first_index=k) on records[k:] seeds each record as the run over all of them does."""
    _tiny_records(tmp_path / "r.jsonl")
    recs = rome.load_records(tmp_path / "r.jsonl")
    opts = dict(layer=0, gen_tokens=6, drift_docs=2, lens=False, progress=False)
    whole = er.evaluate(tiny_llama, recs, small_ft(0), **opts).to_frame()
    shard = er.evaluate(tiny_llama, recs[1:], small_ft(0), first_index=1, **opts).to_frame()
    unseeded = er.evaluate(tiny_llama, recs[1:], small_ft(0), **opts).to_frame()
    cid = recs[1].case_id
    for when in ("pre", "post"):
        assert shard.loc[cid, f"gen_text_{when}"] == whole.loc[cid, f"gen_text_{when}"]
        assert abs(shard.loc[cid, f"gen_entropy_{when}"] - whole.loc[cid, f"gen_entropy_{when}"]) < 1e-9
        for key in ("efficacy", "paraphrase", "neighborhood"):
            assert abs(shard.loc[cid, f"{key}_magnitude_{when}"] - whole.loc[cid, f"{key}_magnitude_{when}"]) < 1e-5
    assert abs(shard.loc[cid, "loss_drift"] - whole.loc[cid, "loss_drift"]) < 1e-4
    # the seed is what the index changes: the same shard without first_index draws other samples
    assert unseeded.loc[cid, "gen_text_pre"] != whole.loc[cid, "gen_text_pre"]
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="first_index"):
            er.evaluate(tiny_llama, recs, small_ft(0), first_index=bad, **opts)


def test_memit_batch_evaluation_reverts_every_layer(tiny_llama, tmp_path):
    _tiny_records(tmp_path / "r.jsonl")
    recs = rome.load_records(tmp_path / "r.jsonl")
    layers = [0]  # the tiny model's only layer MEMIT may edit (a later layer must read the residual)
    stats = {l: mlp_key_second_moment(tiny_llama, l, n_tokens=2000, cache=False, progress=False) for l in layers}
    d0 = digest(tiny_llama)
    res = er.evaluate(tiny_llama, recs, "memit", layer=0, stats=stats, hparams={"layers": layers, "v_steps": 3},
                      gen_tokens=3, drift_docs=2, lens=False, progress=False, batch_size=2)
    assert digest(tiny_llama) == d0
    f = res.to_frame()
    assert res.editor == "memit" and res.layers == layers and f["error"].isna().all()
    # both facts share one edit: the batch's drift and the per-fact share of its time on every row
    assert f["loss_drift"].nunique() == 1 and f["edit_seconds"].nunique() == 1
    assert f["opt_p_final"].notna().all()
    assert f["key_match"].between(-10, 10).all()  # MEMIT reports its bare-prompt key share (failure diagnosis)
    drift = res.aggregates().loc["loss_drift"]  # one batch, one drift measurement: no CI from repeated rows
    assert drift["n"] == 1 and drift["mean"] == f["loss_drift"].iloc[0] and math.isnan(drift["ci_low"])


def test_cli_edit_records_and_eval_batch(tiny_llama, tmp_path):
    from interp.cli.edit import cli_edit

    _tiny_records(tmp_path / "r.jsonl")
    args = types.SimpleNamespace(prompt="{} is in", subject="Tower", target=" Rome", layer=0, seed=0, also=["Hi"],
                                 tokens=3, save=None, mom2_tokens=2000, hparam=["steps=2"], editor="ft",
                                 records=str(tmp_path / "r.jsonl"), html=None, json=True)
    d0 = digest(tiny_llama)
    out = cli_edit(args, model=tiny_llama)
    assert digest(tiny_llama) == d0
    assert out["n_edits"] == 2 and len(out["completions"]) == 3 and len(out["probabilities"]) == 2
    p = out["probabilities"][0]
    want = float(torch.exp(-em.target_nll(tiny_llama, ["Tower is in"], [" Rome"]))[0])
    assert abs(p["p_new_before"] - want) < 1e-6 and "P(Rome)" in out["_text"]
    args.save = str(tmp_path / "e")  # FT-L edits save too: one file pair per edit, each re-applies what was written
    out = cli_edit(args, model=tiny_llama)
    assert digest(tiny_llama) == d0 and len(out["saved"]) == 2
    for path in out["saved"]:
        with tiny_llama.edited(rome.load_ft_edit(path)):
            assert digest(tiny_llama) != d0
    assert digest(tiny_llama) == d0
    eargs = types.SimpleNamespace(split="test", n=None, editor="ft", baseline="none", records=str(tmp_path / "r.jsonl"),
                                  layer=0, seed=0, gen_tokens=3, no_generation=True, no_drift=True, no_lens=True,
                                  out=None, csv=None, mom2_tokens=2000, json=True, batch_size=2, hparam=["steps=2"])
    res = cli_eval_edits(eargs, model=tiny_llama)
    assert digest(tiny_llama) == d0
    assert res["batch_size"] == 2 and res["settings"]["batch_size"] == 2 and "efficacy_acc" in res
