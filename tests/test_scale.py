"""Sequential and mass editing (interp.editing.eval.scale): a run that changes nothing measures exactly zero drift and
entropy change and the unedited efficacy; a harmful edit is caught as collapse at the step that made it; the
checkpoint scores of two ROME edits equal evaluate()'s scores of the same two edits applied together; every run
ends with the weights bit-identical; bad input is refused before anything runs."""

import json
import math

import pytest
import torch

from interp.editing import defaults as editing_defaults
from interp.editing import rome as editing_rome
from interp.editing.eval.measure import fact_scores, measure_probs
from interp.editing.eval.run import evaluate
from interp.editing.eval.scale import retention, sequential_edits
from interp.editing.eval.scale_result import ScaleResult, mass_table, plot_mass
from interp.editing.facts import load_records
from interp.editing.ft import ft_edit
from interp.editing.hparams import RomeHparams

FAST = {"v_steps": 5, "templates": [[5, 1]]}


class NoiseEdit:
    """Adds seeded noise of size ``scale`` x |W| to a down projection; revert restores the saved matrix."""

    def __init__(self, model, layer: int, scale: float, seed: int):
        self.model, self.layer = model, layer
        w = model.mlp_out_matrix(layer)
        self.saved = w.detach().clone()
        g = torch.Generator().manual_seed(seed)
        noise = torch.randn(w.shape, generator=g, dtype=torch.float32).to(w.dtype)
        with torch.no_grad():
            w.add_(noise * scale * w.detach().norm() / noise.norm())

    def revert(self):
        with torch.no_grad():
            self.model.mlp_out_matrix(self.layer).copy_(self.saved)


@pytest.fixture(scope="module")
def facts():
    return load_records(split="test")[:3]


@pytest.fixture(scope="module")
def unchanged(embedded, facts):
    """One run whose edits change nothing (checkpoints at steps 1 and 3), read by the tests below that need no
    other: a measured run costs ~15 s, and each would make the same one. Returns (result, digest before)."""
    digest = embedded.weights_digest()
    res = sequential_edits(embedded, facts, lambda m, f: NoiseEdit(m, 5, 0.0, 0), progress=False,
                           checkpoints=[1, 3], gen_tokens=8)
    return res, digest


class TestOneUnchangedRun:
    """Read one run that changes nothing (unchanged): a class, so that make test sends them to one worker."""

    def test_a_run_that_changes_nothing_measures_nothing(self, embedded, facts, unchanged):
        res, digest = unchanged
        f = res.to_frame()
        assert list(f["n_edited"]) == [1, 2, 3]
        assert (f["loss_drift"] == 0).all() and (f["entropy_drop"] == 0).all()  # same weights, same seeds
        unedited = [fact_scores(m["probs"], m["hits"]) for m in measure_probs(embedded, facts)]
        assert f["retention"].iloc[-1] == pytest.approx(100 * sum(u["efficacy_score"] for u in unedited) / 3)
        assert res.final_scores()["neighborhood_score"] == pytest.approx(
            100 * sum(u["neighborhood_score"] for u in unedited) / 3)
        assert res.before["scores"]["efficacy_score"]["mean"] == pytest.approx(f["retention"].iloc[-1])
        assert res.collapse is None and "no collapse" in res.summary()
        assert embedded.weights_digest() == digest

    @pytest.mark.parametrize("stretch", [1, 60], ids=["3 facts, linear axis", "as if 1-120 facts, log axis"])
    def test_the_run_figure_keeps_every_text_on_the_canvas(self, unchanged, stretch):
        """ScaleResult.plot: the title (the whole summary, wrapped, never cut), labels, legends and tick labels all lie
        inside the figure, and the x axis "facts edited" has no negative tick (it once was symlog, with a "-10¹" tick
        and a third of each panel left of zero). ``stretch`` relabels the 3 steps as 1, 60, 120 facts edited with a
        collapse at the last, the shape of a long run, whose axis is logarithmic from 1."""
        res = unchanged[0]
        if stretch > 1:
            doc = json.loads(json.dumps(res.to_json()))
            for rows in (doc["steps"], doc["checkpoints"]):
                for row in rows:
                    row["n_edited"] = max(1, (row["step"] - 1) * stretch)
            res = ScaleResult.from_json(doc)
            res.settings["max_drift"] = 1e-9  # every step crosses it: a collapse line and a long summary
            res.steps[-1]["loss_drift"] = 1.0
            assert res.collapse is not None
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        run_fig, mass_fig = res.plot(), plot_mass([res])
        assert run_fig._suptitle.get_text().replace("\n", " ") == res.summary()  # wrapped, not cut
        assert all((ax.get_xscale() == "log") == (stretch > 1) for ax in run_fig.axes)
        for fig in (run_fig, mass_fig):
            FigureCanvasAgg(fig)  # the library's figures live outside pyplot; draw them as a PNG would be
            fig.canvas.draw()
            renderer = fig.canvas.get_renderer()
            box = fig.bbox
            texts = _drawn_texts(fig)
            assert fig._suptitle in texts
            for t in texts:
                e = t.get_window_extent(renderer)
                assert (e.x0 >= box.x0 - 0.5 and e.y0 >= box.y0 - 0.5 and e.x1 <= box.x1 + 0.5
                        and e.y1 <= box.y1 + 0.5), (t.get_text(), e, box)
            for ax in fig.axes:
                labels = _x_tick_labels(ax)
                assert labels and not any(s.lstrip("$").startswith(("-", "\N{MINUS SIGN}")) for s in labels), labels
                assert min(ax.get_xlim()) >= 0


def _drawn_texts(fig):
    """Every text the renderer drew: visible, non-empty, and (for tick labels) at a tick inside its axis' view."""
    from matplotlib.text import Text

    hidden = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                loc = tick.get_loc()
                if loc is None or not lo - 1e-9 * abs(hi - lo) <= loc <= hi + 1e-9 * abs(hi - lo):
                    hidden.update((id(tick.label1), id(tick.label2)))
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and id(t) not in hidden]


def _x_tick_labels(ax):
    lo, hi = sorted(ax.get_xlim())
    return [t.get_text() for t, loc in zip(ax.get_xticklabels(), ax.get_xticks())
            if lo <= loc <= hi and t.get_visible() and t.get_text().strip()]


def test_probing_every_k_steps_measures_the_same_on_those_steps(embedded, facts):
    """probe_every=2: retention and entropy on steps 2 and 3 (the last) only, each equal to the run that probes
    every step; the loss drift on every step. measure_from: the same edits, measured from that step on."""
    editor = lambda m, f: NoiseEdit(m, 5, 0.02, f.case_id)  # noqa: E731
    every = sequential_edits(embedded, facts, editor, progress=False, checkpoints=[3], gen_tokens=8,
                             score_before=False).to_frame()
    some = sequential_edits(embedded, facts, editor, progress=False, checkpoints=[3], gen_tokens=8,
                            score_before=False, probe_every=2).to_frame()
    assert some["loss_drift"].tolist() == every["loss_drift"].tolist() and every["loss_drift"].abs().min() > 0
    for col in ("retention", "retention_acc", "generation_entropy", "entropy_drop"):
        assert some[col].isna().tolist() == [True, False, False], col
        assert some[col].iloc[1:].tolist() == every[col].iloc[1:].tolist(), col
    # measure_from=3: steps 1-2 only edit, step 3 measures what the full run measured there
    late = sequential_edits(embedded, facts, editor, progress=False, checkpoints=[3], gen_tokens=8,
                            score_before=False, measure_from=3).to_frame()
    for col in ("loss_drift", "retention", "generation_entropy"):
        assert late[col].isna().tolist() == [True, True, False], col
        assert late[col].iloc[2] == every[col].iloc[2], col


def test_a_harmful_edit_is_named_as_the_collapse(embedded, facts, tmp_path):
    digest = embedded.weights_digest()
    scales = {facts[0].case_id: 0.0, facts[1].case_id: 3.0, facts[2].case_id: 0.0}
    partial = []
    res = sequential_edits(embedded, facts, lambda m, f: NoiseEdit(m, 5, scales[f.case_id], f.case_id),
                           progress=False, checkpoints=[1, 3], generation=False, score_before=False,
                           on_checkpoint=partial.append)
    assert embedded.weights_digest() == digest  # reverted bit for bit
    # after each checkpoint the run so far: the first holds step 1 alone, the last is the whole result
    assert [([r["step"] for r in p.steps], [c["step"] for c in p.checkpoints]) for p in partial] == [
        ([1], [1]), ([1, 2, 3], [1, 3])]
    strip = lambda d: {k: v for k, v in d.items() if k != "seconds"}  # noqa: E731
    assert json.dumps(strip(partial[-1].to_json())) == json.dumps(strip(res.to_json()))
    assert partial[0].collapse is None and partial[-1].collapse == res.collapse
    c = res.collapse
    assert c is not None and c["step"] == 2 and c["case_ids"] == [facts[1].case_id], c
    assert "loss drift" in c["reason"] and res.steps[1]["loss_drift"] > 10
    assert c["sudden"] and c["increment"] == res.steps[1]["loss_drift"] - res.steps[0]["loss_drift"]
    assert "this step alone added" in c["reason"]
    assert res.steps[0]["loss_drift"] == 0
    # the result protocol, and a JSON round trip that keeps every number
    doc = json.loads(json.dumps(res.to_json()))
    back = ScaleResult.from_json(doc)
    assert back.summary() == res.summary()
    assert json.dumps(back.collapse) == json.dumps(c)
    back.steps[0]["loss_drift"] = math.nan  # step 1 not measured: the jump is in steps 1-2, no single edit named
    unmeasured = back.collapse
    assert unmeasured["step"] == 2 and unmeasured["sudden"] is None and unmeasured["since_step"] == 0
    assert unmeasured["increment"] == res.steps[1]["loss_drift"] and "not told apart" in unmeasured["reason"]
    assert list(res.checkpoint_frame()["n_edited"].unique()) == [1, 3]
    res.plot(out=tmp_path / "seq.png")
    assert (tmp_path / "seq.png").stat().st_size > 0
    table = mass_table([res, back])
    assert list(table["n_edited"]) == [1, 3, 1, 3] and set(table["mode"]) == {"one by one"}
    # a score's CI lies within [0, 100] and holds its mean (a share of one fact has none: NaN)
    for m, t in (("efficacy_score", table), ("neighborhood_acc", table[table["n_edited"] == 3])):
        assert ((0 <= t[f"{m}_ci_low"]) & (t[f"{m}_ci_low"] <= t[m])).all()
        assert ((t[m] <= t[f"{m}_ci_high"]) & (t[f"{m}_ci_high"] <= 100)).all()
    plot_mass([res], out=tmp_path / "mass.png")
    with pytest.raises(ValueError, match="not a ScaleResult"):
        ScaleResult.from_json({"result": "EvalResult"})


def test_checkpoint_neighbourhood_leaves_out_neighbours_edited_earlier(embedded, facts):
    """A neighbour prompt of fact 0 that is fact 1's rewrite prompt counts in ``neighborhood_unedited`` at step 1
    and not at step 3, once fact 1 is edited; checked against the same facts scored without that prompt."""
    import dataclasses

    f0 = dataclasses.replace(facts[0], neighborhood_prompts=(facts[1].text, *facts[0].neighborhood_prompts[:2]))
    run = [f0, *facts[1:]]
    res = sequential_edits(embedded, run, lambda m, f: NoiseEdit(m, 5, 0.0, 0), progress=False, generation=False,
                           drift=False, score_before=False, checkpoints=[1, 3])
    without = dataclasses.replace(f0, neighborhood_prompts=f0.neighborhood_prompts[1:])
    scored = lambda fs: [fact_scores(m["probs"], m["hits"]) for m in measure_probs(embedded, fs)]
    first, last = (c["scores"] for c in res.checkpoints)
    for kind in ("score", "acc"):
        key = f"neighborhood_unedited_{kind}"
        assert first[key]["mean"] == pytest.approx(100 * scored([f0])[0][f"neighborhood_{kind}"])
        rows = scored([without, *facts[1:]])
        assert last[key]["mean"] == pytest.approx(100 * sum(r[f"neighborhood_{kind}"] for r in rows) / 3)
    # the left-out prompt asks fact 0's answer of fact 1's prompt: it is not the top-1, so the two forms differ
    assert last["neighborhood_unedited_acc"]["mean"] != last["neighborhood_acc"]["mean"]


def test_a_collapse_reached_by_accumulation_is_told_apart_from_a_jump(embedded):
    """Eight small noise edits: with the threshold set between the 7th and 8th drift, step 8 crosses it having
    added a small share of it (accumulation; a step that crosses it alone: test_a_harmful_edit_is_named...)."""
    recs = load_records(split="test")[:8]
    res = sequential_edits(embedded, recs, lambda m, f: NoiseEdit(m, 5, 0.3, f.case_id), progress=False,
                           generation=False, score_before=False, probe_every=8, checkpoints=[8])
    d = res.to_frame()["loss_drift"].tolist()
    assert d[-1] > max(d[:-1]) > 0, d
    res.settings["max_drift"] = (max(d[:-1]) + d[-1]) / 2
    c = res.collapse
    assert c["step"] == 8 and c["sudden"] is False and c["increment"] == d[-1] - d[-2], (c, d)
    assert c["increment"] < 0.25 * res.settings["max_drift"] and "reached by accumulation" in c["reason"]
    assert "reached by accumulation" in res.summary()


def test_a_refused_edit_is_skipped_with_its_reason(embedded, facts):
    def editor(model, fact):
        if fact.case_id == facts[1].case_id:
            raise ValueError(f"target {fact.target_new!r} is already the model's answer to the prompt")
        return NoiseEdit(model, 5, 0.0, 0)

    res = sequential_edits(embedded, facts, editor, progress=False, generation=False, drift=False,
                           score_before=False)
    assert [r["n_edited"] for r in res.steps] == [1, 1, 2]  # the refused fact is not counted as edited
    assert res.steps[1]["failed"] == [facts[1].case_id]
    assert res.steps[1]["failed_reasons"] == [f"ValueError: target {facts[1].target_new!r} is already the "
                                              "model's answer to the prompt"]
    assert res.steps[0]["failed"] == res.steps[0]["failed_reasons"] == []
    assert res.checkpoints[-1]["scores"]["efficacy_score"]["n"] == 2


def test_a_fact_forgotten_later_is_told_apart_from_one_never_flipped(embedded, facts):
    """Step 1 FT-L-edits fact 0 (it flips); step 2 writes the unedited matrix back, so fact 0 is forgotten and
    fact 1 (not edited) never flips; step 3 changes nothing. Each edit's ``flipped`` is its fact's efficacy
    scored in full (measure_probs) at a checkpoint right after its step."""
    layer = editing_defaults.default_layer(embedded)
    unedited = embedded.mlp_out_matrix(layer).detach().clone()

    class Reset:
        def __init__(self, model):
            self.w = model.mlp_out_matrix(layer)
            self.saved = self.w.detach().clone()
            with torch.no_grad():
                self.w.copy_(unedited)

        def revert(self):
            with torch.no_grad():
                self.w.copy_(self.saved)

    def editor(model, fact):
        if fact.case_id == facts[0].case_id:
            return ft_edit(model, fact.prompt, fact.subject, fact.target_new, layer)
        return Reset(model) if fact.case_id == facts[1].case_id else NoiseEdit(model, 5, 0.0, 0)

    digest = embedded.weights_digest()
    res = sequential_edits(embedded, facts, editor, progress=False, generation=False, drift=False,
                           score_before=False, checkpoints=[1, 2, 3])
    assert embedded.weights_digest() == digest
    made = {e["case_id"]: e for r in res.steps for e in r["edits"]}
    ids = [f.case_id for f in facts]
    assert [made[c]["flipped"] for c in ids] == [True, False, False]
    first = res.checkpoints[0]["scores"]
    assert first["efficacy_score"]["mean"] == 100.0
    assert first["efficacy_acc"]["mean"] == 100 * made[ids[0]]["flipped_acc"]
    assert [c["failing"] for c in res.checkpoints] == [[], ids[:2], ids]
    f = res.failures()
    assert f.to_dict("list") == {"case_id": ids, "step": [1, 2, 3], "flipped": [True, False, False],
                                 "why": ["forgotten later", "never flipped", "never flipped"]}
    assert "3 failing efficacy (never flipped 2, forgotten later 1)" in res.summary()
    back = ScaleResult.from_json(json.loads(json.dumps(res.to_json())))
    assert back.failures().equals(f)
    for r in back.steps:  # a run saved before edits were checked as made
        for e in r["edits"]:
            del e["flipped"]
    assert set(back.failures()["why"]) == {"not recorded"}


def test_checkpoint_scores_equal_evaluate_with_the_same_edits(embedded, facts):
    """Two ROME edits one after another: the final checkpoint scores every fact with both applied, as
    evaluate(batch_size=2) does through its own measurement and aggregation code (given the sequential defaults'
    smaller updates; its guard only refuses, it does not change an edit)."""
    digest = embedded.weights_digest()
    two = facts[:2]
    res = sequential_edits(embedded, two, "rome", hparams=FAST, progress=False, generation=False, drift=False,
                           score_before=False)
    seq = dict(editing_defaults.DEFAULTS[embedded.fingerprint].sequential["rome"])
    assert seq.pop("max_loss_rise") == editing_defaults.GUARD_BOUND
    assert seq["clamp_norm_factor"] < RomeHparams.clamp_norm_factor
    assert seq["v_loss_stop"] > RomeHparams.v_loss_stop
    ev = evaluate(embedded, two, "rome", hparams={**seq, **FAST}, batch_size=2, generation=False, drift=False,
                  lens=False, progress=False).to_json()
    final = res.final_scores()
    for key in ("efficacy_score", "paraphrase_score", "neighborhood_score", "efficacy_acc", "neighborhood_acc",
                "paraphrase_other_score"):
        assert final[key] == pytest.approx(ev[key], abs=1e-9), key
    assert res.steps[-1]["retention"] == pytest.approx(final["efficacy_score"])
    # each step keeps its edit's diagnostics (what the failure diagnosis reads), and the guard was on
    diag = [e for r in res.steps for e in r["edits"]]
    assert [e["case_id"] for e in diag] == [f.case_id for f in two]
    assert all(0 < e["opt_p_final"] <= 1 and e["key_dot"] > 0 and e["relative_update"] > 0 for e in diag)
    assert res.hparams["max_loss_rise"] == editing_defaults.GUARD_BOUND > 0
    assert all(abs(e["loss_rise"]) < editing_defaults.GUARD_BOUND for e in diag)
    assert {k: res.hparams[k] for k in seq} == seq and all(e["delta_norm"] <= e["clamp"] * (1 + 1e-6) for e in diag)
    # the run records what the defaults table set (every entry FAST does not override)
    table = editing_defaults.DEFAULTS[embedded.fingerprint].sequential["rome"]
    assert res.settings["sequential_defaults"] == {k: v for k, v in table.items() if k not in FAST}
    # the same call with the single-edit values wins over the defaults and makes a larger edit
    big = sequential_edits(embedded, two[:1], "rome", hparams={**FAST, "clamp_norm_factor": 4.0}, progress=False,
                           generation=False, drift=False, score_before=False)
    assert big.hparams["clamp_norm_factor"] == 4.0 and big.hparams["v_loss_stop"] == seq["v_loss_stop"]
    assert "clamp_norm_factor" not in big.settings["sequential_defaults"]
    assert big.steps[0]["edits"][0]["clamp"] == pytest.approx(diag[0]["clamp"] * 4.0 / seq["clamp_norm_factor"])
    assert embedded.weights_digest() == digest


def test_the_rome_guard_skips_an_edit_that_raises_the_loss(embedded, facts, monkeypatch):
    """sequential_edits turns ROME's guard on: the edit it refuses is skipped with its reason, the rest go on."""
    digest = embedded.weights_digest()
    rises = iter([0.1, 7.5, 0.2])
    monkeypatch.setattr(editing_rome, "loss_rise", lambda model, layer, new: next(rises))
    res = sequential_edits(embedded, facts, "rome", hparams=FAST, progress=False, generation=False, drift=False,
                           score_before=False)
    assert [r["n_edited"] for r in res.steps] == [1, 1, 2] and res.steps[1]["failed"] == [facts[1].case_id]
    assert "raise the loss on reference text by 7.50%" in res.steps[1]["failed_reasons"][0]
    assert [e["loss_rise"] for r in res.steps for e in r["edits"]] == [0.1, 0.2]
    off = sequential_edits(embedded, facts[:1], "rome", hparams={**FAST, "max_loss_rise": 0}, progress=False,
                           generation=False, drift=False, score_before=False)
    assert off.hparams["max_loss_rise"] == 0 and math.isnan(off.steps[0]["edits"][0]["loss_rise"])
    assert embedded.weights_digest() == digest


def test_retention_matches_the_full_scores(embedded, facts):
    success, strict = retention(embedded, facts)
    full = [fact_scores(m["probs"], m["hits"]) for m in measure_probs(embedded, facts)]
    assert success == [u["efficacy_score"] for u in full]
    assert strict == [u["efficacy_acc"] for u in full]


@pytest.mark.parametrize("kwargs, match", [
    ({"batch_size": 0}, r"batch_size=0; allowed: an integer >= 1"),
    ({"checkpoints": [4]}, r"checkpoints entry 4; allowed: step numbers 1\.\.3"),
    ({"editor": "memitt"}, r"editor 'memitt' not known; allowed: 'rome', 'ft', 'memit'"),
    ({"max_drift": -1}, r"max_drift=-1; allowed: a number > 0"),
    ({"on_checkpoint": "out.json"}, r"on_checkpoint='out.json'; allowed: None or a callable"),
    ({"probe_every": 0}, r"probe_every=0; allowed: an integer >= 1"),
    ({"measure_from": 4}, r"measure_from=4; allowed: a step number 1\.\.3"),
    ({"measure_from": 2, "checkpoints": [1, 3]}, r"checkpoint 1 comes before measure_from=2"),
])
def test_bad_input(embedded, facts, kwargs, match):
    kwargs = {"editor": "rome", **kwargs}
    with pytest.raises(ValueError, match=match):
        sequential_edits(embedded, facts, progress=False, **kwargs)
    with pytest.raises(ValueError, match="no records"):
        sequential_edits(embedded, [], "rome")


def test_memit_batches_with_a_subject_twice_are_edited_in_rounds(embedded):
    """Two facts about one subject (different relations) share its key: they go into consecutive MEMIT edits;
    the same subject and prompt with two targets is a contradiction, named with both records."""
    from interp.editing.memit_solve import subject_rounds

    recs = [{"subject": "A", "prompt": "{} is in", "target_new": " x"},
            {"subject": "B", "prompt": "{} is in", "target_new": " y"},
            {"subject": "A", "prompt": "{} speaks", "target_new": " z"},
            {"subject": "A", "prompt": "{} plays", "target_new": " w"}]
    assert subject_rounds(recs) == [[0, 1], [2], [3]]
    bad = [*recs, {"subject": "B", "prompt": "{} is in", "target_new": " q"}]
    with pytest.raises(ValueError, match=r"subject 'B' with prompt '\{\} is in' has two different targets: record 1 "
                                         r"-> ' y' and record 4 -> ' q'"):
        subject_rounds(bad)


def test_a_run_where_every_edit_fails_still_reports(embedded, facts):
    def refuse(model, fact):
        raise ValueError(f"no edit of {fact.subject!r} today")

    res = evaluate(embedded, facts[:1], refuse, generation=False, drift=False, lens=False, progress=False)
    doc = res.to_json()
    assert doc["n_failed"] == 1 and "no edit of" in res.to_frame()["error"].iloc[0]
    assert "efficacy_score" not in doc  # no record has an after-score
    assert res.summary().startswith("refuse on 1 records")
    assert res.to_frame()["efficacy_score_pre"].notna().all()  # the before-measurements are kept per record


class Stop(Exception):
    pass


def test_a_stopped_run_continues_from_its_save_with_the_same_numbers(embedded, facts, tmp_path):
    """state_dir: a run stopped after step 1 and started again with the same directory makes the uninterrupted
    run's edits and measurements (every number but the timings), the model is bit-identical after the stop and
    after the end, a finished run's save returns its result without editing, and another run's save is refused."""
    digest = embedded.weights_digest()
    facts = facts[:2]
    opts = {"hparams": {**FAST, "max_loss_rise": 0.0}, "checkpoints": [1, 2], "generation": False, "progress": False}
    whole = sequential_edits(embedded, facts, "rome", **opts)
    state = tmp_path / "state"

    def stop_at_2(partial):
        if partial.steps[-1]["step"] == 2:
            raise Stop

    with pytest.raises(Stop):
        sequential_edits(embedded, facts, "rome", on_checkpoint=stop_at_2, state_dir=state, **opts)
    assert embedded.weights_digest() == digest
    assert sorted(p.name for p in state.iterdir()) == ["step-00001.json", "step-00001.safetensors"]
    cont = sequential_edits(embedded, facts, "rome", state_dir=state, **opts)
    assert embedded.weights_digest() == digest
    assert cont.settings["resumed_at"] == [2] and whole.settings["resumed_at"] == []

    def numbers(res):
        doc = json.loads(json.dumps(res.to_json()))
        for row in doc["steps"]:
            row.pop("edit_seconds")
        doc["settings"].pop("resumed_at")
        return {k: doc[k] for k in ("steps", "checkpoints", "before", "collapse", "summary", "settings")}

    assert numbers(cont) == numbers(whole)
    assert cont.steps[1]["edits"][0]["relative_update"] > 0  # the continued steps edited something
    # finished: the save is the result; nothing is edited again
    again = sequential_edits(embedded, facts, "rome", state_dir=state, **opts)
    assert numbers(again) == numbers(whole) and again.steps[1]["edit_seconds"] == cont.steps[1]["edit_seconds"]
    assert embedded.weights_digest() == digest
    with pytest.raises(ValueError, match=r"holds another run \(it differs in case_ids, checkpoints, settings\)"):
        sequential_edits(embedded, facts[:1], "rome", state_dir=state, **{**opts, "checkpoints": [1]})
    with pytest.raises(ValueError, match="state_dir needs an editor named by string"):
        sequential_edits(embedded, facts, lambda m, f: NoiseEdit(m, 5, 0.0, 0), state_dir=tmp_path / "x",
                         progress=False)
    (state / "step-00002.safetensors").write_bytes(b"not a tensor file")
    with pytest.raises(ValueError, match=r"holds no complete save \(step 2: .*were altered"):
        sequential_edits(embedded, facts, "rome", state_dir=state, **opts)
    assert embedded.weights_digest() == digest
